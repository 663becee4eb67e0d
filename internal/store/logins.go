package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// Login is a signed-in browser. Only a hash of the cookie token is stored.
type Login struct {
	TokenHash  []byte
	UserID     int64
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastSeenAt time.Time
}

// CreateLogin stores l. Zero CreatedAt/LastSeenAt default to Now. An unknown user
// is errs.NotFound; a duplicate token hash is errs.Conflict.
func (db *DB) CreateLogin(ctx context.Context, l Login) error {
	if len(l.TokenHash) == 0 {
		return fmt.Errorf("store: create login: %w", errs.E(errs.Invalid, "empty token hash"))
	}
	now := db.now()
	if l.CreatedAt.IsZero() {
		l.CreatedAt = now
	}
	if l.LastSeenAt.IsZero() {
		l.LastSeenAt = now
	}
	_, err := db.exec(ctx, `INSERT INTO logins (token_hash, user_id, created_at, expires_at, last_seen_at)
		VALUES (?, ?, ?, ?, ?)`, l.TokenHash, l.UserID, ms(l.CreatedAt), ms(l.ExpiresAt), ms(l.LastSeenAt))
	switch {
	case isForeignKey(err):
		return fmt.Errorf("store: create login: %w", errs.Wrap(errs.NotFound, err, "user not found"))
	case isUnique(err):
		return fmt.Errorf("store: create login: %w", errs.Wrap(errs.Conflict, err, "login already exists"))
	case err != nil:
		return fmt.Errorf("store: create login: %w", err)
	}
	return nil
}

// LoginByTokenHash returns the login and its user, or errs.NotFound. It does not
// check expiry or whether the user is disabled; the caller does.
func (db *DB) LoginByTokenHash(ctx context.Context, hash []byte) (Login, User, error) {
	var l Login
	var u User
	var lc, le, ls, uc, uu int64
	err := db.pool.QueryRowContext(ctx, `SELECT l.token_hash, l.user_id, l.created_at, l.expires_at, l.last_seen_at,
			u.id, u.username, u.password_hash, u.role, u.disabled, u.theme, u.created_at, u.updated_at
		FROM logins l JOIN users u ON u.id = l.user_id
		WHERE l.token_hash = ?`, hash).Scan(&l.TokenHash, &l.UserID, &lc, &le, &ls,
		&u.ID, &u.Username, &u.PasswordHash, &u.Role, &u.Disabled, &u.Theme, &uc, &uu)
	if errors.Is(err, sql.ErrNoRows) {
		return Login{}, User{}, fmt.Errorf("store: login by token: %w", errs.E(errs.NotFound, "login not found"))
	}
	if err != nil {
		return Login{}, User{}, fmt.Errorf("store: login by token: %w", err)
	}
	l.CreatedAt, l.ExpiresAt, l.LastSeenAt = fromMS(lc), fromMS(le), fromMS(ls)
	u.CreatedAt, u.UpdatedAt = fromMS(uc), fromMS(uu)
	return l, u, nil
}

// ExtendLogin sets a new expiry and marks the login as seen now. A missing login
// is errs.NotFound.
func (db *DB) ExtendLogin(ctx context.Context, hash []byte, expiresAt time.Time) error {
	res, err := db.exec(ctx, `UPDATE logins SET expires_at = ?, last_seen_at = ? WHERE token_hash = ?`,
		ms(expiresAt), ms(db.now()), hash)
	if err == nil {
		err = mustAffect(res, "login not found")
	}
	if err != nil {
		return fmt.Errorf("store: extend login: %w", err)
	}
	return nil
}

// DeleteLogin removes a login. Deleting a login that is already gone is not an
// error, so that signing out always succeeds.
func (db *DB) DeleteLogin(ctx context.Context, hash []byte) error {
	if _, err := db.exec(ctx, `DELETE FROM logins WHERE token_hash = ?`, hash); err != nil {
		return fmt.Errorf("store: delete login: %w", err)
	}
	return nil
}

// DeleteUserLogins signs a user out everywhere and returns how many logins went.
func (db *DB) DeleteUserLogins(ctx context.Context, userID int64) (int64, error) {
	res, err := db.exec(ctx, `DELETE FROM logins WHERE user_id = ?`, userID)
	if err != nil {
		return 0, fmt.Errorf("store: delete user logins: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// DeleteExpiredLogins removes logins whose expiry is at or before Now and returns
// how many were removed.
func (db *DB) DeleteExpiredLogins(ctx context.Context) (int64, error) {
	res, err := db.exec(ctx, `DELETE FROM logins WHERE expires_at <= ?`, ms(db.now()))
	if err != nil {
		return 0, fmt.Errorf("store: delete expired logins: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
