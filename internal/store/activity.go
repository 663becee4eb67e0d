package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Activity rollups (migration 0032): hourly sums of finished runs for
// Settings → Activity. Every rollup of a run goes to the hour its run started.

// Activity metrics.
const (
	MetricTurn       = "turn"
	MetricTool       = "tool"
	MetricLatency    = "latency"
	MetricFirstToken = "first_token"
	MetricMemory     = "memory"
	MetricError      = "error"
)

// ActivityBucketsMS are the upper bounds of the duration histogram; a last
// bucket counts what is above the last bound.
var ActivityBucketsMS = [...]int64{50, 100, 250, 500, 1000, 2000, 5000, 10000, 20000, 40000, 80000}

// ActivityBuckets is the number of histogram buckets.
const ActivityBuckets = len(ActivityBucketsMS) + 1

// ActivityBucket is the bucket a duration of ms milliseconds falls in.
func ActivityBucket(ms int64) int {
	for i, b := range ActivityBucketsMS {
		if ms <= b {
			return i
		}
	}
	return len(ActivityBucketsMS)
}

// ActivityRow is one rollup (or a sum of rollups, with the fields summed over
// left zero).
type ActivityRow struct {
	Hour      time.Time // the UTC hour (or day, in a sum by day)
	OwnerID   int64
	Owner     string // the username, in sums that join users
	Model     string
	Metric    string
	Label     string
	N, OK     int64
	Sum       int64 // ms, for latency and first_token
	TokensIn  int64
	TokensOut int64
	Buckets   [ActivityBuckets]int64
}

// Add adds o's counts to r.
func (r *ActivityRow) Add(o ActivityRow) {
	r.N += o.N
	r.OK += o.OK
	r.Sum += o.Sum
	r.TokensIn += o.TokensIn
	r.TokensOut += o.TokensOut
	for i := range r.Buckets {
		r.Buckets[i] += o.Buckets[i]
	}
}

const bucketCols = "b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11"

func sumBuckets() string {
	var b strings.Builder
	for i := range ActivityBuckets {
		fmt.Fprintf(&b, ", SUM(b%d)", i)
	}
	return b.String()
}

// AddActivity adds one run's rollups in one transaction.
func (db *DB) AddActivity(ctx context.Context, rows []ActivityRow) error {
	if len(rows) == 0 {
		return nil
	}
	var set strings.Builder
	for i := range ActivityBuckets {
		fmt.Fprintf(&set, ", b%d = b%d + excluded.b%d", i, i, i)
	}
	q := `INSERT INTO activity_rollups (hour, owner_id, model, metric, label, n, ok, sum, tokens_in, tokens_out, ` + bucketCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (hour, owner_id, model, metric, label) DO UPDATE SET n = n + excluded.n, ok = ok + excluded.ok,
		sum = sum + excluded.sum, tokens_in = tokens_in + excluded.tokens_in, tokens_out = tokens_out + excluded.tokens_out` + set.String()
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, r := range rows {
			args := []any{hourMS(r.Hour), r.OwnerID, r.Model, r.Metric, r.Label, r.N, r.OK, r.Sum, r.TokensIn, r.TokensOut}
			for _, b := range r.Buckets {
				args = append(args, b)
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: add activity: %w", err)
	}
	return nil
}

func hourMS(t time.Time) int64 { return t.UnixMilli() / 3_600_000 * 3_600_000 }

// bucketCases is the SQL histogram of the duration expression d.
func bucketCases(d string) string {
	var b strings.Builder
	lo := "NULL"
	for i := range ActivityBuckets {
		switch {
		case i == 0:
			fmt.Fprintf(&b, ", SUM(%s <= %d)", d, ActivityBucketsMS[0])
		case i < len(ActivityBucketsMS):
			fmt.Fprintf(&b, ", SUM(%s > %s AND %s <= %d)", d, lo, d, ActivityBucketsMS[i])
		default:
			fmt.Fprintf(&b, ", SUM(%s > %s)", d, lo)
		}
		if i < len(ActivityBucketsMS) {
			lo = fmt.Sprint(ActivityBucketsMS[i])
		}
	}
	return b.String()
}

// BackfillActivity rolls up the finished turns of the last window once, when
// migration 0032 asked for it; it reports whether it ran. What spans cannot
// tell is left out: the time to the first token (never recorded), the kind of
// an error (recorded as text: "unknown") and memory hits in sealed spans.
func (db *DB) BackfillActivity(ctx context.Context, window time.Duration) (bool, error) {
	if _, err := db.Meta(ctx, "activity_backfill"); err != nil {
		if errs.Is(err, errs.NotFound) {
			return false, nil
		}
		return false, err
	}
	since := db.now().Add(-window).UnixMilli()
	hour := "r.started_at / 3600000 * 3600000"
	zero := strings.Repeat(", 0", ActivityBuckets)
	insert := `INSERT INTO activity_rollups (hour, owner_id, model, metric, label, n, ok, sum, tokens_in, tokens_out, ` + bucketCols + `) `
	// The users' own turns, as the live sink sees them: no replay (replay_span is
	// kept when its source goes) and no imported run.
	finished := ` r.started_at >= ? AND r.status != 'running' AND r.replay_span = 0 AND r.imported = 0 `
	dur := "(s.ended_at - s.started_at)"
	queries := []string{
		insert + `SELECT ` + hour + `, r.owner_id, r.model, 'turn', '', COUNT(*), SUM(r.status = 'complete'), 0,
			SUM(r.input_tokens), SUM(r.output_tokens)` + zero + `
			FROM runs r WHERE` + finished + `GROUP BY 1, 2, 3`,
		insert + `SELECT ` + hour + `, r.owner_id, r.model, 'tool', s.name, COUNT(*), SUM(s.status = 'ok'), 0, 0, 0` + zero + `
			FROM runs r JOIN spans s ON s.run_id = r.id WHERE` + finished + `AND s.kind = 'tool_call' GROUP BY 1, 2, 3, 5`,
		insert + `SELECT ` + hour + `, r.owner_id, s.name, 'latency', '', COUNT(*), SUM(s.status = 'ok'), SUM(` + dur + `), 0, 0` + bucketCases(dur) + `
			FROM runs r JOIN spans s ON s.run_id = r.id WHERE` + finished + `AND s.kind = 'model_response' AND s.ended_at IS NOT NULL
			GROUP BY 1, 2, 3`,
		insert + `SELECT ` + hour + `, r.owner_id, r.model, 'memory', '', COUNT(*), SUM(json_array_length(s.data, '$.hits') > 0), 0, 0, 0` + zero + `
			FROM runs r JOIN spans s ON s.run_id = r.id WHERE` + finished + `AND s.kind = 'memory' AND s.name = 'recall'
			AND s.error = '' AND json_type(s.data, '$.hits') = 'array' GROUP BY 1, 2, 3`,
		insert + `SELECT ` + hour + `, r.owner_id, r.model, 'error', 'unknown', COUNT(*), 0, 0, 0, 0` + zero + `
			FROM runs r JOIN spans s ON s.run_id = r.id WHERE` + finished + `AND s.kind = 'error' GROUP BY 1, 2, 3`,
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		// The rollups the live sink wrote since the migration are replaced by the
		// backfill of the same runs.
		if _, err := tx.ExecContext(ctx, `DELETE FROM activity_rollups`); err != nil {
			return err
		}
		for _, q := range queries {
			if _, err := tx.ExecContext(ctx, q, since); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key = 'activity_backfill'`)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: backfill activity: %w", err)
	}
	return true, nil
}

