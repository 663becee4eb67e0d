package store

import (
	"context"
	"database/sql"
	"errors"
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

// LeaseHolder returns who holds the session's lease ("" when nobody), expired or not.
func (db *DB) LeaseHolder(ctx context.Context, sessionID string) (string, error) {
	var holder string
	err := db.pool.QueryRowContext(ctx, `SELECT holder FROM session_leases WHERE session_id = ?`, sessionID).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: lease holder: %w", err)
	}
	return holder, nil
}

// Lease is one session's lease row.
type Lease struct {
	SessionID string
	Holder    string
	ExpiresAt time.Time
}

// Leases lists every lease row, expired or not (a few: one per chat answering).
func (db *DB) Leases(ctx context.Context) ([]Lease, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT session_id, holder, expires_at FROM session_leases ORDER BY session_id`)
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	leases, err := scanAll(rows, func(row scanner) (Lease, error) {
		var l Lease
		var exp int64
		err := row.Scan(&l.SessionID, &l.Holder, &exp)
		l.ExpiresAt = fromMS(exp)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	return leases, nil
}

// TakeLease hands the session's lease from holder from (a process known to be dead)
// to holder, whether or not it has expired. It reports false when from no longer has it
// (someone else took it first).
func (db *DB) TakeLease(ctx context.Context, sessionID, holder, from string, ttl time.Duration) (bool, error) {
	res, err := db.exec(ctx,
		`UPDATE session_leases SET holder = ?, expires_at = ? WHERE session_id = ? AND holder = ?`,
		holder, ms(db.now().Add(ttl)), sessionID, from)
	if err != nil {
		return false, fmt.Errorf("store: take lease: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: take lease: %w", err)
	}
	return n == 1, nil
}
