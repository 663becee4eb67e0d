package views

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	return "/settings/users/" + strconv.FormatInt(id, 10) + rest
}

func msgID(seq int64) string { return "msg-" + strconv.FormatInt(seq, 10) }

func memoryChipsID(seq int64) string { return "memory-chips-" + strconv.FormatInt(seq, 10) }

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

func boolAttr(b bool) string { return strconv.FormatBool(b) }

// providerEditForm is the edit form of p: the failed submit if it was for p,
// else p's stored values.
func providerEditForm(p Provider, failed ProviderForm) ProviderForm {
	if failed.ID == p.ID {
		return failed
	}
	return ProviderForm{ID: p.ID, Name: p.Name, Kind: p.Kind, BaseURL: p.BaseURL, Models: p.ModelLines}
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

// ToolDOMID is the element id of the card of the tool call with the given id (Atrium's
// key: providers reuse their own ids, which would make cards share an element).
// Ids made only of [A-Za-z0-9_-] are kept ("tool-call_1"); any other id, and any id
// starting with "x-", is hex-encoded after "tool-x-", so two call ids never share a
// DOM id and the result is safe in a CSS selector.
func ToolDOMID(id string) string {
	if id != "" && !strings.HasPrefix(id, "x-") && strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) < 0 {
		return "tool-" + id
	}
	return "tool-x-" + hex.EncodeToString([]byte(id))
}

// toolStatus is a card's status, "running" when unset.
func toolStatus(c ToolCard) string {
	if c.Status == "" {
		return "running"
	}
	return c.Status
}

// toolStatusLabel is the text of a card's status pill.
func toolStatusLabel(c ToolCard) string {
	switch s := toolStatus(c); s {
	case "running":
		return "running…"
	case "error":
		if c.ErrorCode != "" {
			return "error: " + c.ErrorCode
		}
		return "error"
	default:
		return s
	}
}

// duration formats a tool call's duration: "0.4 s", "12.0 s", "95 s"; "" for none.
func duration(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d < 100*time.Millisecond:
		return "< 0.1 s"
	case d < 100*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 0, 64) + " s"
	}
}

// taskFor is the chat's task panel, bound to the chat's session.
func taskFor(c Chat) TaskPanel {
	t := c.Task
	if t.SessionID == "" {
		t.SessionID = c.Session.ID
	}
	return t
}

func taskEmpty(t TaskPanel) bool {
	return strings.TrimSpace(t.Goal) == "" && strings.TrimSpace(t.Stage) == "" && strings.TrimSpace(t.Params) == ""
}

