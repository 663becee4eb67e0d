// Package trace records the call chain of every agent turn: one run per turn and,
// inside it, ordered spans for context assembly, tool selection, each model request
// (exactly as sent) and response, each tool call and result, summary updates, memory
// lookups and the final reply. Everything stored passes through a Redactor first.
//
// Recording must never break a turn. Every write is a small transaction of its own
// that ignores the caller's cancellation (a stopped turn is still recorded) and is
// bounded by WriteTimeout. A failed write returns an error for the caller to log,
// and the Run and Span stay usable: a run row that could not be written is created
// by the next write, a span whose start could not be written is written whole when
// it ends. A nil *Run or *Span records nothing and returns nil, so a caller may
// keep going after StartRun failed.
//
// Reading is owner-scoped: another user's run is errs.NotFound, exactly like a
// missing one.
package trace

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/store"
)

// Span kinds, as stored in spans.kind.
const (
	KindContext       = "context"        // context assembly: what was included, cut, and why
	KindToolSelection = "tool_selection" // which tools were offered this step
	KindModelRequest  = "model_request"  // data: ModelRequest (the request exactly as sent)
	KindModelResponse = "model_response" // the assembled response
	KindToolCall      = "tool_call"
	KindToolResult    = "tool_result"
	KindSummary       = "summary" // a rolling-summary update
	KindFinal         = "final"   // the final reply
	KindMemory        = "memory"  // memory lookups and writes
	KindError         = "error"
)

func validKind(k string) bool {
	switch k {
	case KindContext, KindToolSelection, KindModelRequest, KindModelResponse, KindToolCall,
		KindToolResult, KindSummary, KindFinal, KindMemory, KindError:
		return true
	}
	return false
}

// Run statuses, as stored in runs.status.
const (
	StatusRunning  = "running"
	StatusComplete = "complete"
	StatusStopped  = "stopped"
	StatusError    = "error"
)

// Span statuses used when End is given none. Callers may store others.
const (
	SpanRunning = "running"
	SpanOK      = "ok"
	SpanError   = "error"
)

// WriteTimeout bounds every recorder write.
const WriteTimeout = 5 * time.Second

// maxErrorLen caps stored error texts (in bytes, cut at a rune boundary).
const maxErrorLen = 4000

// RunStore is the database a Recorder writes runs and spans to and reads them
// from; *store.DB is one. Writes that take a create argument first create that
// run's row (unless it exists) in the same transaction, for a run whose row could
// not be written yet. Bytes are stored as given: the Recorder redacts before.
type RunStore interface {
	// CurrentTime is the time to stamp writes with (store.DB: its Now).
	CurrentTime() time.Time
	CreateRun(ctx context.Context, r store.RunStart) error
	InsertSpan(ctx context.Context, create *store.RunStart, s store.SpanRow) (int64, error)
	EndSpan(ctx context.Context, create *store.RunStart, e store.SpanEnd) error
	EndRun(ctx context.Context, create *store.RunStart, e store.RunEnd) error
	StopRunningRuns(ctx context.Context, errText string, ended time.Time) (int64, error)
	// WriteRuns applies a batch of writes in one transaction (see store.DB.WriteRuns).
	WriteRuns(ctx context.Context, ws []store.RunWrite) ([]error, error)

	ListRuns(ctx context.Context, ownerID int64, sessionID string, limit int) ([]store.RunInfo, error)
	RunForOwner(ctx context.Context, ownerID int64, runID string) (store.RunInfo, error)
	RunSpans(ctx context.Context, runID string) ([]store.SpanInfo, error)
	RunSpanOutline(ctx context.Context, runID string) ([]store.SpanInfo, error)
	RunSpan(ctx context.Context, runID string, seq int) (store.SpanInfo, error)
	LatestSpanData(ctx context.Context, ownerID int64, sessionID, kind string) (store.SpanRef, error)
	PlainSpans(ctx context.Context, after int64, limit int) ([]store.SpanRef, error)
	SealSpans(ctx context.Context, spans []store.SpanRef) error
}

var _ RunStore = (*store.DB)(nil)

// Sealer seals and opens data for an owner (*crypto.Keyring is one).
type Sealer interface {
	Seal(ctx context.Context, owner int64, plaintext, ad []byte) ([]byte, error)
	Open(ctx context.Context, owner int64, sealed, ad []byte) ([]byte, error)
}

// Recorder writes and reads runs and spans. It is safe for concurrent use.
type Recorder struct {
	db   RunStore
	red  *Redactor
	keys Sealer // nil: span data is stored in the clear
}

