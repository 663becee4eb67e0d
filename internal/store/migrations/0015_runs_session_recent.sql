-- 0015: the newest run of a session (the context meter, on every chat open and
-- websocket connect) by an index on (session, owner, start), so that it costs
-- the same with 10 chats or 17,500 runs; runs_owner_recent made SQLite walk all
-- of the owner's runs. It also covers what runs_session did.
DROP INDEX runs_session;
CREATE INDEX runs_session_recent ON runs (session_id, owner_id, started_at DESC);
