package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"atrium/internal/errs"
)

// MCPOAuth returns the sealed OAuth grant of server id, or errs.NotFound when it has
// none. The store never sees the tokens themselves.
func (db *DB) MCPOAuth(ctx context.Context, serverID int64) ([]byte, error) {
	var sealed []byte
	err := db.pool.QueryRowContext(ctx, `SELECT sealed FROM mcp_oauth WHERE server_id = ?`, serverID).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: mcp oauth: %w", errs.E(errs.NotFound, "no OAuth grant for this MCP server"))
	}
	if err != nil {
		return nil, fmt.Errorf("store: mcp oauth: %w", err)
	}
	return sealed, nil
}

// SaveMCPOAuth replaces the sealed OAuth grant of server id. A server that does not
// exist is errs.NotFound.
func (db *DB) SaveMCPOAuth(ctx context.Context, serverID int64, sealed []byte) error {
	_, err := db.exec(ctx, `INSERT INTO mcp_oauth (server_id, sealed, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (server_id) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
		serverID, sealed, ms(db.now()))
	if isForeignKey(err) {
		return fmt.Errorf("store: save mcp oauth: %w", errs.Wrap(errs.NotFound, err, "MCP server not found"))
	}
	if err != nil {
		return fmt.Errorf("store: save mcp oauth: %w", err)
	}
	return nil
}

// DeleteMCPOAuth forgets the OAuth grant of server id (nothing happens without one).
func (db *DB) DeleteMCPOAuth(ctx context.Context, serverID int64) error {
	if _, err := db.exec(ctx, `DELETE FROM mcp_oauth WHERE server_id = ?`, serverID); err != nil {
		return fmt.Errorf("store: delete mcp oauth: %w", err)
	}
	return nil
}
