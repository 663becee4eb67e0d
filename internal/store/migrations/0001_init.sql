-- 0001: the first schema. Later features (tools, MCP servers, memories, traces) add
-- their own numbered files; never edit a migration that has shipped.
-- Timestamps are unix milliseconds (INTEGER). JSON lives in TEXT columns.

-- Instance-wide key/value facts (e.g. the master key's verifier).
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value BLOB NOT NULL
) WITHOUT ROWID;

-- Data keys wrapped by the master key. owner_id 0 is the instance; any other value
-- is a user id (no foreign key, so the instance key can live here too).
CREATE TABLE data_keys (
	owner_id   INTEGER PRIMARY KEY,
	wrapped    BLOB    NOT NULL,
	created_at INTEGER NOT NULL
);

CREATE TABLE users (
	id            INTEGER PRIMARY KEY,
	username      TEXT    NOT NULL UNIQUE COLLATE NOCASE,
	password_hash TEXT    NOT NULL,
	role          TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
	disabled      INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL
);

-- Cookie logins. Only a hash of the token is stored.
CREATE TABLE logins (
	token_hash   BLOB    PRIMARY KEY,
	user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	last_seen_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX logins_user ON logins (user_id);
CREATE INDEX logins_expires ON logins (expires_at);

CREATE TABLE settings (
	key        TEXT PRIMARY KEY,
	value      TEXT    NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE providers (
	id             INTEGER PRIMARY KEY,
	name           TEXT    NOT NULL UNIQUE COLLATE NOCASE,
	kind           TEXT    NOT NULL CHECK (kind IN ('openai', 'anthropic')),
	base_url       TEXT    NOT NULL DEFAULT '',
	api_key_sealed BLOB,
	models         TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(models) AND json_type(models) = 'array'),
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
);

CREATE TABLE sessions (
	id          TEXT    PRIMARY KEY,
	owner_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	title       TEXT    NOT NULL DEFAULT '',
	model       TEXT    NOT NULL DEFAULT '',
	state       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(state)),
	summary     TEXT    NOT NULL DEFAULT '',
	summary_seq INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);
CREATE INDEX sessions_owner_recent ON sessions (owner_id, updated_at DESC, id);

CREATE TABLE messages (
	id           INTEGER PRIMARY KEY,
	session_id   TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          INTEGER NOT NULL,
	role         TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
	content      TEXT    NOT NULL DEFAULT '',
	reasoning    TEXT    NOT NULL DEFAULT '',
	tool_calls   TEXT    CHECK (tool_calls IS NULL OR json_valid(tool_calls)),
	tool_call_id TEXT    NOT NULL DEFAULT '',
	status       TEXT    NOT NULL DEFAULT 'complete' CHECK (status IN ('complete', 'stopped', 'error')),
	error        TEXT    NOT NULL DEFAULT '',
	model        TEXT    NOT NULL DEFAULT '',
	tokens       INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	UNIQUE (session_id, seq)
);
