// Package tools is the agent's tool runtime: a registry of tools, strict
// validation of the model's arguments against each tool's JSON Schema, execution
// with a timeout, structured errors the model can act on, the built-in tools
// (builtin.go) and the choice of which tools to offer on a turn (select.go).
//
// Nothing a tool result carries back to the model comes from a Go error the tool
// did not mean for it: only *Error details, validation messages and fixed texts.
// Stack traces, file paths and secrets stay in the server log.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"atrium/internal/errs"
	"atrium/internal/llm"
)

// Timeout bounds for a tool.
const (
	DefaultTimeout = 20 * time.Second
	MinTimeout     = 10 * time.Second
	MaxTimeout     = 30 * time.Second
	MaxMaxRun      = time.Hour // the longest MaxRun a tool may have
)

// Error codes in a failed Result (Result.Code and the "error" field of Content).
const (
	CodeUnknownTool      = "unknown_tool"
	CodeDisabled         = "tool_disabled"
	CodeInvalidArguments = "invalid_arguments"
	CodeExecutionFailed  = "execution_failed"
	CodeTimeout          = "timeout"
	CodeCanceled         = "canceled"    // the caller's context ended (Stop, shutdown)
	CodeUnavailable      = "unavailable" // the tool's backend (an MCP server) is down; set by the executor in Error.Code
)

// Tool is one callable tool.
type Tool struct {
	// Name matches ^[a-zA-Z0-9_-]{1,64}$ (MCP tools use "server__tool").
	Name string
	// Description is written as "When to use: … What it does: … Parameters: …".
	Description string
	// Schema is the JSON Schema (draft 2020-12 unless it says otherwise) of the
	// arguments object; its top-level type must be "object".
	Schema json.RawMessage
	// Timeout bounds one call: 0 means DefaultTimeout; otherwise 10s–30s.
	Timeout time.Duration
	// MaxRun bounds a call that keeps showing signs of life (KeepAlive): 0 means
	// Timeout; otherwise Timeout–MaxMaxRun. See the timeout rules in clock.go.
	MaxRun time.Duration
	// Execute runs the tool and returns the result text (usually JSON). An error
	// that is a *Error has its Detail shown to the model; any other error is
	// logged and the model sees only "the tool failed". Execute should honour
	// ctx; if it does not, Dispatch still returns at the timeout.
	Execute func(ctx context.Context, call Call) (string, error)
}

// Call is what an executor receives.
type Call struct {
	SessionID string
	OwnerID   int64
	Args      json.RawMessage // validated against the tool's schema; "{}" when the model sent nothing
	Hooks     Hooks           // from the dispatching context (WithHooks)
}

// Error is an executor failure meant for the model: its Detail becomes the
// "detail" of the result, and its Code the "error" (execution_failed when
// empty). Write it so the model can correct itself, and never put paths or
// secrets in it.
type Error struct {
	Code   string // "" means CodeExecutionFailed
	Detail string
}

func (e *Error) Error() string { return e.Detail }

// Errorf returns an *Error with a formatted detail.
func Errorf(format string, args ...any) *Error {
	return &Error{Detail: fmt.Sprintf(format, args...)}
}

// Result is the outcome of one Dispatch. Content is what goes back to the model:
// the tool's output on success, else {"error":Code,"detail":…}.
type Result struct {
	Content  string
	IsError  bool
	Code     string // "" on success
	Duration time.Duration
}

type entry struct {
	tool    Tool
	schema  *jsonschema.Schema
	enabled bool
	hidden  bool   // not offered to the model, but a call still reaches the executor
	hash    string // content hash of what select.go embeds for this tool
}

// Registry holds the tools. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*entry

	// Vector selection (select.go); db nil or emb nil means none.
	db     VectorStore
	emb    Embedder
	vecMu  sync.Mutex        // serialises syncing vectors to the database
	synced map[string]string // name -> hash whose vector is known to be stored; guarded by mu

	log *slog.Logger
}

// NewRegistry returns an empty registry. db (the *store.DB) and emb enable
// similarity selection of tools in Select; either may be nil, and then Select
// always offers every enabled tool.
func NewRegistry(db VectorStore, emb Embedder) *Registry {
	if emb != nil && emb.Dim() != VectorDim {
		emb = nil // the vec0 table has a fixed width; see select.go
	}
	return &Registry{
		tools:  map[string]*entry{},
		db:     db,
		emb:    emb,
		synced: map[string]string{},
		log:    slog.Default(),
	}
}