// ActivityByLabel sums the rollups since since by metric, model and label.
func (db *DB) ActivityByLabel(ctx context.Context, since time.Time) ([]ActivityRow, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT metric, model, label, SUM(n), SUM(ok), SUM(sum), SUM(tokens_in), SUM(tokens_out)`+sumBuckets()+`
		FROM activity_rollups WHERE hour >= ? GROUP BY metric, model, label ORDER BY metric, model, label`, hourMS(since))
	if err != nil {
		return nil, fmt.Errorf("store: activity: %w", err)
	}
	defer rows.Close()
	var out []ActivityRow
	for rows.Next() {
		var r ActivityRow
		dest := []any{&r.Metric, &r.Model, &r.Label, &r.N, &r.OK, &r.Sum, &r.TokensIn, &r.TokensOut}
		for i := range r.Buckets {
			dest = append(dest, &r.Buckets[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("store: activity: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ActivityByDay sums the turn and memory rollups since since by UTC day, user
// and model (Hour is the day).
func (db *DB) ActivityByDay(ctx context.Context, since time.Time) ([]ActivityRow, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT a.hour / 86400000 * 86400000 AS day, a.metric, a.owner_id, COALESCE(u.username, ''), a.model,
		SUM(a.n), SUM(a.ok), SUM(a.tokens_in), SUM(a.tokens_out)
		FROM activity_rollups a LEFT JOIN users u ON u.id = a.owner_id
		WHERE a.hour >= ? AND a.metric IN ('turn', 'memory')
		GROUP BY day, a.metric, a.owner_id, a.model ORDER BY day, a.metric, u.username, a.model`, hourMS(since))
	if err != nil {
		return nil, fmt.Errorf("store: activity by day: %w", err)
	}
	defer rows.Close()
	var out []ActivityRow
	for rows.Next() {
		var r ActivityRow
		var day int64
		if err := rows.Scan(&day, &r.Metric, &r.OwnerID, &r.Owner, &r.Model, &r.N, &r.OK, &r.TokensIn, &r.TokensOut); err != nil {
			return nil, fmt.Errorf("store: activity by day: %w", err)
		}
		r.Hour = time.UnixMilli(day).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// ActivityRollups returns every rollup of owner, for tests and checks.
func (db *DB) ActivityRollups(ctx context.Context, ownerID int64) ([]ActivityRow, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT hour, owner_id, model, metric, label, n, ok, sum, tokens_in, tokens_out, `+bucketCols+`
		FROM activity_rollups WHERE owner_id = ? ORDER BY hour, model, metric, label`, ownerID)
	if err != nil {
		return nil, fmt.Errorf("store: activity rollups: %w", err)
	}
	defer rows.Close()
	var out []ActivityRow
	for rows.Next() {
		var r ActivityRow
		var hour int64
		dest := []any{&hour, &r.OwnerID, &r.Model, &r.Metric, &r.Label, &r.N, &r.OK, &r.Sum, &r.TokensIn, &r.TokensOut}
		for i := range r.Buckets {
			dest = append(dest, &r.Buckets[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("store: activity rollups: %w", err)
		}
		r.Hour = time.UnixMilli(hour).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}
