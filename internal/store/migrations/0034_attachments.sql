-- 0034: files attached to a user's message (text files and images), stored in the
-- database like the messages. An upload is a row with message_id NULL until the message
-- that uses it is committed (in the same transaction); unsent ones expire
-- (store.PruneUnsentAttachments). Deleting the chat, the message or the user deletes
-- them by cascade (secure_delete zeroes the pages; the deletes checkpoint the WAL).
-- kind 'text': data is UTF-8 text sent to the model as a delimited block; 'image': a
-- decode-checked PNG/JPEG/GIF/WebP sent as an image part. mime is sniffed from the
-- content, never the browser's claim. tokens is what the file costs in the context.
CREATE TABLE attachments (
	id          TEXT    PRIMARY KEY,
	owner_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	session_id  TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id  INTEGER REFERENCES messages (id) ON DELETE CASCADE,
	name        TEXT    NOT NULL,
	kind        TEXT    NOT NULL CHECK (kind IN ('text', 'image')),
	mime        TEXT    NOT NULL,
	size        INTEGER NOT NULL,
	width       INTEGER NOT NULL DEFAULT 0,
	height      INTEGER NOT NULL DEFAULT 0,
	tokens      INTEGER NOT NULL DEFAULT 0,
	data        BLOB    NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE INDEX attachments_session_message ON attachments (session_id, message_id);
CREATE INDEX attachments_message ON attachments (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX attachments_unsent ON attachments (created_at) WHERE message_id IS NULL;
CREATE INDEX attachments_owner ON attachments (owner_id);
