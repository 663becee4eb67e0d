package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Runs and spans are the trace of agent turns (package trace, migration 0002).
// The store persists what it is given: redaction happens in trace, before.

// RunStart is a run's row as the run starts.
type RunStart struct {
	ID        string
	SessionID string // "" for a run outside any session
	OwnerID   int64
	Model     string
	StartedAt time.Time
	// ReplayOf and ReplaySpan mark a replay: the run (the owner's too) and the seq of
	// its model_request span that this run sends again. "" and 0 for a turn.
	ReplayOf   string
	ReplaySpan int
}

// RunEnd finishes run ID.
type RunEnd struct {
	ID, Status, Error                string
	EndedAt                          time.Time
	InputTokens, OutputTokens, Steps int
}

// SpanRow is a whole span row, as a span starts or, when its start could not be
// written, as it ends.
type SpanRow struct {
	RunID                     string
	ParentID                  int64 // 0 for a top-level span
	Seq                       int
	Kind, Name, Status, Error string
	StartedAt                 time.Time
	EndedAt                   time.Time // zero while the span is open
	TokensIn, TokensOut       int
	Data                      []byte // JSON; nil for none
}

// SpanEnd finishes span ID.
type SpanEnd struct {
	ID                  int64
	Status, Error       string
	EndedAt             time.Time
	TokensIn, TokensOut int
	Data                []byte // JSON; nil for none
}

// RunInfo is a stored run. EndedAt is the zero time while it is running.
type RunInfo struct {
	ID, SessionID, Model, Status, Error string
	OwnerID                             int64
	StartedAt, EndedAt                  time.Time
	InputTokens, OutputTokens, Steps    int
	ReplayOf                            string // the replayed run, "" for a turn (or when it was pruned)
	ReplaySpan                          int    // the replayed span's seq in ReplayOf
}

// SpanInfo is a stored span. ParentID is 0 for a top-level span; EndedAt is the
// zero time while it is open; Data is the stored JSON (nil when none).
type SpanInfo struct {
	ID, ParentID              int64
	Seq                       int
	Kind, Name, Status, Error string
	StartedAt, EndedAt        time.Time
	TokensIn, TokensOut       int
	Data                      json.RawMessage
}

// CurrentTime is the time the store stamps writes with: db.Now, or time.Now
// when it is nil. The trace recorder stamps runs and spans with it too.
func (db *DB) CurrentTime() time.Time { return db.now() }

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insertRun inserts r's row unless it exists, only when the session (if any)
// belongs to the owner. It returns the number of rows inserted.
func insertRun(ctx context.Context, ex execer, r RunStart) (int64, error) {
	res, err := ex.ExecContext(ctx, insertRunSQL,
		r.ID, r.SessionID, r.OwnerID, r.Model, ms(r.StartedAt), r.ReplayOf, r.ReplaySpan)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

const insertRunSQL = `INSERT INTO runs (id, session_id, owner_id, model, status, started_at, replay_of, replay_span)
		SELECT ?1, NULLIF(?2, ''), ?3, ?4, 'running', ?5, NULLIF(?6, ''), ?7
		WHERE (?2 = '' OR EXISTS (SELECT 1 FROM sessions WHERE id = ?2 AND owner_id = ?3))
			AND (?6 = '' OR EXISTS (SELECT 1 FROM runs WHERE id = ?6 AND owner_id = ?3))
		ON CONFLICT (id) DO NOTHING`

// CreateRun inserts run r, status running. An unknown owner, or a session that
// does not exist or is not the owner's, is errs.NotFound; a taken id
// errs.Conflict. Any other error is a failed write, which a later write with
// create set to r can make good.
func (db *DB) CreateRun(ctx context.Context, r RunStart) error {
	n, err := insertRun(ctx, writer{db}, r)
	if isForeignKey(err) {
		return fmt.Errorf("store: create run: %w", errs.Wrap(errs.NotFound, err, "user not found"))
	}
	if err != nil {
		return fmt.Errorf("store: create run: %w", err)
	}
	if n > 0 {
		return nil
	}
	var owner int64
	switch err := db.pool.QueryRowContext(ctx, `SELECT owner_id FROM runs WHERE id = ?`, r.ID).Scan(&owner); {
	case err == nil:
		return fmt.Errorf("store: create run: %w", errs.E(errs.Conflict, "run %s already exists", r.ID))
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("store: create run: %w", errs.E(errs.NotFound, "session or replayed run not found"))
	default:
		return fmt.Errorf("store: create run: %w", err)
	}
}

// runWrite runs op as one statement on the pool or, when create is not nil, in
// one transaction that first inserts create's row unless it exists: the write
// that follows a failed CreateRun creates the run too.
func (db *DB) runWrite(ctx context.Context, create *RunStart, op func(ex execer) error) error {
	if create == nil {
		return op(writer{db})
	}
	return db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := insertRun(ctx, tx, *create); err != nil {
			return err
		}
		return op(tx)
	})
}

