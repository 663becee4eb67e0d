-- 0024: search across chats. An FTS5 index of message text with the trigram tokenizer,
-- so substrings and Chinese match. It keeps its own copy of the text: secure-delete
-- (which removes a deleted row's trigrams from the index pages at once, instead of
-- leaving them behind delete markers until a merge) needs the old text, which neither a
-- contentless table (it only leaves tombstones) nor an external-content one (the message
-- row is already gone when a chat's messages cascade) can give it. So deleting a chat, a
-- message or a user removes its text from the index.
-- Temporary chats are not indexed (like memory, search does not keep them).
-- Only user and assistant text is indexed: tool results are not what people search.
-- Titles are short and few per user: they are matched with LIKE (sessions has no stable
-- integer rowid to key an index by).
CREATE VIRTUAL TABLE message_fts USING fts5(content, tokenize='trigram');
INSERT INTO message_fts (message_fts, rank) VALUES ('secure-delete', 1);

INSERT INTO message_fts (rowid, content)
	SELECT m.id, m.content FROM messages m JOIN sessions s ON s.id = m.session_id
	WHERE s.temporary = 0 AND m.role IN ('user', 'assistant') AND m.content != '';

CREATE TRIGGER message_fts_insert AFTER INSERT ON messages
	WHEN new.role IN ('user', 'assistant') AND new.content != ''
		AND (SELECT temporary FROM sessions WHERE id = new.session_id) = 0
BEGIN
	INSERT INTO message_fts (rowid, content) VALUES (new.id, new.content);
END;
-- A streaming reply is rewritten once a second; only a changed text is reindexed.
CREATE TRIGGER message_fts_update AFTER UPDATE OF content ON messages
	WHEN new.content IS NOT old.content
BEGIN
	DELETE FROM message_fts WHERE rowid = old.id;
	INSERT INTO message_fts (rowid, content)
		SELECT new.id, new.content WHERE new.role IN ('user', 'assistant') AND new.content != ''
			AND (SELECT temporary FROM sessions WHERE id = new.session_id) = 0;
END;
CREATE TRIGGER message_fts_delete AFTER DELETE ON messages
BEGIN
	DELETE FROM message_fts WHERE rowid = old.id;
END;
