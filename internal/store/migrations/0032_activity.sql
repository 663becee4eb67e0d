-- 0032: Settings → Activity (issue 11). Hourly rollups of finished runs, so the
-- page reads a few thousand rows instead of every run and span.
--
-- One row per (hour, owner, model, metric, label); hour is unix ms at the start
-- of the UTC hour the run started in. Metrics:
--   turn         n runs, ok completed, tokens_in/out the run's totals (label '')
--   tool         n calls of tool label, ok those that succeeded
--   latency      n model calls, sum their duration in ms, b0…b11 the histogram
--   first_token  the same for the time to the first delta
--   memory       n turns with a memory lookup, ok those with ≥ 1 memory injected
--   error        n run errors of kind label (an errs code)
-- b0…b11 count durations ≤ 50, 100, 250, 500, 1000, 2000, 5000, 10000, 20000,
-- 40000, 80000 ms and above (store.ActivityBucketsMS), each bucket on its own,
-- so p50/p95 are read from sums of rollups.
CREATE TABLE activity_rollups (
	hour       INTEGER NOT NULL,
	owner_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	model      TEXT    NOT NULL,
	metric     TEXT    NOT NULL CHECK (metric IN ('turn', 'tool', 'latency', 'first_token', 'memory', 'error')),
	label      TEXT    NOT NULL,
	n          INTEGER NOT NULL DEFAULT 0,
	ok         INTEGER NOT NULL DEFAULT 0,
	sum        INTEGER NOT NULL DEFAULT 0,
	tokens_in  INTEGER NOT NULL DEFAULT 0,
	tokens_out INTEGER NOT NULL DEFAULT 0,
	b0 INTEGER NOT NULL DEFAULT 0, b1 INTEGER NOT NULL DEFAULT 0, b2 INTEGER NOT NULL DEFAULT 0,
	b3 INTEGER NOT NULL DEFAULT 0, b4 INTEGER NOT NULL DEFAULT 0, b5 INTEGER NOT NULL DEFAULT 0,
	b6 INTEGER NOT NULL DEFAULT 0, b7 INTEGER NOT NULL DEFAULT 0, b8 INTEGER NOT NULL DEFAULT 0,
	b9 INTEGER NOT NULL DEFAULT 0, b10 INTEGER NOT NULL DEFAULT 0, b11 INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (hour, owner_id, model, metric, label)
) WITHOUT ROWID;
-- A deleted user's rollups go with them (the cascade looks rows up by owner).
CREATE INDEX activity_rollups_owner ON activity_rollups (owner_id);

-- Runs recorded before this version are rolled up once at the next start
-- (store.BackfillActivity, the last 30 days), so an upgraded instance shows history.
INSERT OR REPLACE INTO meta (key, value) VALUES ('activity_backfill', X'');
