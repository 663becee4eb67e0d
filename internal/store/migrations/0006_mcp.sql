-- 0006: MCP servers configured in Settings -> MCP servers (internal/mcp).

-- config holds the non-secret fields as a JSON object (command, args, dir, url,
-- allow_tools, deny_tools, call_timeout_ms, and the env keys and header names
-- without their values). The values live in secrets_sealed, sealed by the caller
-- with AD("mcp_server", id, "secrets"); NULL when the server has none.
CREATE TABLE mcp_servers (
	id             INTEGER PRIMARY KEY,
	name           TEXT    NOT NULL UNIQUE COLLATE NOCASE,
	transport      TEXT    NOT NULL CHECK (transport IN ('stdio', 'http', 'sse')),
	config         TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(config) AND json_type(config) = 'object'),
	secrets_sealed BLOB,
	enabled        INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
);
