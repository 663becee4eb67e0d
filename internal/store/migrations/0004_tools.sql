-- 0004: vectors of tool descriptions, for offering the most relevant tools when
-- more are enabled than a turn should carry (internal/tools/select.go).

-- One row per tool ever embedded. id is the rowid of its vector in tool_vectors;
-- hash covers the embedder, the name and the description, so re-registering an
-- unchanged tool (every start) does not embed it again.
CREATE TABLE tool_embeddings (
	id         INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL UNIQUE,
	hash       TEXT    NOT NULL,
	updated_at INTEGER NOT NULL
);

CREATE VIRTUAL TABLE tool_vectors USING vec0(embedding float[256]);
