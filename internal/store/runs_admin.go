package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Settings → Runs: every user's runs for admins (metadata only), the reveal
// check that guards their content, and imported runs (migration 0028).

// RunFilter narrows AllRuns. Zero fields do not filter.
type RunFilter struct {
	OwnerID     int64
	SessionID   string
	From, To    time.Time // started at or after From, before To
	Status      string
	Model       string
	Tool        string // the run called this tool (a tool_call span of this name)
	FailedOnly  bool   // status error, or an error text
	MinDuration time.Duration
}

// RunCursor is where a page of AllRuns ends: the next page starts after it.
type RunCursor struct {
	StartedAt int64 // unix ms
	ID        string
}

// String is the cursor as a URL parameter.
func (c RunCursor) String() string { return strconv.FormatInt(c.StartedAt, 10) + "." + c.ID }

// ParseRunCursor reads RunCursor.String; anything else is errs.Invalid.
func ParseRunCursor(s string) (RunCursor, error) {
	at, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" || len(id) > 200 {
		return RunCursor{}, errs.E(errs.Invalid, "bad page cursor")
	}
	return RunCursor{StartedAt: n, ID: id}, nil
}

// AdminRun is one row of the admin list: the run's metadata, its owner's name
// and, for the caller to show or not, its chat's title.
type AdminRun struct {
	RunInfo
	Owner     string
	ChatTitle string // "" without a session
	Imported  bool
	Pinned    bool
}

