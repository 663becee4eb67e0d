package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"atrium/internal/errs"
)

// InstanceOwner is the data_keys owner id of the instance-wide data key.
const InstanceOwner int64 = 0

// Meta returns the value stored under key, or errs.NotFound.
func (db *DB) Meta(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := db.pool.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: meta %q: %w", key, errs.E(errs.NotFound, "meta key not found"))
	}
	if err != nil {
		return nil, fmt.Errorf("store: meta %q: %w", key, err)
	}
	return v, nil
}

// SetMeta inserts or replaces the value under key.
func (db *DB) SetMeta(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	_, err := db.exec(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("store: set meta %q: %w", key, err)
	}
	return nil
}

// WrappedKey returns the wrapped data key of owner (InstanceOwner or a user id),
// or errs.NotFound.
func (db *DB) WrappedKey(ctx context.Context, owner int64) ([]byte, error) {
	var v []byte
	err := db.pool.QueryRowContext(ctx, `SELECT wrapped FROM data_keys WHERE owner_id = ?`, owner).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: wrapped key: %w", errs.E(errs.NotFound, "data key not found"))
	}
	if err != nil {
		return nil, fmt.Errorf("store: wrapped key: %w", err)
	}
	return v, nil
}

// PutWrappedKey stores owner's wrapped data key. It never replaces one: if a key
// exists the result is errs.Conflict, so two racing first uses agree on one key
// (the loser should re-read with WrappedKey). owner must be InstanceOwner or an
// existing user, else errs.NotFound: a deleted user's key stays destroyed, even
// when something still under way for them (in this process or another) asks for it.
func (db *DB) PutWrappedKey(ctx context.Context, owner int64, wrapped []byte) error {
	if len(wrapped) == 0 {
		return fmt.Errorf("store: put wrapped key: %w", errs.E(errs.Invalid, "empty wrapped key"))
	}
	res, err := db.exec(ctx, `INSERT INTO data_keys (owner_id, wrapped, created_at)
		SELECT ?1, ?2, ?3 WHERE ?1 = 0 OR EXISTS (SELECT 1 FROM users WHERE id = ?1)`,
		owner, wrapped, ms(db.now()))
	if isUnique(err) {
		return fmt.Errorf("store: put wrapped key: %w", errs.Wrap(errs.Conflict, err, "data key already exists"))
	}
	if err == nil {
		err = mustAffect(res, "no such user")
	}
	if err != nil {
		return fmt.Errorf("store: put wrapped key: %w", err)
	}
	return nil
}
