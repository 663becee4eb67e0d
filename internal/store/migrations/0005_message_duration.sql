-- 0005: how long a tool call (or a reply) took, shown on tool-call cards after a reload.
ALTER TABLE messages ADD COLUMN duration_ms INTEGER NOT NULL DEFAULT 0;
