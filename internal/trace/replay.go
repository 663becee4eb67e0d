package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/tools"
)

// A replay sends one recorded model step again. The request body of a model_request
// span is the wire body as sent (see ModelRequest): only header values and URL
// credentials were redacted, and the provider puts its own credentials back from its
// configuration. So to the same endpoint format the replay sends the stored bytes, with
// only the "model" value changed when another model is chosen; to the other format
// (OpenAI-compatible vs Anthropic) it cannot, and rebuilds the request from the recorded
// messages and tools in the target's format instead (Converted). The replay is a run of
// its own, recorded with spans and marked as a replay of its source; it never touches
// the chat's messages.

// Where the tool calls of a replayed reply get their results.
const (
	ResultRecorded = "recorded" // the recorded result at the same call position
	ResultLive     = "live"     // run through the tool registry now
	ResultRefused  = "refused"  // live, but the tool may not run (its MCP server is not ready)
)

// DefaultReplaySteps bounds the model calls of a replay whose replies keep calling tools.
const DefaultReplaySteps = 8

// Source is a recorded model step to replay, with what the recording did from it on.
type Source struct {
	Run      RunInfo
	Span     SpanInfo // the model_request span
	Request  ModelRequest
	Body     []byte // the request body as stored: the bytes sent, unless Redacted > 0
	Format   string // llm.KindOpenAI or llm.KindAnthropic, from the recorded URL
	Model    string // the body's model
	Redacted int    // "[REDACTED]" marks in the stored body, where a secret was; they are sent as they are
	Steps    []Step // the recorded reply of this step and the steps after it
	// LastIncluded is the highest message seq in the step's context (its context span;
	// 0 when none was recorded): the step's user turn is the last user message up to it.
	LastIncluded int64
}

// Step is one model call and the tool calls of its reply.
type Step struct {
	Response llm.Response
	Error    string
	Tools    []ToolOutcome
}

// ToolOutcome is one tool call and the result the model was given.
type ToolOutcome struct {
	ID, Name, Arguments, Result, Code string
	Source                            string // ResultRecorded, ResultLive, ResultRefused ("" in a turn's recording)
	RecordedFor                       string // recorded results: the tool the recording called at this position
}

// Target is where a replay sends the step.
type Target struct {
	Provider llm.Provider
	Model    string
	Kind     string // llm.KindOpenAI or llm.KindAnthropic: the format the endpoint speaks
}

// ReplayOptions say how to replay.
type ReplayOptions struct {
	Target Target
	Live   bool            // run tool calls now instead of serving the recorded results
	Tools  *tools.Registry // live only
	// ToolReady, live only, refuses a call whose tool may not run now (an MCP server
	// that is not ready); nil lets every tool run.
	ToolReady func(name string) error
	MaxSteps  int // 0: DefaultReplaySteps
	NewID     func() string
}

// ReplaySource reads ownerID's run runID and its span seq (a model_request, or the
// model_response that answers one) as a step to replay. Another user's run is the
// errs.NotFound of a missing one; a span that is no model step, or a step recorded
// without its wire body, is errs.Invalid.
func (r *Recorder) ReplaySource(ctx context.Context, ownerID int64, runID string, seq int) (Source, error) {
	ri, spans, err := r.Run(ctx, ownerID, runID)
	if err != nil {
		return Source{}, err
	}
	at := -1
	for i, s := range spans {
		if s.Seq == seq {
			at = i
		}
	}
	if at < 0 {
		return Source{}, errs.E(errs.NotFound, "span not found")
	}
	if spans[at].Kind == KindModelResponse {
		for at >= 0 && spans[at].Kind != KindModelRequest {
			at--
		}
	}
	if at < 0 || spans[at].Kind != KindModelRequest {
		return Source{}, errs.E(errs.Invalid, "Only a model step can be replayed: span %d is not one.", seq)
	}
	src := Source{Run: ri, Span: spans[at]}
	for i := at - 1; i >= 0; i-- {
		if spans[i].Kind == KindContext {
			var c struct {
				Included []int64 `json:"included"`
			}
			_ = json.Unmarshal(spans[i].Data, &c)
			for _, q := range c.Included {
				src.LastIncluded = max(src.LastIncluded, q)
			}
			break
		}
	}
	if err := json.Unmarshal(src.Span.Data, &src.Request); err != nil || src.Request.HTTP == nil {
		return Source{}, errs.E(errs.Invalid, "This model step was recorded without the request as sent, so it cannot be replayed.")
	}
	if src.Request.Request, err = src.Request.Built(); err != nil {
		return Source{}, errs.Wrap(errs.Invalid, err, "The recorded request body cannot be read back as a request.")
	}
	if src.Body, err = src.Request.HTTP.RawBody(); err != nil {
		return Source{}, errs.Wrap(errs.Invalid, err, "The recorded request body is damaged.")
	}
	if src.Format, err = wireFormat(src.Request.HTTP.URL); err != nil {
		return Source{}, err
	}
	var head struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(src.Body, &head) != nil {
		return Source{}, errs.E(errs.Invalid, "The recorded request body is not a JSON object.")
	}
	src.Model = head.Model
	src.Redacted = bytes.Count(src.Body, []byte(Redacted))
	src.Steps = StepsFrom(spans, src.Span.Seq)
	return src, nil
}