// AllRuns lists the runs of every user that match f, newest first (by start,
// then id), at most limit, after the cursor when it is not nil. next is the
// cursor of the following page, nil on the last one. Each filter alone reads
// about one index entry per listed run (migration 0028); several together
// read the most selective index and test the rest.
func (db *DB) AllRuns(ctx context.Context, f RunFilter, after *RunCursor, limit int) (list []AdminRun, next *RunCursor, err error) {
	var where []string
	var args []any
	from := `runs r`
	order := `r.started_at DESC, r.id DESC`
	key := `(r.started_at, r.id)`
	if f.Tool != "" {
		// run_tools holds the run's start, in the same order as the runs indexes.
		from = `run_tools t JOIN runs r ON r.id = t.run_id`
		where, args = append(where, `t.name = ?`), append(args, f.Tool)
		order, key = `t.started_at DESC, t.run_id DESC`, `(t.started_at, t.run_id)`
	}
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }
	switch {
	case f.OwnerID != 0 && f.Tool != "":
		add(`t.owner_id = ?`, f.OwnerID) // run_tools_owner: the user's calls of the tool, in order
	case f.OwnerID != 0:
		add(`r.owner_id = ?`, f.OwnerID)
	}
	if f.SessionID != "" {
		add(`r.session_id = ?`, f.SessionID)
	}
	if !f.From.IsZero() {
		add(`r.started_at >= ?`, ms(f.From))
	}
	if !f.To.IsZero() {
		add(`r.started_at < ?`, ms(f.To))
	}
	if f.Status != "" {
		add(`r.status = ?`, f.Status)
	}
	if f.Model != "" {
		add(`r.model = ?`, f.Model)
	}
	if f.FailedOnly {
		add(`(r.status = 'error' OR r.error != '')`) // as in runs_failed_started
	}
	if f.MinDuration > 0 {
		add(`r.ended_at - r.started_at >= ?`, f.MinDuration.Milliseconds())
	}
	if after != nil {
		add(key+` < (?, ?)`, after.StartedAt, after.ID)
	}
	q := `SELECT r.id, COALESCE(r.session_id, ''), r.owner_id, r.model, r.status, r.error, r.started_at, r.ended_at,
		r.input_tokens, r.output_tokens, r.steps, u.username, COALESCE(s.title, ''), r.imported, r.pinned
		FROM ` + from + ` JOIN users u ON u.id = r.owner_id LEFT JOIN sessions s ON s.id = r.session_id`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY ` + order + ` LIMIT ?`
	rows, err := db.pool.QueryContext(ctx, q, append(args, limit+1)...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: all runs: %w", err)
	}
	list, err = scanAll(rows, func(row scanner) (AdminRun, error) {
		var a AdminRun
		var started int64
		var ended sql.NullInt64
		err := row.Scan(&a.ID, &a.SessionID, &a.OwnerID, &a.Model, &a.Status, &a.Error, &started, &ended,
			&a.InputTokens, &a.OutputTokens, &a.Steps, &a.Owner, &a.ChatTitle, &a.Imported, &a.Pinned)
		a.StartedAt, a.EndedAt = fromMS(started), fromNullMS(ended)
		return a, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: all runs: %w", err)
	}
	if len(list) > limit {
		list = list[:limit]
		last := list[limit-1]
		next = &RunCursor{StartedAt: ms(last.StartedAt), ID: last.ID}
	}
	return list, next, nil
}

// RunByID returns run runID whoever owns it, for an admin who must then pass
// RunRevealed before seeing its content. A missing run is errs.NotFound.
func (db *DB) RunByID(ctx context.Context, runID string) (RunInfo, error) {
	ri, err := scanRun(db.pool.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return RunInfo{}, fmt.Errorf("store: run: %w", errs.E(errs.NotFound, "run not found"))
	}
	if err != nil {
		return RunInfo{}, fmt.Errorf("store: run: %w", err)
	}
	return ri, nil
}

// RunRevealed reports whether actor revealed run runID (an AuditRevealRun entry)
// at or after since.
func (db *DB) RunRevealed(ctx context.Context, actor int64, runID string, since time.Time) (bool, error) {
	var one int
	err := db.pool.QueryRowContext(ctx, `SELECT 1 FROM audit_log
		WHERE actor_id = ? AND detail = ? AND at >= ? AND action = 'reveal-run' LIMIT 1`, actor, runID, ms(since)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: run revealed: %w", err)
	}
	return true, nil
}

// RevealedRuns returns which of runIDs actor revealed at or after since.
func (db *DB) RevealedRuns(ctx context.Context, actor int64, runIDs []string, since time.Time) (map[string]bool, error) {
	out := map[string]bool{}
	for _, id := range runIDs { // one indexed probe each: a page is ~50 runs
		ok, err := db.RunRevealed(ctx, actor, id, since)
		if err != nil {
			return nil, err
		}
		if ok {
			out[id] = true
		}
	}
	return out, nil
}

// ImportedSpan is a span of an imported run. ParentSeq is the seq of its parent
// (0 for a top-level span), which must come earlier in the run.
type ImportedSpan struct {
	SpanRow
	ParentSeq int
}

// ImportedRun is a whole run written at once: an import, with Imported set,
// or a batch of synthetic runs for a benchmark.
type ImportedRun struct {
	RunInfo  // SessionID, OwnerID and timings as they are to be stored
	Imported bool
	Spans    []ImportedSpan // in seq order
}

// InsertRuns writes whole runs, their spans included, in one transaction: all
// of them or none. A taken run id is errs.Conflict, an unknown owner or session
// errs.NotFound, a span whose parent does not precede it errs.Invalid.
func (db *DB) InsertRuns(ctx context.Context, runs []ImportedRun) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for _, r := range runs {
			_, err := tx.ExecContext(ctx, `INSERT INTO runs (id, session_id, owner_id, model, status, error, started_at, ended_at,
				input_tokens, output_tokens, steps, imported) VALUES (?, NULLIF(?, ''), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				r.ID, r.SessionID, r.OwnerID, r.Model, r.Status, r.Error, ms(r.StartedAt), nullMS(r.EndedAt),
				r.InputTokens, r.OutputTokens, r.Steps, r.Imported)
			switch {
			case isUnique(err):
				return errs.Wrap(errs.Conflict, err, "run %s already exists", r.ID)
			case isForeignKey(err):
				return errs.Wrap(errs.NotFound, err, "user or session not found")
			case err != nil:
				return err
			}
			ids := make(map[int]int64, len(r.Spans))
			for _, s := range r.Spans {
				parent := int64(0)
				if s.ParentSeq != 0 {
					var ok bool
					if parent, ok = ids[s.ParentSeq]; !ok {
						return errs.E(errs.Invalid, "span %d: parent %d does not precede it", s.Seq, s.ParentSeq)
					}
				}
				res, err := tx.ExecContext(ctx, `INSERT INTO spans (run_id, parent_id, seq, kind, name, status, error, started_at, ended_at, tokens_in, tokens_out, data)
					VALUES (?, NULLIF(?, 0), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
					r.ID, parent, s.Seq, s.Kind, s.Name, s.Status, s.Error, ms(s.StartedAt), nullMS(s.EndedAt), s.TokensIn, s.TokensOut, nullText(s.Data))
				if isUnique(err) || isCheck(err) {
					return errs.Wrap(errs.Invalid, err, "span %d cannot be stored", s.Seq)
				}
				if err != nil {
					return err
				}
				if ids[s.Seq], err = res.LastInsertId(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: insert runs: %w", err)
	}
	return nil
}

// RunImported reports whether run runID was imported (errs.NotFound when missing).
func (db *DB) RunImported(ctx context.Context, runID string) (bool, error) {
	var imported bool
	err := db.pool.QueryRowContext(ctx, `SELECT imported FROM runs WHERE id = ?`, runID).Scan(&imported)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("store: run imported: %w", errs.E(errs.NotFound, "run not found"))
	}
	if err != nil {
		return false, fmt.Errorf("store: run imported: %w", err)
	}
	return imported, nil
}
