package agent

import (
	"time"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// EventKind says what happened.
type EventKind int

const (
	EventUserMessage   EventKind = iota // Message: the committed user message
	EventQueued                         // Text: a message waiting for the current reply to end
	EventRunStarted                     // a reply is being generated (Model set)
	EventContext                        // Report: what went into the model's context this step
	EventText                           // Text: a delta of the reply
	EventReasoning                      // Text: a delta of reasoning/thinking
	EventAssistantStep                  // Message: a committed assistant message that called tools; a new reply follows
	EventToolStarted                    // ToolCall: a tool is running
	EventToolResult                     // ToolCall, Result, Message (the committed tool message)
	EventTaskState                      // State: the session's task state changed
	EventFinal                          // Message: the committed final assistant message (complete, stopped or error)
	EventNotice                         // Text: something the user should know that is not a message
)

// Event is one step of a run. The same stream feeds the UI (the websocket hub); the
// recorder writes the call chain from the run itself.
type Event struct {
	Kind      EventKind
	SessionID string
	Message   *store.Message
	Text      string
	Model     string
	ToolCall  *llm.ToolCall
	Result    *tools.Result
	Report    *contextwin.Report
	State     []byte
	At        time.Time
}
