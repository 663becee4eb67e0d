package store

import (
	"context"
	"fmt"
	"time"
)

// AcquireLease takes the session's lease for holder until now+ttl. It succeeds when the
// lease is free, expired, or already held by holder; it reports false (and no error)
// when another live holder has it.
func (db *DB) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (bool, error) {
	now := db.now()
	res, err := db.exec(ctx, `
		INSERT INTO session_leases (session_id, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE session_leases.expires_at <= ? OR session_leases.holder = excluded.holder`,
		sessionID, holder, ms(now.Add(ttl)), ms(now))
	if err != nil {
		return false, fmt.Errorf("store: acquire lease: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: acquire lease: %w", err)
	}
	return n == 1, nil
}

// RenewLease extends holder's lease; false means the lease was lost (expired and taken).
func (db *DB) RenewLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (bool, error) {
	res, err := db.exec(ctx,
		`UPDATE session_leases SET expires_at = ? WHERE session_id = ? AND holder = ?`,
		ms(db.now().Add(ttl)), sessionID, holder)
	if err != nil {
		return false, fmt.Errorf("store: renew lease: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: renew lease: %w", err)
	}
	return n == 1, nil
}

// ReleaseLease gives the lease up if holder still has it.
func (db *DB) ReleaseLease(ctx context.Context, sessionID, holder string) error {
	if _, err := db.exec(ctx,
		`DELETE FROM session_leases WHERE session_id = ? AND holder = ?`, sessionID, holder); err != nil {
		return fmt.Errorf("store: release lease: %w", err)
	}
	return nil
}
