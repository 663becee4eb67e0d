package web

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/views"
)

// statusOf maps an error code to its HTTP status. This is the only place that does.
func statusOf(code string) int {
	switch code {
	case errs.Invalid:
		return http.StatusBadRequest
	case errs.Unauthorized:
		return http.StatusUnauthorized
	case errs.Forbidden:
		return http.StatusForbidden
	case errs.NotFound:
		return http.StatusNotFound
	case errs.Conflict, errs.Busy:
		return http.StatusConflict
	case errs.TooLarge:
		return http.StatusRequestEntityTooLarge
	case errs.RateLimited:
		return http.StatusTooManyRequests
	case errs.Unavailable:
		return http.StatusBadGateway
	case errs.Storage:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// handleError renders every error response: a full error page for navigations, a short
// text for htmx requests (app.js shows it in the notice area).
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, msg := http.StatusInternalServerError, errs.Message(err)
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he):
		status = he.Code
		msg = http.StatusText(status)
		if status == http.StatusNotFound {
			msg = "This page does not exist, or it is not yours."
		}
	default:
		status = statusOf(errs.Code(err))
	}
	if status >= 500 {
		s.Log.Error("web: request failed", "method", c.Request().Method, "path", c.Path(), "status", status, "err", err)
	}
	if isHTMX(c) {
		_ = c.String(status, msg)
		return
	}
	if err := render(c, status, views.ErrorPage(s.page(c, http.StatusText(status)), status, msg)); err != nil {
		s.Log.Error("web: render error page", "err", err)
	}
}