// NewRecorder returns a recorder on db (a *store.DB) that redacts with red (nil:
// a Redactor with no configured secrets, which still masks bearer tokens and
// keys) and, when keys is set, seals the data of every span with the run owner's
// data key: requests carry the whole context, recalled memories included, and tool
// results and replies are as private; none may sit in the database file in
// plaintext. Run and LatestSpanData open them again. Kinds, names, timings, tokens
// and statuses stay in the clear for queries.
// Timestamps come from db.CurrentTime, i.e. a store.DB's Now.
func NewRecorder(db RunStore, red *Redactor, keys Sealer) *Recorder {
	if red == nil {
		red = NewRedactor()
	}
	return &Recorder{db: db, red: red, keys: keys}
}

// Redactor returns the recorder's redactor, e.g. to add secrets later.
func (r *Recorder) Redactor() *Redactor { return r.red }

func (r *Recorder) now() time.Time { return r.db.CurrentTime() }

// writeCtx detaches ctx from its cancellation and bounds it by WriteTimeout.
func writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout)
}

// Run is one turn being recorded. It is safe for concurrent use by the run's
// goroutines; spans are numbered (seq) in the order they are started.
type Run struct {
	rec       *Recorder
	id        string
	sessionID string
	ownerID   int64
	model     string
	started   time.Time

	mu      sync.Mutex
	seq     int
	created bool // the runs row is known to exist
}

// StartRun records the start of run id (the caller makes the id, e.g. a UUID) for
// ownerID in sessionID ("" for a run outside any session) with model.
//
// Errors: an empty id or a non-positive owner is errs.Invalid, a session that does
// not exist or is not ownerID's (or an unknown owner) errs.NotFound, a taken id
// errs.Conflict; in these cases the returned *Run is nil, which records nothing.
// Any other failure returns a usable *Run together with the error; its row is
// written by its next successful write.
func (r *Recorder) StartRun(ctx context.Context, id, sessionID string, ownerID int64, model string) (*Run, error) {
	if id == "" || ownerID <= 0 {
		return nil, fmt.Errorf("trace: start run: %w", errs.E(errs.Invalid, "a run needs an id and an owner"))
	}
	run := &Run{rec: r, id: id, sessionID: sessionID, ownerID: ownerID, model: model, started: r.now()}
	ctx, cancel := writeCtx(ctx)
	defer cancel()
	if err := r.db.CreateRun(ctx, run.row()); err != nil {
		// Refusals (unknown owner or session, taken id) give no run; a failed
		// write gives a run whose next write creates the row.
		if c := errs.Code(err); c == errs.NotFound || c == errs.Conflict {
			return nil, fmt.Errorf("trace: start run: %w", err)
		}
		return run, fmt.Errorf("trace: start run: %w", err)
	}
	run.created = true
	return run, nil
}

// row is the run's row as StartRun writes it.
func (run *Run) row() store.RunStart {
	return store.RunStart{ID: run.id, SessionID: run.sessionID, OwnerID: run.ownerID, Model: run.model, StartedAt: run.started}
}

// write runs fn, one store write, with a detached, bounded context and, if an
// earlier write could not create the run's row, a create argument that makes
// the store create it in the same transaction.
func (run *Run) write(ctx context.Context, fn func(ctx context.Context, create *store.RunStart) error) error {
	ctx, cancel := writeCtx(ctx)
	defer cancel()
	run.mu.Lock()
	created := run.created
	run.mu.Unlock()
	var create *store.RunStart
	if !created {
		row := run.row()
		create = &row
	}
	if err := fn(ctx, create); err != nil {
		return err
	}
	if !created {
		run.mu.Lock()
		run.created = true
		run.mu.Unlock()
	}
	return nil
}

// ID returns the run's id ("" for a nil run).
func (run *Run) ID() string {
	if run == nil {
		return ""
	}
	return run.id
}

func (run *Run) nextSeq() int {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.seq++
	return run.seq
}

// Span is one step of a run, started by Run.Span or Span.Child and finished by
// End. It is safe for concurrent use.
type Span struct {
	run     *Run
	parent  int64
	seq     int
	kind    string
	name    string
	started time.Time

	mu    sync.Mutex
	id    int64           // 0 until the start is written
	data  json.RawMessage // redacted, as last written
	ended bool
}

// ID returns the span's row id, 0 for a nil span or one whose start could not be
// written yet.
func (s *Span) ID() int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Span starts a top-level span of kind (one of the Kind constants) with a name
// (a tool's name, a model's, ...) and data (any JSON-marshalable value, redacted
// before storage; pass JSON documents as json.RawMessage so that their keys are
// redacted too). It takes the next seq. An unknown kind is errs.Invalid and gives
// a nil *Span; a failed write returns a usable *Span with the error.
func (run *Run) Span(ctx context.Context, kind, name string, data any) (*Span, error) {
	return run.start(ctx, 0, kind, name, data, time.Time{})
}