// nullMS stores a zero time as NULL.
func nullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ms(t)
}

// InsertSpan inserts span s and returns its id. With create set, the run's row is
// created first in the same transaction (see CreateRun).
func (db *DB) InsertSpan(ctx context.Context, create *RunStart, s SpanRow) (int64, error) {
	var id int64
	err := db.runWrite(ctx, create, func(ex execer) error {
		res, err := ex.ExecContext(ctx, `INSERT INTO spans (run_id, parent_id, seq, kind, name, status, error, started_at, ended_at, tokens_in, tokens_out, data)
			VALUES (?, NULLIF(?, 0), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			s.RunID, s.ParentID, s.Seq, s.Kind, s.Name, s.Status, s.Error, ms(s.StartedAt), nullMS(s.EndedAt), s.TokensIn, s.TokensOut, nullText(s.Data))
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: insert span: %w", err)
	}
	return id, nil
}

// EndSpan writes the end of span e.ID (status, error, end time, tokens, data).
// With create set, the run's row is created first (see CreateRun).
func (db *DB) EndSpan(ctx context.Context, create *RunStart, e SpanEnd) error {
	err := db.runWrite(ctx, create, func(ex execer) error {
		_, err := ex.ExecContext(ctx, `UPDATE spans SET status = ?, error = ?, ended_at = ?, tokens_in = ?, tokens_out = ?, data = ? WHERE id = ?`,
			e.Status, e.Error, ms(e.EndedAt), e.TokensIn, e.TokensOut, nullText(e.Data), e.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: end span: %w", err)
	}
	return nil
}

// EndRun writes the end of run e.ID (status, error, end time, totals); ending
// again overwrites them. A missing run is errs.NotFound. With create set, the
// run's row is created first (see CreateRun).
func (db *DB) EndRun(ctx context.Context, create *RunStart, e RunEnd) error {
	err := db.runWrite(ctx, create, func(ex execer) error {
		res, err := ex.ExecContext(ctx, `UPDATE runs SET status = ?, error = ?, ended_at = ?, input_tokens = ?, output_tokens = ?, steps = ? WHERE id = ?`,
			e.Status, e.Error, ms(e.EndedAt), e.InputTokens, e.OutputTokens, e.Steps, e.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, errs.E(errs.NotFound, "run %s not found", e.ID))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: end run: %w", err)
	}
	return nil
}

// StopRunningRuns marks every run still running as stopped at ended with
// errText, and returns how many it marked.
func (db *DB) StopRunningRuns(ctx context.Context, errText string, ended time.Time) (int64, error) {
	res, err := db.exec(ctx, `UPDATE runs SET status = 'stopped', error = ?, ended_at = ? WHERE status = 'running'`,
		errText, ms(ended))
	if err != nil {
		return 0, fmt.Errorf("store: stop running runs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store: stop running runs: %w", err)
	}
	return n, nil
}

const runCols = `id, COALESCE(session_id, ''), owner_id, model, status, error, started_at, ended_at, input_tokens, output_tokens, steps,
	COALESCE(replay_of, ''), replay_span`

func scanRun(row scanner) (RunInfo, error) {
	var ri RunInfo
	var started int64
	var ended sql.NullInt64
	err := row.Scan(&ri.ID, &ri.SessionID, &ri.OwnerID, &ri.Model, &ri.Status, &ri.Error, &started, &ended,
		&ri.InputTokens, &ri.OutputTokens, &ri.Steps, &ri.ReplayOf, &ri.ReplaySpan)
	ri.StartedAt, ri.EndedAt = fromMS(started), fromNullMS(ended)
	return ri, err
}

func scanSpan(row scanner) (SpanInfo, error) {
	var s SpanInfo
	var started int64
	var ended sql.NullInt64
	var data sql.NullString
	err := row.Scan(&s.ID, &s.ParentID, &s.Seq, &s.Kind, &s.Name, &s.Status, &s.Error,
		&started, &ended, &s.TokensIn, &s.TokensOut, &data)
	s.StartedAt, s.EndedAt = fromMS(started), fromNullMS(ended)
	if data.Valid {
		s.Data = json.RawMessage(data.String)
	}
	return s, err
}

func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}

// ListRuns lists ownerID's runs, newest first, at most limit: all of them, or
// only those of sessionID when it is not "". A session of another user simply
// has no runs here. Bounding limit is the caller's.
func (db *DB) ListRuns(ctx context.Context, ownerID int64, sessionID string, limit int) ([]RunInfo, error) {
	var rows *sql.Rows
	var err error
	if sessionID == "" {
		rows, err = db.pool.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE owner_id = ?
			ORDER BY started_at DESC, rowid DESC LIMIT ?`, ownerID, limit)
	} else {
		rows, err = db.pool.QueryContext(ctx, `SELECT `+runCols+` FROM runs WHERE session_id = ? AND owner_id = ?
			ORDER BY started_at DESC, rowid DESC LIMIT ?`, sessionID, ownerID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	list, err := scanAll(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	return list, nil
}

// RunForOwner returns ownerID's run runID. A missing run and another user's run
// are the same errs.NotFound.
func (db *DB) RunForOwner(ctx context.Context, ownerID int64, runID string) (RunInfo, error) {
	ri, err := scanRun(db.pool.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ? AND owner_id = ?`, runID, ownerID))
	if errors.Is(err, sql.ErrNoRows) {
		return RunInfo{}, fmt.Errorf("store: run: %w", errs.E(errs.NotFound, "run not found"))
	}
	if err != nil {
		return RunInfo{}, fmt.Errorf("store: run: %w", err)
	}
	return ri, nil
}

// RunSpans returns the spans of run runID ordered by seq (none for an unknown
// run). Ownership is the caller's check, via RunForOwner.
func (db *DB) RunSpans(ctx context.Context, runID string) ([]SpanInfo, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT id, COALESCE(parent_id, 0), seq, kind, name, status, error,
		started_at, ended_at, tokens_in, tokens_out, data FROM spans WHERE run_id = ? ORDER BY seq`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: run spans: %w", err)
	}
	spans, err := scanAll(rows, scanSpan)
	if err != nil {
		return nil, fmt.Errorf("store: run spans: %w", err)
	}
	return spans, nil
}

// SpanRef is a span's data with what opens it: its run, owner and seq (the
// associated data of a sealed span) and its row id.
type SpanRef struct {
	ID, OwnerID int64
	RunID       string
	Seq         int
	Data        json.RawMessage
}

// latestSpanQuery finds the session's newest run through runs_session_recent,
// so its cost does not grow with the owner's other chats (migration 0015). Replays
// (0027) are not turns of the chat: they are skipped, the walk goes on to the turn.
const latestSpanQuery = `SELECT s.id, s.run_id, s.seq, s.data FROM spans s
	WHERE s.run_id = coalesce(
		(SELECT r.id FROM runs r WHERE r.owner_id = ?1 AND r.session_id = ?2 AND r.id = (SELECT run_id FROM
			(SELECT run_id, seq FROM messages WHERE session_id = ?2 AND active = 1 ORDER BY seq DESC LIMIT 20)
			WHERE run_id <> '' ORDER BY seq DESC LIMIT 1)),
		(SELECT id FROM runs WHERE owner_id = ?1 AND session_id = ?2 AND replay_span = 0
			ORDER BY started_at DESC LIMIT 1))
	AND s.kind = ?3 ORDER BY s.seq DESC LIMIT 1`

// LatestSpanData returns the newest span of kind in the run that wrote the last reply
// on the branch on screen of ownerID's sessionID (looked for among its last 20
// messages, so that the cost does not grow with the chat), or, when none names a run
// (from before migration 0026), in its newest turn's run (Data nil when there is
// none). A few indexed reads; it never loads a run's other spans.
func (db *DB) LatestSpanData(ctx context.Context, ownerID int64, sessionID, kind string) (SpanRef, error) {
	ref := SpanRef{OwnerID: ownerID}
	var data sql.NullString
	err := db.pool.QueryRowContext(ctx, latestSpanQuery, ownerID, sessionID, kind).Scan(&ref.ID, &ref.RunID, &ref.Seq, &data)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !data.Valid) {
		return ref, nil
	}
	if err != nil {
		return SpanRef{}, fmt.Errorf("store: latest span data: %w", err)
	}
	ref.Data = json.RawMessage(data.String)
	return ref, nil
}

// PlainSpans returns up to limit spans after id after, in id order, whose data
// is not sealed (rows from before every kind was sealed), for
// trace.Recorder.SealStored. The id cursor keeps a whole pass linear.
func (db *DB) PlainSpans(ctx context.Context, after int64, limit int) ([]SpanRef, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT s.id, r.owner_id, s.run_id, s.seq, s.data FROM spans s
		JOIN runs r ON r.id = s.run_id
		WHERE s.id > ? AND s.data IS NOT NULL AND s.data NOT LIKE '{"sealed":%' ORDER BY s.id LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: plain spans: %w", err)
	}
	list, err := scanAll(rows, func(row scanner) (SpanRef, error) {
		var r SpanRef
		var data string
		err := row.Scan(&r.ID, &r.OwnerID, &r.RunID, &r.Seq, &data)
		r.Data = json.RawMessage(data)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: plain spans: %w", err)
	}
	return list, nil
}

// SealSpans replaces the data of spans (by id) with their sealed data, in one
// transaction; a span whose data changed meanwhile (sealed by a write) is left.
func (db *DB) SealSpans(ctx context.Context, spans []SpanRef) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for _, s := range spans {
			if _, err := tx.ExecContext(ctx, `UPDATE spans SET data = ? WHERE id = ? AND data NOT LIKE '{"sealed":%'`,
				string(s.Data), s.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: seal spans: %w", err)
	}
	return nil
}

// ExistingRuns returns which of ids are ownerID's runs that are still stored (retention
// prunes old ones), so a chat links only replies whose run can be opened. One query by
// primary key; ids beyond the first 500 are ignored (a page holds far fewer).
func (db *DB) ExistingRuns(ctx context.Context, ownerID int64, ids []string) (map[string]bool, error) {
	ids = ids[:min(len(ids), 500)]
	found := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return found, nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, ownerID)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := db.pool.QueryContext(ctx, `SELECT id FROM runs WHERE owner_id = ? AND id IN (?`+
		strings.Repeat(", ?", len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: existing runs: %w", err)
	}
	list, err := scanAll(rows, func(row scanner) (string, error) {
		var id string
		return id, row.Scan(&id)
	})
	if err != nil {
		return nil, fmt.Errorf("store: existing runs: %w", err)
	}
	for _, id := range list {
		found[id] = true
	}
	return found, nil
}

// RunSpanOutline returns the spans of run runID ordered by seq without their data:
// what a timeline draws, without reading a run's payloads (most of its bytes).
// Ownership is the caller's check, via RunForOwner.
func (db *DB) RunSpanOutline(ctx context.Context, runID string) ([]SpanInfo, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT id, COALESCE(parent_id, 0), seq, kind, name, status, error,
		started_at, ended_at, tokens_in, tokens_out, NULL FROM spans WHERE run_id = ? ORDER BY seq`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: run span outline: %w", err)
	}
	spans, err := scanAll(rows, scanSpan)
	if err != nil {
		return nil, fmt.Errorf("store: run span outline: %w", err)
	}
	return spans, nil
}

// RunSpan returns span seq of run runID, data included; none is errs.NotFound.
// Ownership is the caller's check, via RunForOwner.
func (db *DB) RunSpan(ctx context.Context, runID string, seq int) (SpanInfo, error) {
	s, err := scanSpan(db.pool.QueryRowContext(ctx, `SELECT id, COALESCE(parent_id, 0), seq, kind, name, status, error,
		started_at, ended_at, tokens_in, tokens_out, data FROM spans WHERE run_id = ? AND seq = ?`, runID, seq))
	if errors.Is(err, sql.ErrNoRows) {
		return SpanInfo{}, fmt.Errorf("store: run span: %w", errs.E(errs.NotFound, "span not found"))
	}
	if err != nil {
		return SpanInfo{}, fmt.Errorf("store: run span: %w", err)
	}
	return s, nil
}
