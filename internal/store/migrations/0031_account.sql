-- 0031: what a user sets for themselves. theme is shown on every page; about_me and
-- answer_style are the custom instructions added to the pinned zone of every chat,
-- system_prompt a chat's own instructions. Limits are checked in Go (store.MaxAboutMe…).
ALTER TABLE users ADD COLUMN theme TEXT NOT NULL DEFAULT 'system' CHECK (theme IN ('system', 'light', 'dark'));
ALTER TABLE users ADD COLUMN about_me TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN answer_style TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN system_prompt TEXT NOT NULL DEFAULT '';
-- Where a chat's title came from: 'user' (typed, never replaced), 'first_line' (the
-- first message's first line, replaced once by a title the model writes), 'model'.
-- Existing chats count as 'user': their titles stay as they are.
ALTER TABLE sessions ADD COLUMN title_source TEXT NOT NULL DEFAULT 'user' CHECK (title_source IN ('user', 'first_line', 'model'));