// SpanAt is Span for a span that started at at (an event's time), not when it is
// written: the event's other consumers run first.
func (run *Run) SpanAt(ctx context.Context, at time.Time, kind, name string, data any) (*Span, error) {
	return run.start(ctx, 0, kind, name, data, at)
}

// Child starts a span nested under s (see Run.Span).
func (s *Span) Child(ctx context.Context, kind, name string, data any) (*Span, error) {
	if s == nil {
		return nil, nil
	}
	return s.run.start(ctx, s.ID(), kind, name, data, time.Time{})
}

// start begins a span at at; zero is now.
func (run *Run) start(ctx context.Context, parent int64, kind, name string, data any, at time.Time) (*Span, error) {
	if run == nil {
		return nil, nil
	}
	if !validKind(kind) {
		return nil, fmt.Errorf("trace: start span: %w", errs.E(errs.Invalid, "unknown span kind %q", kind))
	}
	raw, jerr := run.rec.red.JSON(data)
	if at.IsZero() {
		at = run.rec.now()
	}
	s := &Span{run: run, parent: parent, seq: run.nextSeq(), kind: kind, name: run.rec.red.String(name),
		started: at, data: raw}
	err := run.write(ctx, func(ctx context.Context, create *store.RunStart) error {
		id, err := s.insert(ctx, create, SpanRunning, "", time.Time{}, 0, 0)
		s.id = id // no one else has s yet
		return err
	})
	if err = errors.Join(jerr, err); err != nil {
		return s, fmt.Errorf("trace: start span %s: %w", kind, err)
	}
	return s, nil
}

// insert writes the whole span row and returns its id. A zero ended leaves the
// span open.
func (s *Span) insert(ctx context.Context, create *store.RunStart, status, errText string, ended time.Time, tokIn, tokOut int) (int64, error) {
	data, err := s.stored(ctx, s.data)
	if err != nil {
		return 0, err
	}
	return s.run.rec.db.InsertSpan(ctx, create, store.SpanRow{RunID: s.run.id, ParentID: s.parent, Seq: s.seq,
		Kind: s.kind, Name: s.name, Status: status, Error: errText, StartedAt: s.started, EndedAt: ended,
		TokensIn: tokIn, TokensOut: tokOut, Data: data})
}

// sealedData is how a sealed span's data is stored. Deflate marks data compressed
// before sealing (everything written since migration 0023; model requests sealed
// before that are not): a model request holds its messages twice, as built and as
// the wire body, and JSON compresses well, so sealing costs less room than plaintext.
type sealedData struct {
	Sealed  []byte `json:"sealed"`
	Deflate bool   `json:"deflate,omitempty"`
}

func spanAD(runID string, seq int) []byte { return crypto.AD("span", runID, strconv.Itoa(seq)) }

// stored is data as it goes into the database: compressed and sealed with the run
// owner's key when the recorder has keys (every kind: tool results and replies are
// as private as requests), as is otherwise.
func (s *Span) stored(ctx context.Context, data json.RawMessage) (json.RawMessage, error) {
	return s.run.rec.seal(ctx, s.run.ownerID, s.run.id, s.seq, data)
}

// deflaters reuses flate writers: a new one allocates about 800 KB, which made
// sealing a small span cost ten times its write.
var deflaters = sync.Pool{New: func() any {
	zw, _ := flate.NewWriter(nil, flate.BestSpeed) // only an invalid level fails
	return zw
}}

func (r *Recorder) seal(ctx context.Context, owner int64, runID string, seq int, data json.RawMessage) (json.RawMessage, error) {
	if r.keys == nil || len(data) == 0 {
		return data, nil
	}
	var buf bytes.Buffer
	zw := deflaters.Get().(*flate.Writer)
	zw.Reset(&buf)
	_, err := zw.Write(data)
	if err == nil {
		err = zw.Close()
	}
	deflaters.Put(zw)
	if err != nil {
		return nil, fmt.Errorf("compress span data: %w", err)
	}
	sealed, err := r.keys.Seal(ctx, owner, buf.Bytes(), spanAD(runID, seq))
	if err != nil {
		return nil, fmt.Errorf("seal span data: %w", err)
	}
	return json.Marshal(sealedData{Sealed: sealed, Deflate: true})
}

// isSealed tells sealed span data from plaintext JSON (rows written before 0023).
func isSealed(data []byte) bool { return bytes.HasPrefix(data, []byte(`{"sealed":`)) }

// maxSpanData bounds a span's data once inflated, against a hostile row.
const maxSpanData = 64 << 20

// opened returns a stored span's data in the clear. Plaintext rows (from before
// sealing covered every kind) come back as they are until SealStored seals them.
func (r *Recorder) opened(ctx context.Context, owner int64, runID string, seq int, data json.RawMessage) (json.RawMessage, error) {
	if r.keys == nil || !isSealed(data) {
		return data, nil
	}
	var sd sealedData
	if err := json.Unmarshal(data, &sd); err != nil {
		return nil, err
	}
	plain, err := r.keys.Open(ctx, owner, sd.Sealed, spanAD(runID, seq))
	if err != nil || !sd.Deflate {
		return plain, err
	}
	out, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(plain)), maxSpanData))
	if err != nil {
		return nil, fmt.Errorf("inflate span data: %w", err)
	}
	return out, nil
}

// SealStored seals the data of spans stored in the clear (written before every
// kind was sealed), a batch at a time, until none is left or ctx ends, and returns
// how many it sealed. It runs in the background at start-up: reads open both forms
// meanwhile, and sealing on read instead would leave runs nobody opens in the
// clear for ever.
func (r *Recorder) SealStored(ctx context.Context, batch int) (int, error) {
	if r.keys == nil {
		return 0, nil
	}
	total, after := 0, int64(0)
	for ctx.Err() == nil {
		plain, err := r.db.PlainSpans(ctx, after, batch)
		if err != nil || len(plain) == 0 {
			return total, err
		}
		after = plain[len(plain)-1].ID
		for i := range plain {
			if plain[i].Data, err = r.seal(ctx, plain[i].OwnerID, plain[i].RunID, plain[i].Seq, plain[i].Data); err != nil {
				return total, fmt.Errorf("trace: seal stored span %d: %w", plain[i].ID, err)
			}
		}
		if err := r.db.SealSpans(ctx, plain); err != nil {
			return total, fmt.Errorf("trace: seal stored spans: %w", err)
		}
		total += len(plain)
	}
	return total, ctx.Err()
}

// End finishes the span. An empty status becomes "ok", or "error" when err is
// non-nil; err is stored as redacted text. Non-nil data is redacted and, when both
// it and the span's start data are JSON objects, merged into it key by key (the
// new value wins); otherwise it replaces the start data. Ending a span twice is
// errs.Conflict. A failed write leaves the span open so that End can be retried.
func (s *Span) End(ctx context.Context, status string, err error, tokensIn, tokensOut int, data any) error {
	return s.EndAt(ctx, time.Time{}, status, err, tokensIn, tokensOut, data)
}

// EndAt is End for a span that ended at at (an event's time); zero is now. A span
// never ends before it started.
func (s *Span) EndAt(ctx context.Context, at time.Time, status string, err error, tokensIn, tokensOut int, data any) error {
	if s == nil {
		return nil
	}
	status = spanStatus(status, err)
	errText := s.run.errorText(err)
	var raw json.RawMessage
	var jerr error
	if data != nil {
		raw, jerr = s.run.rec.red.JSON(data)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return fmt.Errorf("trace: end span: %w", errs.E(errs.Conflict, "span %d (seq %d) already ended", s.id, s.seq))
	}
	newData := s.data
	if raw != nil {
		newData = mergeJSON(s.data, raw)
	}
	ended := at
	if ended.IsZero() {
		ended = s.run.rec.now()
	}
	if ended.Before(s.started) {
		ended = s.started
	}
	werr := s.run.write(ctx, func(ctx context.Context, create *store.RunStart) error {
		if s.id == 0 { // the start was never written: write the span whole
			prev := s.data
			s.data = newData
			id, err := s.insert(ctx, create, status, errText, ended, tokensIn, tokensOut)
			s.data = prev
			if err == nil {
				s.id = id
			}
			return err
		}
		data, err := s.stored(ctx, newData)
		if err != nil {
			return err
		}
		return s.run.rec.db.EndSpan(ctx, create, store.SpanEnd{ID: s.id, Status: status, Error: errText, EndedAt: ended,
			TokensIn: tokensIn, TokensOut: tokensOut, Data: data})
	})
	if werr == nil {
		s.data, s.ended = newData, true
	}
	if err := errors.Join(jerr, werr); err != nil {
		return fmt.Errorf("trace: end span %s: %w", s.kind, err)
	}
	return nil
}