// validName reports whether name matches ^[a-zA-Z0-9_-]{1,64}$.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Register adds t, enabled. It fails with errs.Invalid for a bad name, an empty
// description, a missing executor, a timeout outside 10s–30s or a schema that
// does not compile or is not for an object; and with errs.Conflict when the
// name is taken.
func (r *Registry) Register(t Tool) error {
	e, err := r.entryFor(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, taken := r.tools[t.Name]; taken {
		return errs.E(errs.Conflict, "tools: register: a tool named %q is already registered", t.Name)
	}
	r.tools[t.Name] = e
	return nil
}

// Replace puts t in the place of the registered tool of the same name in one step, so
// that a call meanwhile finds one or the other, never no tool; it keeps the tool's
// enabled and hidden state. It checks t as Register does; an unknown name is
// errs.NotFound.
func (r *Registry) Replace(t Tool) error {
	e, err := r.entryFor(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.tools[t.Name]
	if !ok {
		return errs.E(errs.NotFound, "tools: no tool named %q", t.Name)
	}
	e.enabled, e.hidden = old.enabled, old.hidden
	r.tools[t.Name] = e
	return nil
}

// entryFor checks t (see Register) and returns its registry entry, enabled.
func (r *Registry) entryFor(t Tool) (*entry, error) {
	if !validName(t.Name) {
		return nil, errs.E(errs.Invalid, "tools: register: name %q must match ^[a-zA-Z0-9_-]{1,64}$", t.Name)
	}
	if strings.TrimSpace(t.Description) == "" {
		return nil, errs.E(errs.Invalid, "tools: register %s: description is required", t.Name)
	}
	if t.Execute == nil {
		return nil, errs.E(errs.Invalid, "tools: register %s: executor is required", t.Name)
	}
	if t.Timeout == 0 {
		t.Timeout = DefaultTimeout
	}
	if t.Timeout < MinTimeout || t.Timeout > MaxTimeout {
		return nil, errs.E(errs.Invalid, "tools: register %s: timeout %s is outside %s–%s", t.Name, t.Timeout, MinTimeout, MaxTimeout)
	}
	if t.MaxRun == 0 {
		t.MaxRun = t.Timeout
	}
	if t.MaxRun < t.Timeout || t.MaxRun > MaxMaxRun {
		return nil, errs.E(errs.Invalid, "tools: register %s: maximum run %s is outside %s–%s", t.Name, t.MaxRun, t.Timeout, MaxMaxRun)
	}
	sch, err := compileSchema(t.Name, t.Schema)
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, err, "tools: register %s: invalid schema", t.Name)
	}
	t.Schema = slices.Clone(t.Schema)
	return &entry{tool: t, schema: sch, enabled: true, hash: r.contentHash(t)}, nil
}

// Unregister removes the tool; an unknown name is a no-op.
func (r *Registry) Unregister(name string) {
	r.mu.Lock()
	delete(r.tools, name)
	r.mu.Unlock()
}

// SetEnabled enables or disables a registered tool; an unknown name is
// errs.NotFound. A disabled tool is never offered and its calls get tool_disabled.
func (r *Registry) SetEnabled(name string, enabled bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.tools[name]
	if !ok {
		return errs.E(errs.NotFound, "tools: no tool named %q", name)
	}
	e.enabled = enabled
	return nil
}

// SetHidden hides a tool from the model (Enabled and Select leave it out) while calls
// still reach its executor. An MCP server's tools are hidden while the server is down,
// so that a call racing the failure gets the executor's "unavailable" answer rather
// than "unknown tool".
func (r *Registry) SetHidden(name string, hidden bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.tools[name]
	if !ok {
		return errs.E(errs.NotFound, "tools: no tool named %q", name)
	}
	e.hidden = hidden
	return nil
}

