package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/trace"
	"atrium/views"
)

// showRun opens run :rid of chat :id as a timeline, for the chat's owner only: another
// user's chat, a run of another chat and a missing run are the same 404.
func (s *Server) showRun(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	return s.renderRun(c, ss.OwnerID, ss.ID, c.Param("rid"))
}

// renderRun renders ownerID's run runID. Access is the caller's check (the chat's
// owner here; an admin route, after its reveal, may pass any owner); sessionID, when
// not "", must be the run's chat. A missing run is a 404.
func (s *Server) renderRun(c echo.Context, ownerID int64, sessionID, runID string) error {
	if s.Recorder == nil {
		return echo.ErrNotFound
	}
	// The outline only: a span's data is opened when its row is expanded (showRunSpan),
	// so the page costs the same whatever the run's requests weigh.
	ri, spans, err := s.Recorder.RunOutline(c.Request().Context(), ownerID, runID)
	if errs.Is(err, errs.NotFound) || (err == nil && sessionID != "" && ri.SessionID != sessionID) {
		return echo.ErrNotFound
	}
	if err != nil {
		return err
	}
	v := runView(ri, spans, s.Now())
	v.SpansURL = strings.TrimSuffix(c.Request().URL.Path, "/") + "/spans/"
	if u, ok := currentUser(c); ok && u.ID == ownerID { // pins are the owner's
		pinned, err := s.Store.RunPinned(c.Request().Context(), ownerID, runID)
		if err != nil {
			return err
		}
		v.Pinned = &pinned
	}
	if ri.SessionID != "" {
		v.ChatURL = "/s/" + ri.SessionID
	}
	return render(c, http.StatusOK, views.RunPage(s.page(c, "Run "+shortID(ri.ID)), v))
}

// showRunSpan serves the expanded data of span :seq of run :rid of chat :id (a
// fragment for the timeline), under the same access as showRun.
func (s *Server) showRunSpan(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	seq, err := strconv.Atoi(c.Param("seq"))
	if err != nil || seq <= 0 {
		return echo.ErrNotFound
	}
	return s.renderRunSpan(c, ss.OwnerID, ss.ID, c.Param("rid"), seq)
}

// renderRunSpan renders the data of span seq of ownerID's run runID; access is the
// caller's check, as for renderRun.
func (s *Server) renderRunSpan(c echo.Context, ownerID int64, sessionID, runID string, seq int) error {
	if s.Recorder == nil {
		return echo.ErrNotFound
	}
	ri, sp, err := s.Recorder.RunSpan(c.Request().Context(), ownerID, runID, seq)
	if errs.Is(err, errs.NotFound) || (err == nil && sessionID != "" && ri.SessionID != sessionID) {
		return echo.ErrNotFound
	}
	if err != nil {
		return err
	}
	sv := views.SpanView{Seq: sp.Seq, Kind: sp.Kind, Name: sp.Name, Status: sp.Status, Error: sp.Error}
	spanDetails(&sv, sp.Data)
	return render(c, http.StatusOK, views.SpanBody(sv))
}

func shortID(id string) string { return id[:min(len(id), 8)] }

