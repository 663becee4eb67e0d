package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"atrium/internal/errs"
)

// Setting returns the value stored under key, or errs.NotFound.
func (db *DB) Setting(ctx context.Context, key string) (string, error) {
	var v string
	err := db.pool.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("store: setting %q: %w", key, errs.E(errs.NotFound, "setting not found"))
	}
	if err != nil {
		return "", fmt.Errorf("store: setting %q: %w", key, err)
	}
	return v, nil
}

// SetSetting inserts or replaces the value under key.
func (db *DB) SetSetting(ctx context.Context, key, value string) error {
	_, err := db.exec(ctx, `INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, value, ms(db.now()))
	if err != nil {
		return fmt.Errorf("store: set setting %q: %w", key, err)
	}
	return nil
}
