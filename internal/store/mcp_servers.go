package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"atrium/internal/errs"
)

// MCP server transports, as stored.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
	MCPSSE   = "sse"
)

// MCPServer is a configured MCP server. Config is a JSON object of the non-secret
// fields (internal/mcp decides its shape); SecretsSealed is ciphertext from the
// crypto package (env values, header values, bearer token), nil when there are
// none. The store never sees the secrets themselves.
type MCPServer struct {
	ID            int64
	Name          string
	Transport     string
	Config        []byte
	SecretsSealed []byte
	Enabled       bool
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

const mcpServerCols = `id, name, transport, config, secrets_sealed, enabled, created_at, updated_at`

func scanMCPServer(row scanner) (MCPServer, error) {
	var s MCPServer
	var config string
	var created, updated int64
	if err := row.Scan(&s.ID, &s.Name, &s.Transport, &config, &s.SecretsSealed, &s.Enabled, &created, &updated); err != nil {
		return MCPServer{}, err
	}
	s.Config = []byte(config)
	s.CreatedAt, s.UpdatedAt = fromMS(created), fromMS(updated)
	return s, nil
}

// validMCPServer checks what the schema would reject, so the user gets a message
// instead of a constraint error, and returns the config to store ("{}" for none).
func validMCPServer(s *MCPServer) (config string, err error) {
	if strings.TrimSpace(s.Name) == "" {
		return "", errs.E(errs.Invalid, "MCP server name is required")
	}
	switch s.Transport {
	case MCPStdio, MCPHTTP, MCPSSE:
	default:
		return "", errs.E(errs.Invalid, "MCP server %q: unknown transport %q (want stdio, http or sse)", s.Name, s.Transport)
	}
	if len(s.Config) == 0 {
		return "{}", nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(s.Config, &obj); err != nil || obj == nil {
		return "", errs.E(errs.Invalid, "MCP server %q: config must be a JSON object", s.Name)
	}
	return string(s.Config), nil
}

// CreateMCPServer inserts s and sets its ID and timestamps. A taken name (case
// insensitive) is errs.Conflict; an empty name, unknown transport or a config that
// is not a JSON object errs.Invalid.
func (db *DB) CreateMCPServer(ctx context.Context, s *MCPServer) error {
	config, err := validMCPServer(s)
	if err != nil {
		return fmt.Errorf("store: create mcp server: %w", err)
	}
	now := ms(db.now())
	err = db.writeRow(ctx, `INSERT INTO mcp_servers (name, transport, config, secrets_sealed, enabled, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		[]any{s.Name, s.Transport, config, s.SecretsSealed, s.Enabled, now, now}, &s.ID)
	if isUnique(err) {
		return fmt.Errorf("store: create mcp server: %w", errs.Wrap(errs.Conflict, err, "an MCP server named %q already exists", s.Name))
	}
	if err != nil {
		return fmt.Errorf("store: create mcp server: %w", err)
	}
	s.CreatedAt, s.UpdatedAt = fromMS(now), fromMS(now)
	return nil
}

// UpdateMCPServer replaces every field of server s.ID (except CreatedAt) and bumps
// UpdatedAt. Missing is errs.NotFound; a taken name errs.Conflict; bad input
// errs.Invalid as for CreateMCPServer.
func (db *DB) UpdateMCPServer(ctx context.Context, s MCPServer) error {
	config, err := validMCPServer(&s)
	if err != nil {
		return fmt.Errorf("store: update mcp server: %w", err)
	}
	res, err := db.exec(ctx, `UPDATE mcp_servers SET name = ?, transport = ?, config = ?, secrets_sealed = ?, enabled = ?, updated_at = ?
		WHERE id = ?`, s.Name, s.Transport, config, s.SecretsSealed, s.Enabled, ms(db.now()), s.ID)
	if isUnique(err) {
		return fmt.Errorf("store: update mcp server: %w", errs.Wrap(errs.Conflict, err, "an MCP server named %q already exists", s.Name))
	}
	if err == nil {
		err = mustAffect(res, "MCP server not found")
	}
	if err != nil {
		return fmt.Errorf("store: update mcp server: %w", err)
	}
	return nil
}

// SaveMCPServer writes s in one transaction: it inserts s when s.ID is 0 (setting ID
// and timestamps) and replaces server s.ID otherwise. When seal is set, its result for
// the row's id becomes s.SecretsSealed: secrets are sealed to the row's id, which a new
// row only has inside the transaction, so a failure leaves no server without its
// secrets. Errors as CreateMCPServer and UpdateMCPServer; seal's error is returned as is.
func (db *DB) SaveMCPServer(ctx context.Context, s *MCPServer, seal func(id int64) ([]byte, error)) error {
	saved := *s
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		config, err := validMCPServer(&saved)
		if err != nil {
			return err
		}
		now := ms(db.now())
		if saved.ID == 0 {
			err = tx.QueryRowContext(ctx, `INSERT INTO mcp_servers (name, transport, config, secrets_sealed, enabled, created_at, updated_at)
				VALUES (?, ?, ?, NULL, ?, ?, ?) RETURNING id`, saved.Name, saved.Transport, config, saved.Enabled, now, now).Scan(&saved.ID)
			saved.CreatedAt = fromMS(now)
		} else {
			var res sql.Result
			res, err = tx.ExecContext(ctx, `UPDATE mcp_servers SET name = ?, transport = ?, config = ?, enabled = ?, updated_at = ?
				WHERE id = ?`, saved.Name, saved.Transport, config, saved.Enabled, now, saved.ID)
			if err == nil {
				err = mustAffect(res, "MCP server not found")
			}
		}
		if isUnique(err) {
			return errs.Wrap(errs.Conflict, err, "an MCP server named %q already exists", saved.Name)
		}
		if err != nil {
			return err
		}
		saved.UpdatedAt = fromMS(now)
		if seal != nil {
			if saved.SecretsSealed, err = seal(saved.ID); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE mcp_servers SET secrets_sealed = ? WHERE id = ?`, saved.SecretsSealed, saved.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save mcp server: %w", err)
	}
	*s = saved
	return nil
}

// SetMCPServerEnabled enables or disables server id and bumps UpdatedAt, or
// returns errs.NotFound.
func (db *DB) SetMCPServerEnabled(ctx context.Context, id int64, enabled bool) error {
	res, err := db.exec(ctx, `UPDATE mcp_servers SET enabled = ?, updated_at = ? WHERE id = ?`, enabled, ms(db.now()), id)
	if err == nil {
		err = mustAffect(res, "MCP server not found")
	}
	if err != nil {
		return fmt.Errorf("store: set mcp server enabled: %w", err)
	}
	return nil
}

// DeleteMCPServer removes server id, or returns errs.NotFound.
func (db *DB) DeleteMCPServer(ctx context.Context, id int64) error {
	res, err := db.exec(ctx, `DELETE FROM mcp_servers WHERE id = ?`, id)
	if err == nil {
		err = mustAffect(res, "MCP server not found")
	}
	if err != nil {
		return fmt.Errorf("store: delete mcp server: %w", err)
	}
	return nil
}

// MCPServerByID returns server id or errs.NotFound.
func (db *DB) MCPServerByID(ctx context.Context, id int64) (MCPServer, error) {
	s, err := scanMCPServer(db.pool.QueryRowContext(ctx, `SELECT `+mcpServerCols+` FROM mcp_servers WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return MCPServer{}, fmt.Errorf("store: mcp server by id: %w", errs.E(errs.NotFound, "MCP server not found"))
	}
	if err != nil {
		return MCPServer{}, fmt.Errorf("store: mcp server by id: %w", err)
	}
	return s, nil
}

// ListMCPServers returns all MCP servers, enabled or not, ordered by name.
func (db *DB) ListMCPServers(ctx context.Context) ([]MCPServer, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+mcpServerCols+` FROM mcp_servers ORDER BY name, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list mcp servers: %w", err)
	}
	list, err := scanAll(rows, scanMCPServer)
	if err != nil {
		return nil, fmt.Errorf("store: list mcp servers: %w", err)
	}
	return list, nil
}