// linkRuns keeps the "How was this answered?" link on the last assistant message of
// each run whose run is still stored (retention prunes old runs), and removes it from
// the others.
func (s *Server) linkRuns(ctx context.Context, ownerID int64, msgs []views.Message) error {
	var ids []string
	for _, m := range msgs {
		if m.RunID != "" {
			ids = append(ids, m.RunID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	found, err := s.Store.ExistingRuns(ctx, ownerID, ids)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := len(msgs) - 1; i >= 0; i-- {
		id := msgs[i].RunID
		if id == "" {
			continue
		}
		if !found[id] || seen[id] || msgs[i].Role != store.RoleAssistant {
			msgs[i].RunID = ""
		}
		seen[id] = true
	}
	return nil
}

// Folding of long payloads: the first foldLines lines (at most foldChars characters)
// are shown, the rest is behind a toggle.
const (
	foldLines = 20
	foldChars = 2000
)

// runView maps a stored run and its spans' outline to the timeline. now ends the bar of
// a run or span still open.
func runView(ri store.RunInfo, spans []store.SpanInfo, now time.Time) views.RunView {
	end := ri.EndedAt
	if end.IsZero() {
		end = now
	}
	for _, sp := range spans {
		if sp.EndedAt.After(end) {
			end = sp.EndedAt
		}
	}
	total := max(end.Sub(ri.StartedAt), time.Millisecond)
	v := views.RunView{ID: ri.ID, Model: ri.Model, Status: ri.Status, Error: ri.Error, StartedAt: ri.StartedAt,
		Duration: fmtDuration(total), TokensIn: ri.InputTokens, TokensOut: ri.OutputTokens, Steps: ri.Steps,
		Spans: make([]views.SpanView, 0, len(spans))}
	if ri.EndedAt.IsZero() {
		v.Duration += " so far"
	}
	depth := map[int64]int{}
	for _, sp := range spans {
		d := 0
		if sp.ParentID != 0 {
			d = depth[sp.ParentID] + 1
		}
		depth[sp.ID] = d
		spEnd := sp.EndedAt
		if spEnd.IsZero() {
			spEnd = end
		}
		offset, dur := sp.StartedAt.Sub(ri.StartedAt), max(spEnd.Sub(sp.StartedAt), 0)
		sv := views.SpanView{Seq: sp.Seq, Kind: sp.Kind, Name: sp.Name, Status: sp.Status, Error: sp.Error, Depth: min(d, 4),
			Offset: fmtDuration(offset), Duration: fmtDuration(dur), TokensIn: sp.TokensIn, TokensOut: sp.TokensOut,
			BarX: barUnits(offset, total), BarW: max(barUnits(dur, total), 4), Open: sp.EndedAt.IsZero()}
		sv.BarX = min(sv.BarX, views.BarScale-sv.BarW)
		v.Spans = append(v.Spans, sv)
	}
	return v
}

// barUnits is d as a share of total in the waterfall's viewBox units.
func barUnits(d, total time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(min(d*views.BarScale/total, views.BarScale))
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// spanDetails fills what a span's expanded view shows, by kind. Data that does not
// have the kind's shape (an older or foreign row) is shown as JSON.
func spanDetails(sv *views.SpanView, data json.RawMessage) {
	if len(data) == 0 {
		return
	}
	add := func(label, text string) {
		if text != "" {
			sv.Parts = append(sv.Parts, fold(label, text))
		}
	}
	addJSON := func(label string, raw json.RawMessage) {
		if len(raw) > 0 && string(raw) != "null" {
			add(label, prettyJSON(string(raw)))
		}
	}
	// fields decodes the top level only for the kinds that need it: a model request's
	// data is most of a run's bytes, and decoding it twice doubled the page's cost.
	fields := func() map[string]json.RawMessage {
		var f map[string]json.RawMessage
		_ = json.Unmarshal(data, &f) // not an object: nil
		return f
	}
	switch sv.Kind {
	case trace.KindContext:
		var ctx struct {
			Zones        []contextwin.Zone
			Cut          []contextwin.Cut
			Included     []int64
			Unsummarised []int64
			Interrupted  []string
		}
		if json.Unmarshal(data, &ctx) == nil && len(ctx.Zones) > 0 {
			for _, z := range ctx.Zones {
				sv.Zones = append(sv.Zones, views.ZoneRow{Name: z.Name, Tokens: z.Tokens, Budget: z.Budget})
			}
			for _, c := range ctx.Cut {
				sv.Cuts = append(sv.Cuts, views.CutRow{Seq: c.Seq, Reason: c.Reason})
			}
			sv.Included = seqList(ctx.Included)
			f := fields()
			addJSON("Turns not yet in the summary (seqs)", f["unsummarised"])
			addJSON("Tool calls filled in as interrupted", f["interrupted"])
			return
		}
	case trace.KindToolSelection:
		var sel struct {
			Offered []string
			Reason  string
			Scores  map[string]float64
		}
		if json.Unmarshal(data, &sel) == nil && sel.Offered != nil {
			sv.Offered, sv.SelectReason = sel.Offered, sel.Reason
			offered := map[string]bool{}
			for _, n := range sel.Offered {
				offered[n] = true
			}
			for n, score := range sel.Scores {
				sv.Ranked = append(sv.Ranked, views.ToolRank{Name: n, Score: fmt.Sprintf("%.3f", score), Offered: offered[n]})
			}
			sort.Slice(sv.Ranked, func(i, j int) bool { return sv.Ranked[i].Score > sv.Ranked[j].Score })
			return
		}
	case trace.KindModelRequest:
		// Not trace.ModelRequest: its request as built (skipped here) repeats the body.
		var mr struct {
			HTTP     *llm.HTTPRequest `json:"http"`
			Purpose  string           `json:"purpose"`
			Response *llm.Response    `json:"response"`
		}
		if json.Unmarshal(data, &mr) == nil {
			if mr.Purpose != "" {
				add("Purpose", mr.Purpose)
			}
			if h := mr.HTTP; h != nil {
				add("HTTP request", h.Method+" "+h.URL+"\n"+headerText(h.Headers))
				// The body alone: it is what the model got (pretty-printing only adds
				// whitespace), and the request as built repeats it.
				if body, err := h.RawBody(); err == nil {
					add("Body as sent (pretty-printed)", foldBase64(prettyJSON(string(body))))
				}
			} else if req := fields()["request"]; len(req) > 0 && string(req) != "null" {
				add("Request as built", foldBase64(prettyJSON(string(req))))
			}
			if mr.Response != nil {
				responseParts(add, addJSON, *mr.Response)
			}
			return
		}
	case trace.KindModelResponse:
		var resp llm.Response
		if json.Unmarshal(data, &resp) == nil {
			responseParts(add, addJSON, resp)
			return
		}
	case trace.KindToolCall:
		if f := fields(); f != nil {
			addJSON("Arguments", f["arguments"])
			addJSON("Result", f["result"])
			var code string
			if json.Unmarshal(f["code"], &code) == nil && code != "" {
				add("Error code", code)
			}
			return
		}
	case trace.KindSummary:
		var sum struct {
			Summary string `json:"summary"`
		}
		if f := fields(); json.Unmarshal(data, &sum) == nil && f != nil {
			add("New summary", sum.Summary)
			delete(f, "summary")
			rest, _ := json.Marshal(f)
			addJSON("Fold", rest)
			return
		}
	}
	addJSON("Data", data)
}

// responseParts shows a model response: reasoning, text, tool calls, usage.
func responseParts(add func(label, text string), addJSON func(string, json.RawMessage), r llm.Response) {
	add("Reasoning", r.Reasoning)
	add("Reply text", r.Content)
	if len(r.ToolCalls) > 0 {
		calls, _ := json.Marshal(r.ToolCalls)
		addJSON("Tool calls", calls)
	}
	usage, _ := json.Marshal(struct {
		Usage        llm.Usage
		FinishReason string
	}{r.Usage, r.FinishReason})
	addJSON("Usage", usage)
}

// headerText lists headers one per line, sorted (values are redacted as stored).
func headerText(h http.Header) string {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		for _, v := range h[n] {
			b.WriteString(n + ": " + v + "\n")
		}
	}
	return b.String()
}

func seqList(seqs []int64) string {
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ", ")
}

// base64RE matches a JSON string that is a long run of base64, as an attached image is
// sent (a data: URL for OpenAI-compatible endpoints, a bare "data" field for Anthropic).
var base64RE = regexp.MustCompile(`"(data:[A-Za-z0-9.+/-]+;base64,)?[A-Za-z0-9+/]{1000}[A-Za-z0-9+/]*={0,2}"`)

// foldBase64 replaces each long base64 string of a recorded request with a short
// stand-in that says how long it was: a megabyte of image is no use on a page, and
// the run's export keeps the bytes.
func foldBase64(text string) string {
	return base64RE.ReplaceAllStringFunc(text, func(m string) string {
		prefix := ""
		if i := strings.Index(m, ";base64,"); strings.HasPrefix(m, `"data:`) && i > 0 {
			prefix = m[1 : i+len(";base64,")]
		}
		n := len(m) - 2 - len(prefix)
		return fmt.Sprintf(`"%s[%d base64 characters (%d bytes) folded: export the run for them]"`, prefix, n, n/4*3)
	})
}

// fold splits text into what is shown and what is behind the toggle.
func fold(label, text string) views.Payload {
	text = noNUL(text)
	p := views.Payload{Label: label, Head: text}
	cut, lines := len(text), 0
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			if lines++; lines == foldLines {
				cut = i + 1
				break
			}
		}
	}
	if cut > foldChars {
		cut = foldChars
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
	}
	if cut < len(text) {
		p.Head, p.Rest = text[:cut], text[cut:]
		p.RestLines = bytes.Count([]byte(p.Rest), []byte("\n")) + 1
	}
	return p
}
