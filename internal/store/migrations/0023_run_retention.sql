-- 0023: trace retention. A pinned run is kept whatever its age or the size of the
-- trace; the others are pruned oldest first (store.PruneRuns), through this index.
ALTER TABLE runs ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1));
CREATE INDEX runs_prunable ON runs (started_at) WHERE pinned = 0;
