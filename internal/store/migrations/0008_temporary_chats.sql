-- A temporary chat neither reads nor writes long-term memory.
ALTER TABLE sessions ADD COLUMN temporary INTEGER NOT NULL DEFAULT 0 CHECK (temporary IN (0, 1));
