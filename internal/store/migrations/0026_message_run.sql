-- 0026: the run that wrote a message, for the chat's "How was this answered?" link
-- (issue 11). No foreign key: the run's row is written by the trace recorder, which
-- may lag or fail, and a message must never be refused for it; a run pruned by
-- retention leaves the id behind, and the chat asks runs which ids still exist.
ALTER TABLE messages ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