// wireFormat tells the API a recorded request went to from its URL.
func wireFormat(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err == nil {
		switch {
		case strings.HasSuffix(u.Path, "/chat/completions"):
			return llm.KindOpenAI, nil
		case strings.HasSuffix(u.Path, "/messages"):
			return llm.KindAnthropic, nil
		}
	}
	return "", errs.E(errs.Invalid, "The recorded request went to %q, which is neither a chat completions nor a messages endpoint.", capRunes(raw, 100))
}

// StepsFrom reads the model steps of a run's spans from seq on: each model_response
// (memory extraction aside, which has none) opens a step, each tool_call joins the
// step before it.
func StepsFrom(spans []SpanInfo, seq int) []Step {
	var out []Step
	for _, s := range spans {
		if s.Seq < seq {
			continue
		}
		switch s.Kind {
		case KindModelResponse:
			st := Step{Error: s.Error}
			_ = json.Unmarshal(s.Data, &st.Response) // a damaged span shows as an empty reply
			out = append(out, st)
		case KindToolCall:
			if len(out) == 0 {
				continue
			}
			var d struct {
				ID, Code, Source  string
				RecordedFor       string          `json:"recorded_for"`
				Arguments, Result json.RawMessage // JSON as it was, or a JSON string
			}
			_ = json.Unmarshal(s.Data, &d)
			last := &out[len(out)-1]
			last.Tools = append(last.Tools, ToolOutcome{ID: d.ID, Name: s.Name, Arguments: jsonText(d.Arguments),
				Result: jsonText(d.Result), Code: d.Code, Source: d.Source, RecordedFor: d.RecordedFor})
		}
	}
	return out
}

// jsonText undoes rawJSON: a JSON string gives its text, other JSON itself.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// SetModel returns body with the value of its top-level "model" key set to model and
// every other byte as it was: replaying to another model changes nothing else. A body
// that is not a JSON object with a string "model" is errs.Invalid.
func SetModel(body []byte, model string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	bad := errs.E(errs.Invalid, "The recorded request body has no model field to change.")
	if !json.Valid(body) { // the scan below stops at the model: the rest must be whole too
		return nil, bad
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, bad
		}
		start := int(dec.InputOffset()) // just past the key
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, bad
		}
		if key != "model" {
			continue
		}
		end := int(dec.InputOffset())
		at := bytes.IndexByte(body[start:end], '"')
		if at < 0 || v[0] != '"' {
			return nil, bad
		}
		enc, _ := json.Marshal(model) // a string always marshals
		out := make([]byte, 0, len(body)-len(v)+len(enc))
		out = append(out, body[:start+at]...)
		out = append(out, enc...)
		return append(out, body[start+at+len(v):]...), nil
	}
	return nil, bad
}

// StartReplay records the start of a replay run: like StartRun, marked as a replay of
// span seq of ownerID's run replayOf (a run of another owner is errs.NotFound).
func (r *Recorder) StartReplay(ctx context.Context, id, sessionID string, ownerID int64, model, replayOf string, seq int) (*Run, error) {
	run := &Run{rec: r, id: id, sessionID: sessionID, ownerID: ownerID, model: model, started: r.now()}
	row := run.row()
	row.ReplayOf, row.ReplaySpan = replayOf, seq
	wctx, cancel := writeCtx(ctx)
	defer cancel()
	if err := r.db.CreateRun(wctx, row); err != nil {
		return nil, fmt.Errorf("trace: start replay: %w", err)
	}
	run.created = true
	return run, nil
}

