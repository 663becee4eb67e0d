package views

import (
	"net/url"
	"strconv"
	"time"
)

// AdminRuns is Settings → Runs: every user's runs as metadata. A chat title and
// an error text are content: they are set only for the admin's own runs and
// those the admin revealed.
type AdminRuns struct {
	Filter AdminRunFilter
	Users  []AdminRunUser // for the user filter
	Rows   []AdminRunRow
	Next   string // the next page's URL, "" on the last page
	Error  string // a bad filter or a refused import
	Notice string
}

// AdminRunFilter is the filter form as typed.
type AdminRunFilter struct {
	User, Chat, From, To, Status, Model, Tool, MinSeconds string
	Failed                                                bool
}

// AdminRunUser is one choice of the user filter.
type AdminRunUser struct {
	ID       int64
	Username string
}

// AdminRunRow is one run in the admin list, or the head of the run page.
type AdminRunRow struct {
	ID, Owner, Model, Status  string
	SessionID                 string // "" for a run without a chat (an import)
	ChatTitle, Error          string // only when Visible
	Mine, Visible             bool   // the admin's own run; content may be shown
	Imported, Pinned, Failed  bool
	StartedAt                 time.Time
	Duration                  time.Duration // 0 while running
	Running                   bool
	InputTokens, OutputTokens int
	Steps                     int
}

// AdminRunPage is one run: its spans once the admin may see them (own run or
// revealed), otherwise only its metadata and the Reveal button.
type AdminRunPage struct {
	Run   AdminRunRow
	Spans []RunSpanItem
}

// RunSpanItem is one span as the plain list shows it. Data is pretty-printed
// JSON ("" for none).
type RunSpanItem struct {
	Seq, Depth                int
	Kind, Name, Status, Error string
	Offset, Duration          time.Duration
	Open                      bool
	TokensIn, TokensOut       int
	Data                      string
}

func adminRunPath(id, rest string) string { return "/settings/runs/" + url.PathEscape(id) + rest }

func adminRunsChatFilter(sessionID string) string {
	return "/settings/runs?chat=" + url.QueryEscape(sessionID)
}

func chatLabel(title string) string {
	if title == "" {
		return "Untitled chat"
	}
	return title
}

// runDuration is a run's or span's length: "850 ms", "12.3 s".
func runDuration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

// shortRunID is the start of a run id (a UUID), enough to tell runs apart.
func shortRunID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
