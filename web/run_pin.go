package web

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/views"
)

// pinRun pins (pinned=true) or unpins (pinned=false) one of the user's runs:
// trace retention never prunes a pinned run. Another user's run is the same 404
// as a missing one. The run viewer shows the button.
func (s *Server) pinRun(c echo.Context) error {
	pinned, err := strconv.ParseBool(c.FormValue("pinned"))
	if err != nil {
		return errs.E(errs.Invalid, "pinned must be true or false")
	}
	u, _ := currentUser(c)
	if err := s.Store.SetRunPinned(c.Request().Context(), u.ID, c.Param("rid"), pinned); err != nil {
		return err
	}
	if isHTMX(c) { // the run page's button, in its new state
		return render(c, http.StatusOK, views.RunPinButton(c.Param("rid"), pinned))
	}
	return c.NoContent(http.StatusNoContent)
}
