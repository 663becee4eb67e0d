-- 0007: long-term memories (internal/memory). Nothing here is a plaintext
-- derivative of a memory: the text is sealed (AD binds id and owner), the
-- lexical index holds HMAC tags, and the vectors are stored after a keyed
-- orthogonal transform. See internal/memory/doc.go for what still leaks.

-- seq is the rowid of the memory's vectors in memory_vectors (vec0 rows are keyed
-- by integer); id is the random public id. term_count is the document length for
-- BM25. source_session/source_seq point at the chat message a memory came from
-- and are not foreign keys: deleting a chat must not delete what it taught.
CREATE TABLE memories (
	seq            INTEGER PRIMARY KEY,
	id             TEXT    NOT NULL UNIQUE,
	owner_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	kind           TEXT    NOT NULL CHECK (kind <> ''),
	sealed         BLOB    NOT NULL,
	term_count     INTEGER NOT NULL DEFAULT 0,
	source_kind    TEXT    NOT NULL CHECK (source_kind IN ('chat', 'tool', 'manual', 'import')),
	source_session TEXT,
	source_seq     INTEGER,
	confidence     REAL    NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL,
	last_used_at   INTEGER,
	use_count      INTEGER NOT NULL DEFAULT 0,
	expires_at     INTEGER
);

CREATE INDEX memories_owner ON memories (owner_id, created_at);
CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL;

-- The blind lexical index: term is HMAC-SHA256(index key, normalised term)
-- truncated to 16 bytes; tf is the term's count in the memory. Rows name the
-- memory by seq, not by its 30-character id: every row exists twice (table and
-- owner index), and the id made up a third of the index's size.
CREATE TABLE memory_terms (
	memory_seq INTEGER NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,
	owner_id   INTEGER NOT NULL,
	term       BLOB    NOT NULL,
	tf         INTEGER NOT NULL CHECK (tf > 0),
	PRIMARY KEY (memory_seq, term)
) WITHOUT ROWID;

CREATE INDEX memory_terms_owner_term ON memory_terms (owner_id, term);

-- Vectors, 512 = the offline embedder's 384 dimensions zero-padded to a power of
-- two for the Hadamard transform. memory_vectors holds the sign bits of each
-- transformed vector, the cheap KNN prefilter; owner_id is a metadata column,
-- not a partition key, because a partition pre-allocates a 1,024-vector chunk per
-- user. The vectors for rescoring live in a plain table, as float16: a rowid
-- lookup into a vec0 float column walks its chunk's overflow pages (~0.25 ms per
-- candidate in BenchmarkMemoryRecall), and a float32 row (2,048 bytes) fills a
-- 4 KiB page alone while three float16 rows share one.
CREATE VIRTUAL TABLE memory_vectors USING vec0(
	owner_id INTEGER,
	bits     bit[512]
);

CREATE TABLE memory_embeddings (
	seq       INTEGER PRIMARY KEY REFERENCES memories (seq) ON DELETE CASCADE,
	embedding BLOB    NOT NULL CHECK (length(embedding) = 1024)
);

-- A virtual table takes no part in foreign keys, so the vector of a memory
-- removed by any path (Forget, a user's deletion cascading) goes with it here.
CREATE TRIGGER memories_delete_vector AFTER DELETE ON memories
BEGIN
	DELETE FROM memory_vectors WHERE rowid = old.seq;
END;
