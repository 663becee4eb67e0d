package views

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// csrfHeaders is the hx-headers value that makes htmx (and htmx-ext-ws, which
// copies it into each frame as HEADERS) send the CSRF token.
func csrfHeaders(token string) string {
	b, _ := json.Marshal(map[string]string{"X-CSRF-Token": token}) // cannot fail for a string map
	return string(b)
}

// htmxConfig turns off what the CSP would block anyway (inline indicator styles,
// eval, script tags in swapped content).
const htmxConfig = `{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}`

func pageTitle(p Page) string {
	if p.Title == "" {
		return "Atrium"
	}
	return p.Title + " · Atrium"
}

func sessionPath(id string, rest ...string) string {
	return "/s/" + url.PathEscape(id) + strings.Join(rest, "")
}

func sessionTitle(s SessionItem) string {
	if strings.TrimSpace(s.Title) == "" {
		return "New chat"
	}
	return s.Title
}

func olderPath(sessionID string, before int64) string {
	return sessionPath(sessionID, "/messages?before="+strconv.FormatInt(before, 10))
}

func moreSessionsPath(cursor string) string {
	return "/sessions?cursor=" + url.QueryEscape(cursor)
}

func providerPath(id int64, rest string) string {
	return "/settings/providers/" + strconv.FormatInt(id, 10) + rest
}

func userPath(id int64, rest string) string {
	return "/admin/users/" + strconv.FormatInt(id, 10) + rest
}

func msgID(seq int64) string { return "msg-" + strconv.FormatInt(seq, 10) }

func status(m Message) string {
	if m.Status == "" {
		return "complete"
	}
	return m.Status
}

func runState(state string) string {
	if state == "" {
		return "idle"
	}
	return state
}

func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func shortTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

func statusText(code int) string {
	if s := http.StatusText(code); s != "" {
		return s
	}
	return "Error"
}

func itoa(n int) string { return strconv.Itoa(n) }

// providerEditForm is the edit form of p: the failed submit if it was for p,
// else p's stored values.
func providerEditForm(p Provider, failed ProviderForm) ProviderForm {
	if failed.ID == p.ID {
		return failed
	}
	return ProviderForm{ID: p.ID, Name: p.Name, Kind: p.Kind, BaseURL: p.BaseURL, Models: strings.Join(p.Models, "\n")}
}

// providerAddForm is the add form: the failed submit if it was an add, else empty.
func providerAddForm(failed ProviderForm) ProviderForm {
	if failed.ID == 0 {
		return failed
	}
	return ProviderForm{}
}

// fieldID makes form control ids unique per provider form.
func fieldID(f ProviderForm, name string) string {
	if f.ID == 0 {
		return "new-provider-" + name
	}
	return "provider-" + strconv.FormatInt(f.ID, 10) + "-" + name
}

func kindLabel(kind string) string {
	switch kind {
	case "openai":
		return "OpenAI-compatible"
	case "anthropic":
		return "Anthropic"
	}
	return kind
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }
