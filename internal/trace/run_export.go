package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"atrium/internal/errs"
	"atrium/internal/jsonpos"
	"atrium/internal/store"
)

// A run export is one run as a JSON file, for a bug report between installs
// (issue 11). Span data is in the clear (opened) but redacted, as it was
// stored; the importing install redacts it again with its own secrets and seals
// it with the importer's key. The format is versioned: a reader refuses a
// version it does not know rather than guess.
const (
	RunExportFormat  = "atrium-run"
	RunExportVersion = 1
)

// Import limits. An export is one run: a 200-span run with long requests is a
// few MB.
const (
	MaxRunImportBytes = 16 << 20
	maxImportSpans    = 10000
	maxImportName     = 500 // span and model names, statuses
)

// RunExport is the file's document.
type RunExport struct {
	Format     string          `json:"format"`
	Version    int             `json:"version"`
	ExportedAt time.Time       `json:"exported_at"`
	Run        RunExportRun    `json:"run"`
	Spans      []RunExportSpan `json:"spans"`
}

// RunExportRun is the run's metadata. ID is the id on the exporting install,
// for reference only: an import gets a new one.
type RunExportRun struct {
	ID           string     `json:"id"`
	Model        string     `json:"model"`
	Status       string     `json:"status"`
	Error        string     `json:"error,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	InputTokens  int        `json:"input_tokens"`
	OutputTokens int        `json:"output_tokens"`
	Steps        int        `json:"steps"`
}

// RunExportSpan is one span; ParentSeq names its parent by seq (0: none).
type RunExportSpan struct {
	Seq       int             `json:"seq"`
	ParentSeq int             `json:"parent_seq,omitempty"`
	Kind      string          `json:"kind"`
	Name      string          `json:"name"`
	Status    string          `json:"status"`
	Error     string          `json:"error,omitempty"`
	StartedAt time.Time       `json:"started_at"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
	TokensIn  int             `json:"tokens_in"`
	TokensOut int             `json:"tokens_out"`
	Data      json.RawMessage `json:"data,omitempty"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// ExportRun returns ownerID's run runID as an export file (indented JSON).
// Another user's run is errs.NotFound, as in Run: the caller decides who may
// export whose run, and passes the run's owner.
func (r *Recorder) ExportRun(ctx context.Context, ownerID int64, runID string) ([]byte, error) {
	ri, spans, err := r.Run(ctx, ownerID, runID)
	if err != nil {
		return nil, err
	}
	out := RunExport{Format: RunExportFormat, Version: RunExportVersion, ExportedAt: r.now().UTC(),
		Run: RunExportRun{ID: ri.ID, Model: ri.Model, Status: ri.Status, Error: ri.Error, StartedAt: ri.StartedAt.UTC(),
			EndedAt: optTime(ri.EndedAt), InputTokens: ri.InputTokens, OutputTokens: ri.OutputTokens, Steps: ri.Steps},
		Spans: make([]RunExportSpan, 0, len(spans))}
	seqOf := make(map[int64]int, len(spans))
	for _, s := range spans {
		seqOf[s.ID] = s.Seq
		out.Spans = append(out.Spans, RunExportSpan{Seq: s.Seq, ParentSeq: seqOf[s.ParentID], Kind: s.Kind, Name: s.Name,
			Status: s.Status, Error: s.Error, StartedAt: s.StartedAt.UTC(), EndedAt: optTime(s.EndedAt),
			TokensIn: s.TokensIn, TokensOut: s.TokensOut, Data: s.Data})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("trace: export run: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseRunExport reads and checks a whole export file before anything is
// stored. Every problem is errs.Invalid (errs.TooLarge for size) with a message
// that says where: "line L, column C: …" for bad JSON, "span N (seq S): …" for
// a bad span.
func ParseRunExport(data []byte) (RunExport, error) {
	var x RunExport
	if len(data) > MaxRunImportBytes {
		return x, errs.E(errs.TooLarge, "The file is larger than %d MB.", MaxRunImportBytes>>20)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return x, errs.E(errs.Invalid, "The file is empty; choose a run export (.json).")
	}
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return x, jsonpos.Error(data, err)
	}
	if head.Format != RunExportFormat {
		return x, errs.E(errs.Invalid, "This is not a run export: \"format\" must be %q.", RunExportFormat)
	}
	if head.Version != RunExportVersion {
		return x, errs.E(errs.Invalid, "This export is format version %d; this Atrium reads version %d.", head.Version, RunExportVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // version 1 is all there is: an unknown key is a mistake
	if err := dec.Decode(&x); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return x, errs.E(errs.Invalid, "%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return x, jsonpos.Error(data, err)
	}
	if err := checkRunExport(x); err != nil {
		return RunExport{}, err
	}
	return x, nil
}

func checkRunExport(x RunExport) error {
	run := x.Run
	switch {
	case run.ID == "" || len(run.ID) > 200 || !utf8.ValidString(run.ID):
		return errs.E(errs.Invalid, "run: \"id\" must be the exporting install's run id.")
	case !validRunStatus(run.Status):
		return errs.E(errs.Invalid, "run: status %q is not a run status.", run.Status)
	case len(run.Model) > maxImportName:
		return errs.E(errs.Invalid, "run: the model name is too long.")
	case len(run.Error) > maxErrorLen:
		return errs.E(errs.Invalid, "run: the error text is longer than %d bytes.", maxErrorLen)
	case run.InputTokens < 0 || run.OutputTokens < 0 || run.Steps < 0:
		return errs.E(errs.Invalid, "run: token counts and steps cannot be negative.")
	}
	if err := checkTimes(run.StartedAt, run.EndedAt); err != nil {
		return errs.E(errs.Invalid, "run: %s", err)
	}
	if run.EndedAt != nil {
		if err := nearRun(run.StartedAt, *run.EndedAt); err != nil {
			return errs.E(errs.Invalid, "run: ended_at %s", err)
		}
	}
	if len(x.Spans) > maxImportSpans {
		return errs.E(errs.TooLarge, "The run has %d spans; at most %d can be imported.", len(x.Spans), maxImportSpans)
	}
	seen := make(map[int]bool, len(x.Spans))
	prev := 0
	for i, s := range x.Spans {
		fail := func(format string, args ...any) error {
			return errs.E(errs.Invalid, "span %d (seq %d): %s", i+1, s.Seq, fmt.Sprintf(format, args...))
		}
		switch {
		case s.Seq <= 0:
			return fail("seq must be a positive number.")
		case seen[s.Seq]:
			return fail("seq %d appears twice.", s.Seq)
		case s.Seq < prev:
			return fail("spans must be in seq order (after seq %d).", prev)
		case s.ParentSeq != 0 && !seen[s.ParentSeq]:
			return fail("parent_seq %d is not an earlier span.", s.ParentSeq)
		case !validKind(s.Kind):
			return fail("kind %q is not a span kind.", s.Kind)
		case len(s.Name) > maxImportName || len(s.Status) > maxImportName:
			return fail("the name or status is too long.")
		case len(s.Error) > maxErrorLen:
			return fail("the error text is longer than %d bytes.", maxErrorLen)
		case s.TokensIn < 0 || s.TokensOut < 0:
			return fail("token counts cannot be negative.")
		case isSealed(s.Data):
			return fail("the data is still sealed; an export holds opened data.")
		}
		if err := checkTimes(s.StartedAt, s.EndedAt); err != nil {
			return fail("%s", err)
		}
		if err := nearRun(run.StartedAt, s.StartedAt); err != nil {
			return fail("started_at %s", err)
		}
		if s.EndedAt != nil {
			if err := nearRun(run.StartedAt, *s.EndedAt); err != nil {
				return fail("ended_at %s", err)
			}
		}
		seen[s.Seq], prev = true, s.Seq
	}
	return nil
}

func validRunStatus(s string) bool {
	switch s {
	case StatusRunning, StatusComplete, StatusStopped, StatusError:
		return true
	}
	return false
}

// Times stored as unix milliseconds: from 2000 to 9999, so that nothing
// overflows when an import moves them.
var (
	minImportTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxImportTime = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
)

// maxImportRunLength bounds how far a run's end and its spans may lie from its start,
// so that moving the run to now moves them to sane times too.
const maxImportRunLength = 7 * 24 * time.Hour

func checkTimes(started time.Time, ended *time.Time) error {
	if started.Before(minImportTime) || started.After(maxImportTime) {
		return fmt.Errorf("started_at %s is missing or out of range", started.Format(time.RFC3339))
	}
	if ended != nil && (ended.Before(started) || ended.After(maxImportTime)) {
		return fmt.Errorf("ended_at is before started_at or out of range")
	}
	return nil
}

// nearRun checks that t lies within maxImportRunLength of the run's start.
func nearRun(runStart, t time.Time) error {
	if d := t.Sub(runStart); d < -maxImportRunLength || d > maxImportRunLength {
		return fmt.Errorf("%s is not within 7 days of the run's start (%s)", t.Format(time.RFC3339), runStart.Format(time.RFC3339))
	}
	return nil
}

// runImporter is the store side of ImportRun (*store.DB is one). It is apart
// from RunStore because only an import writes a whole run at once.
type runImporter interface {
	InsertRuns(ctx context.Context, runs []store.ImportedRun) error
}

// ImportRun checks an export file (ParseRunExport) and stores it as run newID
// of ownerID, marked imported, without a session: redacted again with this
// install's secrets, sealed with ownerID's key, and moved in time so that it
// starts now (its spans keep their offsets), which keeps it from being pruned
// at once for its age. A run exported while running is stored as stopped.
func (r *Recorder) ImportRun(ctx context.Context, ownerID int64, newID string, data []byte) (RunInfo, error) {
	im, ok := r.db.(runImporter)
	if !ok {
		return RunInfo{}, fmt.Errorf("trace: import run: the store cannot import runs")
	}
	x, err := ParseRunExport(data)
	if err != nil {
		return RunInfo{}, fmt.Errorf("trace: import run: %w", err)
	}
	// In milliseconds: a time.Duration spans only 292 years, and starts up to the
	// year 9999 are accepted (ParseRunExport keeps every other time within a week of it).
	shift := r.now().UnixMilli() - x.Run.StartedAt.UnixMilli()
	move := func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli() + shift).UTC() }
	moved := func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return move(*t)
	}
	ri := RunInfo{ID: newID, OwnerID: ownerID, Model: r.red.String(x.Run.Model), Status: x.Run.Status,
		Error: r.red.String(x.Run.Error), StartedAt: move(x.Run.StartedAt), EndedAt: moved(x.Run.EndedAt),
		InputTokens: x.Run.InputTokens, OutputTokens: x.Run.OutputTokens, Steps: x.Run.Steps}
	if ri.Status == StatusRunning {
		ri.Status = StatusStopped
		if ri.EndedAt.IsZero() {
			ri.EndedAt = ri.StartedAt
		}
		if ri.Error == "" {
			ri.Error = "exported while running"
		}
	}
	run := store.ImportedRun{RunInfo: ri, Imported: true, Spans: make([]store.ImportedSpan, 0, len(x.Spans))}
	for _, s := range x.Spans {
		var raw json.RawMessage
		if len(s.Data) > 0 && string(s.Data) != "null" {
			if raw, err = r.red.JSON(s.Data); err != nil {
				return RunInfo{}, fmt.Errorf("trace: import run: span %d: %w", s.Seq, errs.Wrap(errs.Invalid, err, "bad data"))
			}
		}
		if raw, err = r.seal(ctx, ownerID, newID, s.Seq, raw); err != nil {
			return RunInfo{}, fmt.Errorf("trace: import run: span %d: %w", s.Seq, err)
		}
		run.Spans = append(run.Spans, store.ImportedSpan{ParentSeq: s.ParentSeq, SpanRow: store.SpanRow{RunID: newID,
			Seq: s.Seq, Kind: s.Kind, Name: r.red.String(s.Name), Status: s.Status, Error: r.red.String(s.Error),
			StartedAt: move(s.StartedAt), EndedAt: moved(s.EndedAt), TokensIn: s.TokensIn, TokensOut: s.TokensOut, Data: raw}})
	}
	if err := im.InsertRuns(ctx, []store.ImportedRun{run}); err != nil {
		return RunInfo{}, fmt.Errorf("trace: import run: %w", err)
	}
	return ri, nil
}