// Replay sends src again as o says, records it as a run of its own and returns that
// run's id. The first model call goes out with src's bytes (model changed if another
// was chosen) unless the target speaks the other format; when the reply calls tools,
// they get the recorded results by call position (or, live, run now) and the replay
// goes on like a turn, up to MaxSteps model calls. A failed model call ends the run
// with an error, which is returned with the id; a replay that could not start returns
// no id.
func (r *Recorder) Replay(ctx context.Context, ownerID int64, src Source, o ReplayOptions) (string, error) {
	t := o.Target
	if t.Provider == nil || t.Model == "" || o.NewID == nil {
		return "", errs.E(errs.Invalid, "A replay needs a target model.")
	}
	if o.Live && o.Tools == nil {
		return "", errs.E(errs.Invalid, "Live tool results need the tools.")
	}
	converted := t.Kind != src.Format
	var body []byte
	if !converted {
		var err error
		if body, err = SetModel(src.Body, t.Model); err != nil {
			return "", err
		}
		if t.Model == src.Model {
			body = src.Body // byte for byte, even where SetModel would re-escape the name
		}
	}
	id := o.NewID()
	run, err := r.StartReplay(ctx, id, src.Run.SessionID, ownerID, t.Model, src.Run.ID, src.Span.Seq)
	if err != nil {
		return "", err
	}
	var recorded []ToolOutcome
	for _, st := range src.Steps {
		recorded = append(recorded, st.Tools...)
	}
	maxSteps := o.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultReplaySteps
	}
	req := src.Request.Request
	req.Model = t.Model
	req.Messages = slices.Clone(req.Messages) // the steps append to it; src stays as recorded
	var (
		inTok, outTok, steps, calls int
		runErr                      error
		logErr                      error // recording failures: the replay goes on, the page says so
	)
	note := func(err error) { logErr = errors.Join(logErr, err) }
	for steps < maxSteps {
		steps++
		started := r.now()
		var sent *llm.HTTPRequest
		cctx := llm.WithCapture(ctx, func(h *llm.HTTPRequest) { sent = h })
		if steps == 1 && !converted {
			cctx = llm.WithRawBody(cctx, body)
		}
		span, err := run.Span(ctx, KindModelRequest, t.Model, nil)
		note(err)
		resp, err := t.Provider.Stream(cctx, req, nil)
		inTok += resp.Usage.InputTokens
		outTok += resp.Usage.OutputTokens
		note(span.End(ctx, "", err, resp.Usage.InputTokens, 0, storedRequest(req, sent)))
		note(run.Record(ctx, KindModelResponse, t.Model, resp, started, "", err, 0, resp.Usage.OutputTokens))
		if err == nil && steps == 1 && !converted && !sentBody(sent, body) {
			// The provider's client has no CaptureTransport: what went out is a rebuilt body.
			err = errs.E(errs.Unavailable, "The recorded bytes could not be sent as they are: this provider's client rebuilt the request.")
		}
		if err != nil {
			runErr = err
			note(run.Record(ctx, KindError, "replay", nil, started, "", err, 0, 0))
			break
		}
		if len(resp.ToolCalls) == 0 {
			break
		}
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
		for _, call := range resp.ToolCalls {
			started := r.now()
			out := r.serveTool(ctx, ownerID, o, req.Tools, call, calls, recorded)
			calls++
			var terr error
			if out.Code != "" {
				terr = errors.New(out.Code)
			}
			note(run.Record(ctx, KindToolCall, call.Name, map[string]any{"id": call.ID, "arguments": rawJSON(call.Arguments),
				"result": rawJSON(out.Result), "code": out.Code, "source": out.Source, "recorded_for": out.RecordedFor},
				started, "", terr, 0, 0))
			req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, Content: out.Result, ToolCallID: call.ID})
		}
	}
	note(run.End(ctx, "", runErr, inTok, outTok, steps))
	if logErr != nil && runErr == nil {
		return id, fmt.Errorf("trace: the replay ran but was not fully recorded: %w", logErr)
	}
	return id, runErr
}

func sentBody(sent *llm.HTTPRequest, want []byte) bool {
	if sent == nil {
		return false
	}
	got, err := sent.RawBody()
	return err == nil && bytes.Equal(got, want)
}

