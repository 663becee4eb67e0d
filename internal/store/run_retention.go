package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// SetRunPinned pins or unpins ownerID's run runID: a pinned run is never pruned.
// A missing run and another user's run are the same errs.NotFound.
func (db *DB) SetRunPinned(ctx context.Context, ownerID int64, runID string, pinned bool) error {
	res, err := db.exec(ctx, `UPDATE runs SET pinned = ? WHERE id = ? AND owner_id = ?`, pinned, runID, ownerID)
	if err != nil {
		return fmt.Errorf("store: pin run: %w", err)
	}
	if err := mustAffect(res, "run not found"); err != nil {
		return fmt.Errorf("store: pin run: %w", err)
	}
	return nil
}

// RunPinned reports whether ownerID's run runID is pinned (errs.NotFound as for SetRunPinned).
func (db *DB) RunPinned(ctx context.Context, ownerID int64, runID string) (bool, error) {
	var pinned bool
	err := db.pool.QueryRowContext(ctx, `SELECT pinned FROM runs WHERE id = ? AND owner_id = ?`, runID, ownerID).Scan(&pinned)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("store: run pinned: %w", errs.E(errs.NotFound, "run not found"))
	}
	if err != nil {
		return false, fmt.Errorf("store: run pinned: %w", err)
	}
	return pinned, nil
}

// Retention bounds the trace: runs that started before Before, and then the
// oldest runs while the trace is over MaxBytes, are deleted. A zero Before or
// MaxBytes is no bound. Pinned and running runs are always kept.
type Retention struct {
	Before   time.Time
	MaxBytes int64
}

// spanRowOverhead is what a span costs beyond its data (metadata columns, the
// row and index entries), measured roughly on a real trace; the size bound is
// an estimate from the rows, since the file's size lags behind deletes.
const spanRowOverhead = 120

// pruneBatch is the most runs one delete transaction removes, so that turns
// waiting for the writer wait for a short transaction only.
const pruneBatch = 200

// TraceBytes is the estimated size of the stored trace: span data plus a fixed
// overhead per span.
func (db *DB) TraceBytes(ctx context.Context) (int64, error) {
	var n int64
	err := db.pool.QueryRowContext(ctx, `SELECT COALESCE(SUM(length(CAST(data AS BLOB))), 0) + COUNT(*) * ? FROM spans`,
		spanRowOverhead).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: trace bytes: %w", err)
	}
	return n, nil
}

// PruneRuns deletes the runs r says are over the bounds, in batches, and returns
// how many it deleted. When it deleted any, the freed pages are given back to the
// file system and the WAL is checkpointed, so the file shrinks and no deleted
// span lingers in the -wal file.
func (db *DB) PruneRuns(ctx context.Context, r Retention) (int64, error) {
	var total int64
	if !r.Before.IsZero() {
		for {
			res, err := db.exec(ctx, `DELETE FROM runs WHERE rowid IN (SELECT rowid FROM runs
				WHERE pinned = 0 AND status != 'running' AND started_at < ? ORDER BY started_at LIMIT ?)`,
				ms(r.Before), pruneBatch)
			if err != nil {
				return total, fmt.Errorf("store: prune old runs: %w", err)
			}
			n, _ := res.RowsAffected()
			total += n
			if n < pruneBatch {
				break
			}
		}
	}
	if r.MaxBytes > 0 {
		n, err := db.pruneToSize(ctx, r.MaxBytes)
		total += n
		if err != nil {
			return total, err
		}
	}
	if total > 0 {
		if err := db.reclaim(ctx); err != nil {
			return total, err
		}
	}
	return total, nil
}

// pruneToSize deletes the oldest unpinned, finished runs until the trace is at
// most maxBytes.
func (db *DB) pruneToSize(ctx context.Context, maxBytes int64) (int64, error) {
	size, err := db.TraceBytes(ctx)
	if err != nil || size <= maxBytes {
		return 0, err
	}
	rows, err := db.pool.QueryContext(ctx, `SELECT r.id, (SELECT COALESCE(SUM(length(CAST(s.data AS BLOB))), 0) + COUNT(*) * ?
		FROM spans s WHERE s.run_id = r.id) FROM runs r INDEXED BY runs_prunable
		WHERE r.pinned = 0 AND r.status != 'running' ORDER BY r.started_at`, spanRowOverhead)
	if err != nil {
		return 0, fmt.Errorf("store: prune runs by size: %w", err)
	}
	var ids []string
	for excess := size - maxBytes; excess > 0 && rows.Next(); {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return 0, fmt.Errorf("store: prune runs by size: %w", err)
		}
		ids, excess = append(ids, id), excess-n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("store: prune runs by size: %w", err)
	}
	var total int64
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pruneBatch)]
		ids = ids[len(batch):]
		res, err := db.exec(ctx, `DELETE FROM runs WHERE pinned = 0 AND id IN (SELECT value FROM json_each(?))`, idList(batch))
		if err != nil {
			return total, fmt.Errorf("store: prune runs by size: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// reclaim gives the free pages back to the file system and checkpoints. A
// database made before 0023 has no auto_vacuum: the first prune switches it to
// incremental with one VACUUM (the whole file rewritten once); after that each
// prune frees its pages with incremental_vacuum.
func (db *DB) reclaim(ctx context.Context) error {
	var mode int
	if err := db.w.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return fmt.Errorf("store: reclaim: %w", err)
	}
	var err error
	if mode != 2 {
		if _, err = db.w.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err == nil {
			_, err = db.w.ExecContext(ctx, `VACUUM`)
		}
	} else {
		_, err = db.w.ExecContext(ctx, `PRAGMA incremental_vacuum`)
	}
	if err != nil {
		return fmt.Errorf("store: reclaim: %w", storageErr(err))
	}
	return db.Checkpoint(ctx)
}

// idList is ids as a JSON array, for json_each.
func idList(ids []string) string {
	b, _ := json.Marshal(ids) // strings always marshal
	return string(b)
}