// Enabled returns the tools offered to the model (enabled, not hidden), sorted by name.
func (r *Registry) Enabled() []Tool {
	r.mu.RLock()
	out := make([]Tool, 0, len(r.tools))
	for _, e := range r.tools {
		if e.enabled && !e.hidden {
			out = append(out, e.tool)
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Specs returns the model-facing descriptions of tools, in the same order.
func (r *Registry) Specs(tools []Tool) []llm.ToolSpec {
	specs := make([]llm.ToolSpec, len(tools))
	for i, t := range tools {
		specs[i] = llm.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Schema}
	}
	return specs
}

// Dispatch runs one tool call from the model and always returns a Result: the
// tool's output, or a structured error for an unknown or disabled tool, invalid
// arguments, an executor error or panic, a timeout, or the caller's context
// ending. It returns by the tool's timeout even if the executor ignores ctx (the
// executor's goroutine then finishes in the background).
func (r *Registry) Dispatch(ctx context.Context, sessionID string, ownerID int64, call llm.ToolCall) Result {
	start := time.Now()
	res := r.dispatch(ctx, sessionID, ownerID, call)
	res.Duration = time.Since(start)
	return res
}

func (r *Registry) dispatch(ctx context.Context, sessionID string, ownerID int64, call llm.ToolCall) Result {
	r.mu.RLock()
	e, ok := r.tools[call.Name]
	var (
		t       Tool
		sch     *jsonschema.Schema
		enabled bool
	)
	if ok {
		t, sch, enabled = e.tool, e.schema, e.enabled
	}
	r.mu.RUnlock()
	if !ok {
		return failure(CodeUnknownTool, fmt.Sprintf("no tool named %q", capText(call.Name, 64)))
	}
	if !enabled {
		return failure(CodeDisabled, fmt.Sprintf("the tool %q is disabled", t.Name))
	}

	args := []byte(strings.TrimSpace(call.Arguments))
	if len(args) == 0 {
		args = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return failure(CodeInvalidArguments, "arguments are not valid JSON: "+jsonProblem(err))
	}
	if err := sch.Validate(inst); err != nil {
		return failure(CodeInvalidArguments, validationDetail(err, "arguments"))
	}
	return r.execute(ctx, t, Call{SessionID: sessionID, OwnerID: ownerID, Args: args, Hooks: hooksFrom(ctx)})
}

type outcome struct {
	out string
	err error
}

// errPanic marks a recovered panic; its text is never shown.
var errPanic = errors.New("tool panicked")

func (r *Registry) execute(ctx context.Context, t Tool, call Call) Result {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	clock := newClock(t.Timeout, t.MaxRun, func() { cancel(errTimedOut) })
	defer clock.stop()
	tctx = context.WithValue(tctx, clockKey{}, clock)
	done := make(chan outcome, 1) // buffered: a late executor must not block forever
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("tool panicked", "tool", t.Name, "panic", fmt.Sprint(p))
				done <- outcome{err: errPanic}
			}
		}()
		out, err := t.Execute(tctx, call)
		done <- outcome{out: out, err: err}
	}()

	select {
	case o := <-done:
		if o.err == nil {
			return Result{Content: o.out}
		}
		if tctx.Err() != nil {
			// The executor gave up because its context ended: report why it ended,
			// not the executor's echo of it (both channels can be ready at once).
			return ended(ctx, t)
		}
		var te *Error
		if errors.As(o.err, &te) {
			code := te.Code
			if code == "" {
				code = CodeExecutionFailed
			}
			return failure(code, capText(oneLine(te.Detail), maxDetail))
		}
		if o.err != errPanic {
			r.log.Error("tool failed", "tool", t.Name, "err", o.err)
		}
		return failure(CodeExecutionFailed, "the tool failed")
	case <-tctx.Done():
		if ctx.Err() == nil {
			r.log.Warn("tool timed out", "tool", t.Name, "timeout", t.Timeout)
		}
		return ended(ctx, t)
	}
}

// errTimedOut is the cause with which a call's clock ends it.
var errTimedOut = errors.New("tool timed out")

// ended is the result of a call whose context ended: cancelled by the caller (Stop,
// shutdown) or timed out.
func ended(ctx context.Context, t Tool) Result {
	if ctx.Err() != nil {
		return failure(CodeCanceled, "the call was cancelled before the tool finished")
	}
	if t.MaxRun > t.Timeout {
		return failure(CodeTimeout, fmt.Sprintf("tool %q did not finish: %s without progress, or %s in all", t.Name, t.Timeout, t.MaxRun))
	}
	return failure(CodeTimeout, fmt.Sprintf("tool %q did not finish within %s", t.Name, t.Timeout))
}

// failure builds an error Result whose Content is {"error":code,"detail":detail}.
func failure(code, detail string) Result {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}{code, detail})
	return Result{Content: strings.TrimSuffix(b.String(), "\n"), IsError: true, Code: code}
}

const maxDetail = 300

// capText shortens s to at most n bytes on a rune boundary, marking the cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// jsonProblem is a short reason why args did not parse. encoding/json's
// messages name only characters and offsets, never Go types for an `any` target.
func jsonProblem(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return capText(oneLine(strings.TrimPrefix(err.Error(), "json: ")), 200)
}
