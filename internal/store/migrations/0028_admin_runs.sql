-- 0028: Settings → Runs for admins (issue 11).
--
-- The audit log learns 'reveal-run' (an admin opened another user's run; detail
-- is the run id). SQLite cannot change a CHECK in place, so the table is rebuilt
-- with its rows and index.
CREATE TABLE audit_log_new (
	id         INTEGER PRIMARY KEY,
	at         INTEGER NOT NULL,
	actor_id   INTEGER REFERENCES users (id) ON DELETE SET NULL,
	subject_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	action     TEXT    NOT NULL CHECK (action IN ('reveal', 'delete', 'delete-all', 'reveal-run')),
	detail     TEXT    NOT NULL DEFAULT ''
);
INSERT INTO audit_log_new (id, at, actor_id, subject_id, action, detail)
	SELECT id, at, actor_id, subject_id, action, detail FROM audit_log;
DROP TABLE audit_log;
ALTER TABLE audit_log_new RENAME TO audit_log;
CREATE INDEX audit_log_subject ON audit_log (subject_id, at);
-- Whether this admin revealed these runs: one lookup per listed run.
CREATE INDEX audit_log_run_reveals ON audit_log (actor_id, detail, at) WHERE action = 'reveal-run';

-- A run imported from an export file (for a bug report between installs): it
-- belongs to the admin who imported it and has no session.
ALTER TABLE runs ADD COLUMN imported INTEGER NOT NULL DEFAULT 0 CHECK (imported IN (0, 1));

-- The admin list pages newest first by (started_at, id), alone or with one
-- equality filter; each index keeps that order so a page reads ~50 entries
-- instead of sorting every matching run.
CREATE INDEX runs_started ON runs (started_at, id);
CREATE INDEX runs_owner_started ON runs (owner_id, started_at, id);
CREATE INDEX runs_status_started ON runs (status, started_at, id);
CREATE INDEX runs_model_started ON runs (model, started_at, id);
CREATE INDEX runs_failed_started ON runs (started_at, id) WHERE status = 'error' OR error != '';

-- The tools each run called, in the run's start order, kept by a trigger as
-- tool-call spans are written: "runs that called tool X" then reads its page
-- from this index instead of probing the spans of every run.
-- owner_id (a run never changes owner) serves "this user's runs that called X".
CREATE TABLE run_tools (
	name       TEXT    NOT NULL,
	started_at INTEGER NOT NULL,
	run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	owner_id   INTEGER NOT NULL,
	PRIMARY KEY (name, started_at, run_id)
) WITHOUT ROWID;
CREATE INDEX run_tools_run ON run_tools (run_id);
CREATE INDEX run_tools_owner ON run_tools (name, owner_id, started_at, run_id);
INSERT OR IGNORE INTO run_tools (name, started_at, run_id, owner_id)
	SELECT s.name, r.started_at, r.id, r.owner_id FROM spans s JOIN runs r ON r.id = s.run_id WHERE s.kind = 'tool_call';
CREATE TRIGGER run_tools_add AFTER INSERT ON spans WHEN NEW.kind = 'tool_call' BEGIN
	INSERT OR IGNORE INTO run_tools (name, started_at, run_id, owner_id)
		SELECT NEW.name, r.started_at, r.id, r.owner_id FROM runs r WHERE r.id = NEW.run_id;
END;
