package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/mcp"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/trace"
	"atrium/views"
)

// replaySource reads the model step /s/:id/runs/:rid/spans/:sid names (sid is the
// span's seq in the run) for its owner. Another user's run, a run of another chat and a
// missing one are the same 404.
func (s *Server) replaySource(c echo.Context) (store.User, trace.Source, error) {
	u, _ := currentUser(c)
	if s.Recorder == nil {
		return u, trace.Source{}, echo.ErrNotFound
	}
	seq, err := strconv.Atoi(c.Param("seq"))
	if err != nil || seq <= 0 {
		return u, trace.Source{}, echo.ErrNotFound
	}
	src, err := s.Recorder.ReplaySource(c.Request().Context(), u.ID, c.Param("rid"), seq)
	if errs.Is(err, errs.NotFound) {
		return u, trace.Source{}, echo.ErrNotFound
	}
	if err != nil {
		return u, trace.Source{}, err
	}
	if src.Run.SessionID == "" || src.Run.SessionID != c.Param("id") {
		return u, trace.Source{}, echo.ErrNotFound
	}
	return u, src, nil
}

// showReplay is the replay page of a model step; with ?replay=<run id> it also shows
// that replay next to the recording.
func (s *Server) showReplay(c echo.Context) error {
	u, src, err := s.replaySource(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	v := views.Replay{SessionID: src.Run.SessionID, RunID: src.Run.ID, Seq: src.Span.Seq, Model: src.Model,
		URL: src.Request.HTTP.URL, Format: src.Format, BodyBytes: len(src.Body), Redacted: src.Redacted}
	selected := c.QueryParam("target")
	if selected == "" {
		selected = s.sameModel(ctx, src)
	}
	choices, err := s.Providers.Choices(ctx)
	if err != nil {
		return err
	}
	for _, ch := range choices {
		v.Choices = append(v.Choices, views.ModelOption{Value: ch.Value, Label: ch.Label, Selected: ch.Value == selected})
	}
	v.Live = c.QueryParam("tools") == trace.ResultLive
	if id := c.QueryParam("replay"); id != "" {
		ri, steps, sent, err := s.Recorder.ReplayRun(ctx, u.ID, id)
		if errs.Is(err, errs.NotFound) || (err == nil && (ri.ReplayOf != src.Run.ID || ri.ReplaySpan != src.Span.Seq)) {
			return echo.ErrNotFound
		}
		if err != nil {
			return err
		}
		res := views.ReplayResult{RunID: ri.ID, Model: ri.Model, Status: ri.Status, Error: ri.Error,
			Sent: sentNote(src, ri.Model, sent)}
		res.Pairs = stepPairs(src.Steps, steps)
		v.Result = &res
	}
	return render(c, http.StatusOK, views.ReplayPage(s.page(c, "Replay"), v))
}

// sameModel is the choice that sends the step where it went: a provider of the same
// format whose base URL the recorded URL starts with and that offers the recorded model;
// else "" (no option preselected: the browser shows the first).
func (s *Server) sameModel(ctx context.Context, src trace.Source) string {
	ps, err := s.Store.ListProviders(ctx)
	if err != nil {
		return ""
	}
	for _, p := range ps {
		base := strings.TrimRight(p.BaseURL, "/")
		if base == "" {
			base = map[string]string{llm.KindOpenAI: "https://api.openai.com/v1", llm.KindAnthropic: "https://api.anthropic.com"}[p.Kind]
		}
		if p.Kind != src.Format || base == "" || !strings.HasPrefix(src.Request.HTTP.URL, base+"/") {
			continue
		}
		for _, m := range p.Models {
			if m == src.Model {
				return providers.Value(p.ID, m)
			}
		}
	}
	return ""
}

// sentNote says how the replay's first request compares with the recorded one.
func sentNote(src trace.Source, model string, sent []byte) string {
	if sent == nil {
		return "The replay sent no request (see the error)."
	}
	if string(sent) == string(src.Body) {
		return fmt.Sprintf("Sent the recorded request byte for byte (%d bytes).", len(sent))
	}
	if want, err := trace.SetModel(src.Body, model); err == nil && string(want) == string(sent) {
		return fmt.Sprintf("Sent the recorded request with only the model changed to %s (%d bytes).", model, len(sent))
	}
	return fmt.Sprintf("Sent a request rebuilt from the recorded messages and tools in the target's format (%d bytes): the recording is in the %s format.",
		len(sent), src.Format)
}

// stepPairs lines up the recorded and replayed steps and diffs each pair.
func stepPairs(recorded, replayed []trace.Step) []views.StepPair {
	n := max(len(recorded), len(replayed))
	out := make([]views.StepPair, n)
	for i := range n {
		p := views.StepPair{N: i + 1}
		var a, b trace.Step
		if i < len(recorded) {
			a = recorded[i]
			p.Recorded = stepView(a)
		}
		if i < len(replayed) {
			b = replayed[i]
			p.Replayed = stepView(b)
		}
		p.Text = diffParts(trace.WordDiff(a.Response.Content, b.Response.Content))
		if ta, tb := toolText(a), toolText(b); ta != "" || tb != "" {
			p.Tools = diffParts(trace.WordDiff(ta, tb))
		}
		out[i] = p
	}
	return out
}

func stepView(s trace.Step) *views.StepView {
	v := &views.StepView{Content: s.Response.Content, Reasoning: s.Response.Reasoning, Error: s.Error}
	for _, t := range s.Tools {
		v.Tools = append(v.Tools, views.ToolView{Name: t.Name, Arguments: t.Arguments, Result: t.Result, Code: t.Code, Source: t.Source})
	}
	return v
}

// toolText is a step's tool calls and results, one call per line, for the diff.
func toolText(s trace.Step) string {
	var b strings.Builder
	for _, t := range s.Tools {
		fmt.Fprintf(&b, "%s(%s) → %s\n", t.Name, t.Arguments, t.Result)
	}
	return b.String()
}

func diffParts(parts []trace.DiffPart) []views.DiffPart {
	out := make([]views.DiffPart, len(parts))
	for i, p := range parts {
		out[i] = views.DiffPart{Op: string(p.Op), Text: p.Text}
	}
	return out
}

// runReplay replays the step with the model and tool mode the form chose, then shows
// the result. A model the configuration does not offer is refused.
func (s *Server) runReplay(c echo.Context) error {
	u, src, err := s.replaySource(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	choice := c.FormValue("target")
	pid, model, err := providers.ParseValue(choice)
	if err != nil {
		return err
	}
	p, err := s.Store.ProviderByID(ctx, pid)
	if err != nil {
		return errs.E(errs.Invalid, "Choose one of the configured models.")
	}
	offered := false
	for _, m := range p.Models {
		offered = offered || m == model
	}
	if !offered {
		return errs.E(errs.Invalid, "Choose one of the configured models.")
	}
	client, err := s.Providers.Client(ctx, p)
	if err != nil {
		return err
	}
	mode := c.FormValue("tools")
	if mode != trace.ResultRecorded && mode != trace.ResultLive {
		return errs.E(errs.Invalid, "Tool results are either recorded or live.")
	}
	opts := trace.ReplayOptions{Target: trace.Target{Provider: client, Model: model, Kind: p.Kind},
		Live: mode == trace.ResultLive, Tools: s.Agent.Tools, ToolReady: s.mcpToolReady, NewID: s.NewID}
	id, err := s.Recorder.Replay(ctx, u.ID, src, opts)
	if id == "" {
		return err
	}
	if err != nil {
		s.Log.Info("web: replay ended with an error", "run", id, "err", err) // shown on the page from the run
	}
	q := "?replay=" + id + "&target=" + choice + "&tools=" + mode
	return redirect(c, "/s/"+src.Run.SessionID+"/runs/"+src.Run.ID+"/spans/"+strconv.Itoa(src.Span.Seq)+"/replay"+q)
}

// mcpToolReady refuses a live call of an MCP tool ("<server>__<tool>") whose server
// is not ready; other tools may run.
func (s *Server) mcpToolReady(name string) error {
	server, _, ok := strings.Cut(name, "__")
	if !ok {
		return nil
	}
	if s.MCP != nil {
		for _, st := range s.MCP.Statuses() {
			if st.Name == server {
				if st.State == mcp.StateReady {
					return nil
				}
				return fmt.Errorf("The MCP server %q is %s, so its tool was not run.", server, st.State)
			}
		}
	}
	return fmt.Errorf("The MCP server %q is not configured, so its tool was not run.", server)
}

// forkRun starts a new chat of the same owner holding the source chat's history up to
// the step: the messages before its user turn and that turn. It opens the new chat.
func (s *Server) forkRun(c echo.Context) error {
	u, src, err := s.replaySource(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if src.LastIncluded == 0 {
		return errs.E(errs.Invalid, "This step's context was not recorded, so the history up to it is unknown.")
	}
	upTo, err := s.Store.LastUserSeq(ctx, src.Run.SessionID, src.LastIncluded)
	if err != nil {
		return err
	}
	from, err := s.Store.SessionForOwner(ctx, src.Run.SessionID, u.ID)
	if err != nil {
		return err
	}
	title := from.Title
	if title == "" {
		title = "chat"
	}
	dst := store.Session{ID: s.NewID(), Title: store.CleanTitle("Fork of " + title), Model: from.Model}
	if err := s.Store.ForkSession(ctx, u.ID, src.Run.SessionID, upTo, &dst); err != nil {
		return err
	}
	return redirect(c, "/s/"+dst.ID)
}
