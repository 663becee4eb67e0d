-- 0002: the call chain. One run per agent turn, its spans in order (seq).
-- Timestamps are unix milliseconds; data is redacted JSON written by internal/trace.
-- session_id is NULL for runs outside a chat session.

CREATE TABLE runs (
	id            TEXT    PRIMARY KEY,
	session_id    TEXT    REFERENCES sessions (id) ON DELETE CASCADE,
	owner_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	model         TEXT    NOT NULL DEFAULT '',
	status        TEXT    NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'complete', 'stopped', 'error')),
	error         TEXT    NOT NULL DEFAULT '',
	started_at    INTEGER NOT NULL,
	ended_at      INTEGER,
	input_tokens  INTEGER NOT NULL DEFAULT 0,
	output_tokens INTEGER NOT NULL DEFAULT 0,
	steps         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_owner_recent ON runs (owner_id, started_at DESC);
CREATE INDEX runs_session ON runs (session_id, started_at);

CREATE TABLE spans (
	id         INTEGER PRIMARY KEY,
	run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	parent_id  INTEGER,
	seq        INTEGER NOT NULL,
	kind       TEXT    NOT NULL CHECK (kind IN ('context', 'tool_selection', 'model_request', 'model_response',
	                                            'tool_call', 'tool_result', 'summary', 'final', 'memory', 'error')),
	name       TEXT    NOT NULL DEFAULT '',
	status     TEXT    NOT NULL DEFAULT '',
	error      TEXT    NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL,
	ended_at   INTEGER,
	tokens_in  INTEGER NOT NULL DEFAULT 0,
	tokens_out INTEGER NOT NULL DEFAULT 0,
	data       TEXT    CHECK (data IS NULL OR json_valid(data)),
	UNIQUE (run_id, seq)
);
