package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// RunInfo is a stored run. EndedAt is the zero time while it is running.
type RunInfo struct {
	ID, SessionID, Model, Status, Error string
	OwnerID                             int64
	StartedAt, EndedAt                  time.Time
	InputTokens, OutputTokens, Steps    int
}

// SpanInfo is a stored span. ParentID is 0 for a top-level span; EndedAt is the
// zero time while it is open; Data is the redacted JSON (nil when none).
type SpanInfo struct {
	ID, ParentID              int64
	Seq                       int
	Kind, Name, Status, Error string
	StartedAt, EndedAt        time.Time
	TokensIn, TokensOut       int
	Data                      json.RawMessage
}

// Default and largest page of Runs.
const (
	DefaultRunsLimit = 50
	MaxRunsLimit     = 500
)

const runCols = `id, COALESCE(session_id, ''), owner_id, model, status, error, started_at, ended_at, input_tokens, output_tokens, steps`

func scanRun(row interface{ Scan(...any) error }) (RunInfo, error) {
	var ri RunInfo
	var started int64
	var ended sql.NullInt64
	err := row.Scan(&ri.ID, &ri.SessionID, &ri.OwnerID, &ri.Model, &ri.Status, &ri.Error, &started, &ended,
		&ri.InputTokens, &ri.OutputTokens, &ri.Steps)
	ri.StartedAt, ri.EndedAt = time.UnixMilli(started), fromNullMS(ended)
	return ri, err
}

func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

// Runs lists ownerID's runs, newest first: all of them, or only those of
// sessionID when it is not "". A session of another user simply has no runs
// here. limit <= 0 means DefaultRunsLimit; it is capped at MaxRunsLimit.
func (r *Recorder) Runs(ctx context.Context, ownerID int64, sessionID string, limit int) ([]RunInfo, error) {
	if limit <= 0 {
		limit = DefaultRunsLimit
	}
	limit = min(limit, MaxRunsLimit)
	var rows *sql.Rows
	var err error
	if sessionID == "" {
		rows, err = r.db.SQL.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE owner_id = ?
			ORDER BY started_at DESC, rowid DESC LIMIT ?`, ownerID, limit)
	} else {
		rows, err = r.db.SQL.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE session_id = ? AND owner_id = ?
			ORDER BY started_at DESC, rowid DESC LIMIT ?`, sessionID, ownerID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("trace: list runs: %w", err)
	}
	defer rows.Close()
	var list []RunInfo
	for rows.Next() {
		ri, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("trace: list runs: %w", err)
		}
		list = append(list, ri)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("trace: list runs: %w", err)
	}
	return list, nil
}

// Run returns ownerID's run runID and its spans ordered by seq. A missing run and
// another user's run are the same errs.NotFound.
func (r *Recorder) Run(ctx context.Context, ownerID int64, runID string) (RunInfo, []SpanInfo, error) {
	ri, err := scanRun(r.db.SQL.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ? AND owner_id = ?`, runID, ownerID))
	if errors.Is(err, sql.ErrNoRows) {
		return RunInfo{}, nil, fmt.Errorf("trace: run: %w", errs.E(errs.NotFound, "run not found"))
	}
	if err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run: %w", err)
	}
	rows, err := r.db.SQL.QueryContext(ctx, `SELECT id, COALESCE(parent_id, 0), seq, kind, name, status, error,
		started_at, ended_at, tokens_in, tokens_out, data FROM spans WHERE run_id = ? ORDER BY seq`, runID)
	if err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run spans: %w", err)
	}
	defer rows.Close()
	var spans []SpanInfo
	for rows.Next() {
		var s SpanInfo
		var started int64
		var ended sql.NullInt64
		var data sql.NullString
		if err := rows.Scan(&s.ID, &s.ParentID, &s.Seq, &s.Kind, &s.Name, &s.Status, &s.Error,
			&started, &ended, &s.TokensIn, &s.TokensOut, &data); err != nil {
			return RunInfo{}, nil, fmt.Errorf("trace: run spans: %w", err)
		}
		s.StartedAt, s.EndedAt = time.UnixMilli(started), fromNullMS(ended)
		if data.Valid {
			s.Data = json.RawMessage(data.String)
		}
		spans = append(spans, s)
	}
	if err := rows.Err(); err != nil {
		return RunInfo{}, nil, fmt.Errorf("trace: run spans: %w", err)
	}
	return ri, spans, nil
}

// LatestSpanData returns the data of the newest span of kind in ownerID's runs of
// sessionID (e.g. the last context assembly, for the context meter), or nil when there
// is none. One indexed query; it never loads a run's other spans.
func (r *Recorder) LatestSpanData(ctx context.Context, ownerID int64, sessionID, kind string) (json.RawMessage, error) {
	var data sql.NullString
	err := r.db.SQL.QueryRowContext(ctx, `SELECT s.data FROM spans s
		WHERE s.run_id = (SELECT id FROM runs WHERE owner_id = ? AND session_id = ? ORDER BY started_at DESC LIMIT 1)
		AND s.kind = ? ORDER BY s.seq DESC LIMIT 1`, ownerID, sessionID, kind).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !data.Valid) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("trace: latest span: %w", err)
	}
	return json.RawMessage(data.String), nil
}
