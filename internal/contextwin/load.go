package contextwin

import "atrium/internal/store"

// DefaultLoadMax is how many of a session's newest messages a turn loads for
// Assemble (store.DB.LoadContextMessages): more than any window holds, and a
// bound that keeps the load's cost independent of the session's length.
const DefaultLoadMax = store.DefaultContextMessages
