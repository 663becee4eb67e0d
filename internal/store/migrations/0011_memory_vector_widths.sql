-- 0011: memory vectors of any power-of-two width (64–4,096), and sign bits in a
-- plain table that internal/memory scans in process.
--
-- The vec0 bit table (0007) was the cost of a search: its Hamming KNN took ~9 ms
-- over 100k 512-bit vectors of one user, grew with k (31 ms at k = 200) and with
-- the width, and its width was fixed by the table's declaration. memory_bits holds
-- the same sign bits clustered by owner, so one owner's bits are read in one range
-- scan into a cache and searched with popcounts (internal/memory/vecindex.go).
-- The width of a row is the length of its blobs: dims/8 bytes of bits, dims × 2
-- bytes of float16; a search compares only rows of the query's width, so rows of
-- an older embedder are ignored until Reindex has rewritten them.

CREATE TABLE memory_bits (
	owner_id INTEGER NOT NULL,
	seq      INTEGER NOT NULL,
	bits     BLOB    NOT NULL CHECK (length(bits) IN (8, 16, 32, 64, 128, 256, 512)),
	PRIMARY KEY (owner_id, seq)
) WITHOUT ROWID;

INSERT INTO memory_bits (owner_id, seq, bits) SELECT owner_id, rowid, bits FROM memory_vectors;

DROP TRIGGER memories_delete_vector;
DROP TABLE memory_vectors;

CREATE TABLE memory_embeddings_new (
	seq       INTEGER PRIMARY KEY REFERENCES memories (seq) ON DELETE CASCADE,
	embedding BLOB    NOT NULL CHECK (length(embedding) IN (128, 256, 512, 1024, 2048, 4096, 8192))
);
INSERT INTO memory_embeddings_new (seq, embedding) SELECT seq, embedding FROM memory_embeddings;
DROP TABLE memory_embeddings;
ALTER TABLE memory_embeddings_new RENAME TO memory_embeddings;

-- version counts every change to an owner's bits, so a cached copy is known to be
-- stale whichever path changed them (Forget, Reindex, a user's deletion cascading,
-- another process). No foreign key: a user's deletion cascades into memory_bits,
-- whose trigger writes here, and must not trip over a row already cascaded away.
CREATE TABLE memory_vector_versions (
	owner_id INTEGER PRIMARY KEY,
	version  INTEGER NOT NULL
);
INSERT INTO memory_vector_versions (owner_id, version) SELECT owner_id, 1 FROM memory_bits GROUP BY owner_id;

CREATE TRIGGER memory_bits_insert AFTER INSERT ON memory_bits
BEGIN
	INSERT INTO memory_vector_versions (owner_id, version) VALUES (new.owner_id, 1)
		ON CONFLICT (owner_id) DO UPDATE SET version = version + 1;
END;

CREATE TRIGGER memory_bits_delete AFTER DELETE ON memory_bits
BEGIN
	INSERT INTO memory_vector_versions (owner_id, version) VALUES (old.owner_id, 1)
		ON CONFLICT (owner_id) DO UPDATE SET version = version + 1;
END;

-- A memory removed by any path takes its bits with it (memory_embeddings goes by
-- its foreign key).
CREATE TRIGGER memories_delete_bits AFTER DELETE ON memories
BEGIN
	DELETE FROM memory_bits WHERE owner_id = old.owner_id AND seq = old.seq;
END;
