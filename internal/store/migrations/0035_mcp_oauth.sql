-- 0035: OAuth grants of remote MCP servers (internal/mcp/oauth.go, issue 12).
--
-- One row per server that went through "Connect": its client registration and
-- tokens as one JSON object sealed by the caller with AD("mcp_server", id, "oauth").
-- Kept apart from mcp_servers.secrets_sealed because tokens change on every refresh
-- while the configuration does not. Gone with its server.
CREATE TABLE mcp_oauth (
	server_id  INTEGER PRIMARY KEY REFERENCES mcp_servers (id) ON DELETE CASCADE,
	sealed     BLOB    NOT NULL,
	updated_at INTEGER NOT NULL
);