// Record writes a finished top-level span in one write: it started at started
// and ends now. Status, err and data are as for Span.End.
func (run *Run) Record(ctx context.Context, kind, name string, data any, started time.Time, status string, err error, tokensIn, tokensOut int) error {
	return run.record(ctx, 0, kind, name, data, started, time.Time{}, status, err, tokensIn, tokensOut)
}

// RecordEnded is Record for a span that ended at ended (an event's time), not
// when it is written: the event's other consumers run first, and their time is
// not the span's.
func (run *Run) RecordEnded(ctx context.Context, kind, name string, data any, started, ended time.Time, status string, err error, tokensIn, tokensOut int) error {
	return run.record(ctx, 0, kind, name, data, started, ended, status, err, tokensIn, tokensOut)
}

// Record writes a finished span nested under s (see Run.Record).
func (s *Span) Record(ctx context.Context, kind, name string, data any, started time.Time, status string, err error, tokensIn, tokensOut int) error {
	if s == nil {
		return nil
	}
	return s.run.record(ctx, s.ID(), kind, name, data, started, time.Time{}, status, err, tokensIn, tokensOut)
}

func (run *Run) record(ctx context.Context, parent int64, kind, name string, data any, started, ended time.Time, status string, err error, tokensIn, tokensOut int) error {
	if run == nil {
		return nil
	}
	if !validKind(kind) {
		return fmt.Errorf("trace: record span: %w", errs.E(errs.Invalid, "unknown span kind %q", kind))
	}
	raw, jerr := run.rec.red.JSON(data)
	if ended.IsZero() {
		ended = run.rec.now()
	}
	if started.IsZero() {
		started = ended
	}
	s := &Span{run: run, parent: parent, seq: run.nextSeq(), kind: kind, name: run.rec.red.String(name), started: started, data: raw}
	werr := run.write(ctx, func(ctx context.Context, create *store.RunStart) error {
		_, err := s.insert(ctx, create, spanStatus(status, err), run.errorText(err), ended, tokensIn, tokensOut)
		return err
	})
	if err := errors.Join(jerr, werr); err != nil {
		return fmt.Errorf("trace: record span %s: %w", kind, err)
	}
	return nil
}

// End finishes the run with status (complete, stopped or error; empty means
// complete, or error when err is non-nil), its error as redacted text, the token
// totals and the number of steps. An unknown status is errs.Invalid. Ending again
// overwrites the totals.
func (run *Run) End(ctx context.Context, status string, err error, inTok, outTok, steps int) error {
	if run == nil {
		return nil
	}
	if status == "" {
		status = StatusComplete
		if err != nil {
			status = StatusError
		}
	}
	switch status {
	case StatusComplete, StatusStopped, StatusError:
	default:
		return fmt.Errorf("trace: end run: %w", errs.E(errs.Invalid, "unknown run status %q", status))
	}
	ended := run.rec.now()
	werr := run.write(ctx, func(ctx context.Context, create *store.RunStart) error {
		return run.rec.db.EndRun(ctx, create, store.RunEnd{ID: run.id, Status: status, Error: run.errorText(err),
			EndedAt: ended, InputTokens: inTok, OutputTokens: outTok, Steps: steps})
	})
	if werr != nil {
		return fmt.Errorf("trace: end run: %w", werr)
	}
	return nil
}

// StopUnfinished marks every run still "running" as stopped, with an error saying
// the server stopped. Call it once at startup, before any turn runs: a run left
// running then belongs to a process that is gone. It returns how many it marked.
func (r *Recorder) StopUnfinished(ctx context.Context) (int64, error) {
	n, err := r.db.StopRunningRuns(ctx, "the server stopped before this run finished", r.now())
	if err != nil {
		return 0, fmt.Errorf("trace: stop unfinished runs: %w", err)
	}
	return n, nil
}

func spanStatus(status string, err error) string {
	if status != "" {
		return status
	}
	if err != nil {
		return SpanError
	}
	return SpanOK
}

func (run *Run) errorText(err error) string { return run.rec.errorText(err) }

// errorText is err as stored: redacted, at most maxErrorLen bytes.
func (r *Recorder) errorText(err error) string {
	if err == nil {
		return ""
	}
	s := r.red.String(err.Error())
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// mergeJSON merges patch into base when both are JSON objects (top-level keys of
// patch win) and returns patch otherwise.
func mergeJSON(base, patch json.RawMessage) json.RawMessage {
	var b, p map[string]json.RawMessage
	if len(base) == 0 || json.Unmarshal(base, &b) != nil || b == nil ||
		json.Unmarshal(patch, &p) != nil || p == nil {
		return patch
	}
	for k, v := range p {
		b[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(b) != nil {
		return patch
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}
