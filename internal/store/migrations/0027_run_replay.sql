-- 0027: replays. Replaying a model step of a run makes a run of its own (never messages
-- in the chat); these columns say which run and which span (its seq) it replays, so the
-- replay page can put the two side by side. A replay outlives a pruned source: the link
-- is then cleared, not the replay.
ALTER TABLE runs ADD COLUMN replay_of TEXT REFERENCES runs (id) ON DELETE SET NULL;
ALTER TABLE runs ADD COLUMN replay_span INTEGER NOT NULL DEFAULT 0;
