-- 0033: versions of a message, kept as branches (issue 10: edit and resend, regenerate,
-- retry).
--
-- Why this shape: messages stay one table ordered by seq. The branch on screen is the
-- rows with active = 1, and every new version is appended with a higher seq, so along
-- one branch seq still only grows: the existing queries (chat pages, "Load older",
-- the context loader, the summary watermark, search, export) need only an active
-- filter, and their (session_id, seq) order still reads the branch in order. A tree
-- with a per-chat head would instead need a recursive walk in each of them.
--   parent_id  the row before this one in its branch (0: the chat's first message);
--              the versions of one point are the rows with the same parent.
--   chosen     the version picked among its siblings (one per parent), so that
--              flipping back to a version brings back the later turns last shown
--              below it.
--   active     on the branch on screen: chosen, and its parent active.
--   task_state the chat's task (sessions.state) as of this message: set on each user
--              message (the task its turn starts from) and on the newest message on
--              screen when the task changes (task_update, the side panel); NULL
--              otherwise. A branch's task is its newest one.
-- A rolling summary covers the branch up to its watermark message, so each one is kept
-- per watermark (chat_summaries); sessions.summary/summary_seq stay the one for the
-- branch on screen, re-picked whenever the branch moves.
ALTER TABLE messages ADD COLUMN parent_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN chosen INTEGER NOT NULL DEFAULT 1 CHECK (chosen IN (0, 1));
ALTER TABLE messages ADD COLUMN active INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1));
ALTER TABLE messages ADD COLUMN task_state TEXT;

UPDATE messages SET parent_id = coalesce((SELECT p.id FROM messages p
	WHERE p.session_id = messages.session_id AND p.seq < messages.seq ORDER BY p.seq DESC LIMIT 1), 0);

CREATE INDEX messages_parent ON messages (session_id, parent_id);
-- The branch on screen, in order, without reading the other versions.
CREATE INDEX messages_active ON messages (session_id, seq) WHERE active = 1;

CREATE TABLE chat_summaries (
	session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq        INTEGER NOT NULL, -- the watermark: the last message it covers
	summary    TEXT    NOT NULL,
	PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

INSERT INTO chat_summaries (session_id, seq, summary)
	SELECT id, summary_seq, summary FROM sessions WHERE summary_seq > 0;
