-- The long-term memories a reply used (their ids, comma-separated; never their text),
-- so that the chat can show "memories used" after a reload.
ALTER TABLE messages ADD COLUMN memories TEXT NOT NULL DEFAULT '';
