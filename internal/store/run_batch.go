package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"atrium/internal/errs"
)

// RunWrite is one write of a run's recording for WriteRuns: Span puts a span
// (a new one, or the end of one already written with the same run and seq), End
// ends the run. Exactly one of them is set. Run is the run's row, created first
// unless it exists.
type RunWrite struct {
	Run  RunStart
	New  bool // the run's row must not exist yet: a taken id is errs.Conflict
	Span *SpanRow
	End  *RunEnd
}

// putSpan inserts a span whole or, when its run and seq are taken (its start was
// written), writes its end over the start: a span whose start could not be
// written is written whole when it ends.
const putSpan = `INSERT INTO spans (run_id, parent_id, seq, kind, name, status, error, started_at, ended_at, tokens_in, tokens_out, data)
	VALUES (?, NULLIF(?, 0), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (run_id, seq) DO UPDATE SET status = excluded.status, error = excluded.error, ended_at = excluded.ended_at,
		tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out, data = excluded.data`

const endRun = `UPDATE runs SET status = ?, error = ?, ended_at = ?, input_tokens = ?, output_tokens = ?, steps = ? WHERE id = ?`

// WriteRuns applies ws in order in one IMMEDIATE transaction on the writer: the
// trace recorder's background queue writes the spans of many events with one
// commit. Each run's row is created first unless it exists, as CreateRun does
// (only when its session, if any, is its owner's). The result holds one error per
// write: the writes of a run that could not be created (unknown owner, a session
// that is gone or not the owner's: errs.NotFound; an id taken by another owner's
// run: errs.Conflict) fail with that error and the others are applied, as is a
// write that breaks a constraint of its own. A failure of the transaction itself
// (busy past ctx, a full disk) is the returned error, and nothing was written.
func (db *DB) WriteRuns(ctx context.Context, ws []RunWrite) ([]error, error) {
	// Prepared on the writer before the transaction takes its one connection.
	for _, q := range []string{insertRunSQL, putSpan, endRun} {
		if _, err := db.writeStmt(ctx, q); err != nil {
			return nil, fmt.Errorf("store: write runs: %w", storageErr(err))
		}
	}
	var results []error
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		results = make([]error, len(ws)) // fn may run again after SQLITE_BUSY
		runs := map[string]error{}       // runs created (or refused) in this transaction
		for i, w := range ws {
			rerr, seen := runs[w.Run.ID]
			if !seen {
				rerr = db.ensureRun(ctx, tx, w.Run, w.New)
				if rerr != nil && !refusal(rerr) {
					return rerr
				}
				runs[w.Run.ID] = rerr
			}
			if rerr != nil {
				results[i] = rerr
				continue
			}
			var err error
			switch {
			case w.Span != nil:
				s := w.Span
				err = db.txExec(ctx, tx, putSpan, s.RunID, s.ParentID, s.Seq, s.Kind, s.Name, s.Status, s.Error,
					ms(s.StartedAt), nullMS(s.EndedAt), s.TokensIn, s.TokensOut, nullText(s.Data))
			case w.End != nil:
				e := w.End
				err = db.txExec(ctx, tx, endRun, e.Status, e.Error, ms(e.EndedAt), e.InputTokens, e.OutputTokens, e.Steps, e.ID)
			default:
				err = errs.E(errs.Invalid, "a run write with neither a span nor an end")
			}
			if err != nil && !isConstraint(err) && errs.Code(err) != errs.Invalid {
				return err
			}
			results[i] = err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: write runs: %w", err)
	}
	return results, nil
}

// ensureRun creates r's row in tx unless it exists; a row it may not create is
// errs.NotFound (owner or session) or errs.Conflict (the id is another owner's,
// or taken at all when isNew).
func (db *DB) ensureRun(ctx context.Context, tx *sql.Tx, r RunStart, isNew bool) error {
	n, err := insertRun(ctx, txWriter{db, tx}, r)
	if isForeignKey(err) {
		return errs.Wrap(errs.NotFound, err, "user not found")
	}
	if err != nil || n > 0 {
		return err
	}
	var owner int64
	switch err := tx.QueryRowContext(ctx, `SELECT owner_id FROM runs WHERE id = ?`, r.ID).Scan(&owner); {
	case errors.Is(err, sql.ErrNoRows):
		return errs.E(errs.NotFound, "session or replayed run not found")
	case err != nil:
		return err
	case owner != r.OwnerID || isNew:
		return errs.E(errs.Conflict, "run %s already exists", r.ID)
	}
	return nil
}

func refusal(err error) bool { c := errs.Code(err); return c == errs.NotFound || c == errs.Conflict }

func isConstraint(err error) bool { return sqliteCode(err)&0xff == sqlite3.SQLITE_CONSTRAINT }

// txExec runs the writer's prepared statement for query inside tx.
func (db *DB) txExec(ctx context.Context, tx *sql.Tx, query string, args ...any) error {
	_, err := txWriter{db, tx}.ExecContext(ctx, query, args...)
	return err
}

// txWriter is an execer on tx that reuses the writer's statements prepared
// before the transaction began (preparing one now would wait for the writer's
// one connection, which tx holds).
type txWriter struct {
	db *DB
	tx *sql.Tx
}

func (w txWriter) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st, ok := w.db.wstmts.Load(query); ok {
		return w.tx.StmtContext(ctx, st.(*sql.Stmt)).ExecContext(ctx, args...)
	}
	return w.tx.ExecContext(ctx, query, args...)
}
