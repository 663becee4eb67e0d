-- 0012: memory in the chat.
--
-- saved_memories: the ids of the memories an explicit "remember …" created, kept on
-- the reply (comma-separated ids, never a text) so that its "Saved to memory" chip and
-- its Undo are rendered from stored data after a reload.
ALTER TABLE messages ADD COLUMN saved_memories TEXT NOT NULL DEFAULT '';

-- memory_suggestions: what extraction proposed for a user who asked to be asked
-- before anything is saved. The text is sealed like a memory's (AD binds id and
-- owner); target_id is the memory an update would replace (not a foreign key: that
-- memory may be forgotten meanwhile, and accepting then adds instead). session_id and
-- reply_seq place the chip on the reply; source_seq is the user message it came from.
CREATE TABLE memory_suggestions (
	seq        INTEGER PRIMARY KEY,
	id         TEXT    NOT NULL UNIQUE,
	owner_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	op         TEXT    NOT NULL CHECK (op IN ('add', 'update')),
	kind       TEXT    NOT NULL CHECK (kind <> ''),
	target_id  TEXT,
	sealed     BLOB    NOT NULL,
	session_id TEXT,
	source_seq INTEGER,
	reply_seq  INTEGER,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);

CREATE INDEX memory_suggestions_owner ON memory_suggestions (owner_id, created_at);
CREATE INDEX memory_suggestions_session ON memory_suggestions (session_id, reply_seq);
CREATE INDEX memory_suggestions_expiry ON memory_suggestions (expires_at);