// serveTool answers the n-th tool call (from 0) of a replay.
// Live, it runs only tools that offered (the recorded request's tools) names.
func (r *Recorder) serveTool(ctx context.Context, ownerID int64, o ReplayOptions, offered []llm.ToolSpec, call llm.ToolCall, n int, recorded []ToolOutcome) ToolOutcome {
	out := ToolOutcome{ID: call.ID, Name: call.Name, Arguments: call.Arguments}
	if !o.Live {
		out.Source = ResultRecorded
		if n >= len(recorded) {
			out.Result = fmt.Sprintf("The recording has no result for tool call %d (it made %d).", n+1, len(recorded))
			out.Code = "no_recording"
			return out
		}
		out.Result, out.Code, out.RecordedFor = recorded[n].Result, recorded[n].Code, recorded[n].Name
		return out
	}
	if o.ToolReady != nil {
		if err := o.ToolReady(call.Name); err != nil {
			out.Source, out.Code, out.Result = ResultRefused, tools.CodeUnavailable, err.Error()
			return out
		}
	}
	// Only what the recorded request offered runs: the chat's own limits (a temporary
	// chat offers no memory tools) are in that list, and the replay has no session
	// through which a tool could check them.
	if !slices.ContainsFunc(offered, func(t llm.ToolSpec) bool { return t.Name == call.Name }) {
		out.Source, out.Code = ResultRefused, tools.CodeUnknownTool
		out.Result = fmt.Sprintf("The tool %q was not offered in the recorded request, so a replay does not run it.", call.Name)
		return out
	}
	// No session: a live replay must not change the chat (task_update writes its state).
	res := o.Tools.Dispatch(ctx, "", ownerID, call)
	out.Source, out.Result, out.Code = ResultLive, res.Content, res.Code
	return out
}

// ReplayRun reads ownerID's replay run id: the run, its steps and the request body its
// first model call sent. A run that is not a replay is errs.NotFound.
func (r *Recorder) ReplayRun(ctx context.Context, ownerID int64, id string) (RunInfo, []Step, []byte, error) {
	ri, spans, err := r.Run(ctx, ownerID, id)
	if err != nil {
		return RunInfo{}, nil, nil, err
	}
	if ri.ReplayOf == "" {
		return RunInfo{}, nil, nil, errs.E(errs.NotFound, "replay not found")
	}
	var first []byte
	for _, s := range spans {
		if s.Kind != KindModelRequest {
			continue
		}
		var mr ModelRequest
		if json.Unmarshal(s.Data, &mr) == nil && mr.HTTP != nil {
			first, _ = mr.HTTP.RawBody()
		}
		break
	}
	return ri, StepsFrom(spans, 0), first, nil
}

// DiffPart is a piece of a word diff: Op '=' (in both), '-' (only in the first text)
// or '+' (only in the second).
type DiffPart struct {
	Op   byte
	Text string
}

// maxDiffCells bounds the word diff's table (words × words): past it, the differing
// middle shows as one removal and one insertion.
const maxDiffCells = 1 << 20

// WordDiff compares a and b word by word (whitespace runs are words too, so joining
// the parts of one side gives that text back).
func WordDiff(a, b string) []DiffPart {
	x, y := words(a), words(b)
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	var parts []DiffPart
	add := func(op byte, s string) {
		if s == "" {
			return
		}
		if n := len(parts); n > 0 && parts[n-1].Op == op {
			parts[n-1].Text += s
			return
		}
		parts = append(parts, DiffPart{Op: op, Text: s})
	}
	add('=', strings.Join(x[:pre], ""))
	mx, my := x[pre:len(x)-suf], y[pre:len(y)-suf]
	if len(mx)*len(my) > maxDiffCells {
		add('-', strings.Join(mx, ""))
		add('+', strings.Join(my, ""))
	} else {
		// Longest common subsequence, walked from the front.
		n, m := len(mx), len(my)
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if mx[i] == my[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n && j < m {
			switch {
			case mx[i] == my[j]:
				add('=', mx[i])
				i, j = i+1, j+1
			case lcs[i+1][j] >= lcs[i][j+1]:
				add('-', mx[i])
				i++
			default:
				add('+', my[j])
				j++
			}
		}
		add('-', strings.Join(mx[i:], ""))
		add('+', strings.Join(my[j:], ""))
	}
	add('=', strings.Join(x[len(x)-suf:], ""))
	return parts
}

// words splits s into runs of non-space and of space characters.
func words(s string) []string {
	var out []string
	start, space := 0, false
	for i, c := range s {
		sp := c == ' ' || c == '\n' || c == '\t' || c == '\r'
		if i > 0 && sp != space {
			out = append(out, s[start:i])
			start = i
		}
		space = sp
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func capRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