// num formats a token count with thousands separators: 12,345.
func num(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// zoneMax is the scale of a zone's bar: its budget, else the whole limit.
func zoneMax(z MeterZone, limit int) int {
	if z.Budget > 0 {
		return z.Budget
	}
	if limit > 0 {
		return limit
	}
	return max(z.Tokens, 1)
}

// zoneLabel names a zone for people.
func zoneLabel(name string) string {
	switch name {
	case "pinned":
		return "Pinned"
	case "instructions":
		return "Your instructions (in pinned)"
	case "summary":
		return "Summary"
	case "history":
		return "History"
	case "tool_results":
		return "Tool results"
	case "files":
		return "Attached files (in history)"
	case "tools":
		return "Tool definitions"
	case "dropped":
		return "Dropped (not summarised)"
	}
	return name
}

// meterUsage is "1,234 / 4,000" (or just "1,234" with no bound).
func meterUsage(tokens, bound int) string {
	if bound <= 0 {
		return num(tokens)
	}
	return num(tokens) + " / " + num(bound)
}

func memoryPath(id, rest string) string { return "/memories/" + url.PathEscape(id) + rest }

func suggestionPath(id, rest string) string {
	return "/memories/suggestions/" + url.PathEscape(id) + rest
}

// memoryEditForm is the edit form of m: the failed submit if it was for m, else m's text.
func memoryEditForm(m MemoryItem, failed MemoryForm) MemoryForm {
	if failed.ID == m.ID {
		return failed
	}
	return MemoryForm{ID: m.ID, Kind: m.Kind, Text: m.Text}
}

func memorySourceLabel(source string) string {
	switch source {
	case "chat":
		return "from a chat"
	case "tool":
		return "saved by the assistant"
	case "manual":
		return "added by you"
	case "import":
		return "imported"
	}
	return source
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func adminMemoryPath(uid int64, rest string) string {
	return "/settings/memories/" + strconv.FormatInt(uid, 10) + rest
}

// auditWho names the admin of an audit entry; a deleted account is still an admin.
func auditWho(a MemoryAuditItem) string {
	if a.Admin == "" {
		return "An admin (since deleted)"
	}
	return "Admin " + a.Admin
}

// auditWhat is what the admin did, in the user's words.
func auditWhat(a MemoryAuditItem) string {
	switch a.Action {
	case "reveal":
		return "viewed your memories"
	case "delete":
		return "deleted " + itoa(a.Count) + " of your memories"
	case "delete-all":
		return "deleted all " + itoa(a.Count) + " of your memories"
	case "reveal-run":
		return "viewed the content of your run " + shortRunID(a.Run)
	}
	return a.Action
}

// byteSize is n bytes for people: 512 B, 3.4 KB, 1.2 MB.
func byteSize(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1000*1000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + " KB"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
}

// adminSourceLabel is memorySourceLabel as an admin reads it: "you" is the user.
func adminSourceLabel(source string) string {
	if source == "manual" {
		return "added by the user"
	}
	return memorySourceLabel(source)
}

// memoriesUsed is the chip on a reply that was given long-term memories.
func memoriesUsed(n int) string {
	if n == 1 {
		return "1 memory used"
	}
	return strconv.Itoa(n) + " memories used"
}

func keyPlaceholder(set bool) string {
	if set {
		return "stored — leave empty to keep"
	}
	return "none"
}

// windowLabel shows a context window in tokens the way model cards do: "32k" for a
// multiple of 1024, the exact count otherwise.
func windowLabel(tokens int) string {
	if tokens%1024 == 0 {
		return strconv.Itoa(tokens/1024) + "k"
	}
	return strconv.Itoa(tokens)
}

// theme is the page's data-theme: the user's choice, "system" (the browser's) otherwise.
func theme(p Page) string {
	if p.User != nil && (p.User.Theme == "light" || p.User.Theme == "dark") {
		return p.User.Theme
	}
	return "system"
}

// colorScheme tells the browser which schemes the page supports, before the CSS loads.
func colorScheme(p Page) string {
	if t := theme(p); t != "system" {
		return t
	}
	return "light dark"
}

// consentID is the element id of an MCP server's question in a chat.
func consentID(id string) string { return "consent-" + id }

// consentInputID is the element id of one field of a question's form.
func consentInputID(id, field string) string {
	return "consent-" + id + "-" + hex.EncodeToString([]byte(field))
}

// consentOutcome is the one line an answered question leaves in the chat.
func consentOutcome(q ConsentQuestion) string {
	what := "request"
	switch q.Kind {
	case "form":
		what = "form"
	case "url":
		what = "link"
	case "sampling":
		what = "sampling request"
	}
	switch q.Outcome {
	case "accepted":
		if q.Kind == "sampling" {
			return q.Server + "'s sampling request: approved."
		}
		return q.Server + "'s " + what + ": answered."
	case "always":
		return q.Server + "'s sampling request: approved, and from now on for every request of " + q.Server + " (Settings → MCP to revoke)."
	case "declined":
		return q.Server + "'s " + what + ": declined."
	case "cancelled":
		return q.Server + "'s " + what + ": cancelled."
	case "unwatched":
		return q.Server + "'s " + what + ": declined, as nobody was watching this chat."
	case "expired":
		return q.Server + "'s " + what + ": no answer in time."
	}
	return q.Server + "'s " + what + ": closed."
}

// progressNum formats a progress figure: 3, 2.5.
func progressNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func joinComma(s []string) string { return strings.Join(s, ", ") }

// fileSize is a file size for people: "812 B", "14.2 KB", "1.3 MB".
func fileSize(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1_000_000:
		return fmt.Sprintf("%.1f KB", float64(n)/1000)
	default:
		return fmt.Sprintf("%.1f MB", float64(n)/1_000_000)
	}
}
