package trace

import (
	"context"
	"encoding/json"
	"fmt"

	"atrium/internal/store"
)

// RunInfo is a stored run. EndedAt is the zero time while it is running.
type RunInfo = store.RunInfo

// SpanInfo is a stored span. ParentID is 0 for a top-level span; EndedAt is the
// zero time while it is open; Data is the redacted JSON (nil when none).
type SpanInfo = store.SpanInfo

// Default and largest page of Runs.
const (
	DefaultRunsLimit = 50
	MaxRunsLimit     = 500
)

// Runs lists ownerID's runs, newest first: all of them, or only those of
// sessionID when it is not "". A session of another user simply has no runs
// here. limit <= 0 means DefaultRunsLimit; it is capped at MaxRunsLimit.
func (r *Recorder) Runs(ctx context.Context, ownerID int64, sessionID string, limit int) ([]RunInfo, error) {
	if limit <= 0 {
		limit = DefaultRunsLimit
	}
	limit = min(limit, MaxRunsLimit)
	list, err := r.db.ListRuns(ctx, ownerID, sessionID, limit)
	if err != nil {
		return nil, fmt.Errorf("trace: list runs: %w", err)
	}
	return list, nil
}

// Run returns ownerID's run runID and its spans ordered by seq. A missing run and
// another user's run are the same errs.NotFound.
func (r *Recorder) Run(ctx context.Context, ownerID int64, runID string) (RunInfo, []SpanInfo, error) {
	ri, err := r.db.RunForOwner(ctx, ownerID, runID)
	if err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run: %w", err)
	}
	spans, err := r.db.RunSpans(ctx, runID)
	if err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run spans: %w", err)
	}
	for i := range spans {
		if spans[i].Data, err = r.opened(ctx, ownerID, runID, spans[i].Seq, spans[i].Data); err != nil {
			return RunInfo{}, nil, fmt.Errorf("trace: open span %d: %w", spans[i].Seq, err)
		}
	}
	return ri, spans, nil
}

// LatestSpanData returns the data of the newest span of kind in ownerID's runs of
// sessionID (e.g. the last context assembly, for the context meter), or nil when there
// is none. One indexed query; it never loads a run's other spans.
func (r *Recorder) LatestSpanData(ctx context.Context, ownerID int64, sessionID, kind string) (json.RawMessage, error) {
	ref, err := r.db.LatestSpanData(ctx, ownerID, sessionID, kind)
	if err != nil {
		return nil, fmt.Errorf("trace: latest span: %w", err)
	}
	data, err := r.opened(ctx, ownerID, ref.RunID, ref.Seq, ref.Data)
	if err != nil {
		return nil, fmt.Errorf("trace: open latest span: %w", err)
	}
	return data, nil
}

// RunOutline returns ownerID's run runID and its spans without their data, ordered
// by seq (a timeline opens each span's data on demand, with RunSpan). A missing run
// and another user's run are the same errs.NotFound.
func (r *Recorder) RunOutline(ctx context.Context, ownerID int64, runID string) (RunInfo, []SpanInfo, error) {
	ri, err := r.db.RunForOwner(ctx, ownerID, runID)
	if err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run: %w", err)
	}
	spans, err := r.db.RunSpanOutline(ctx, runID)
	if err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run outline: %w", err)
	}
	return ri, spans, nil
}

// RunSpan returns span seq of ownerID's run runID with its data opened, and the run.
// A missing run or span and another user's run are the same errs.NotFound.
func (r *Recorder) RunSpan(ctx context.Context, ownerID int64, runID string, seq int) (RunInfo, SpanInfo, error) {
	ri, err := r.db.RunForOwner(ctx, ownerID, runID)
	if err != nil {
		return RunInfo{}, SpanInfo{}, fmt.Errorf("trace: run: %w", err)
	}
	sp, err := r.db.RunSpan(ctx, runID, seq)
	if err != nil {
		return RunInfo{}, SpanInfo{}, fmt.Errorf("trace: run span: %w", err)
	}
	if sp.Data, err = r.opened(ctx, ownerID, runID, sp.Seq, sp.Data); err != nil {
		return RunInfo{}, SpanInfo{}, fmt.Errorf("trace: open span %d: %w", sp.Seq, err)
	}
	return ri, sp, nil
}
