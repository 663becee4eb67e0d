package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Roles.
const (
	RoleAdmin = "admin"
	RoleUser  = "user"
)

// User is an account. PasswordHash is opaque to the store (auth hashes it).
type User struct {
	ID           int64
	Username     string
	PasswordHash string
	Role         string
	Disabled     bool
	Theme        string // ThemeSystem, ThemeLight or ThemeDark
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Themes a user may choose; system follows the browser's setting.
const (
	ThemeSystem = "system"
	ThemeLight  = "light"
	ThemeDark   = "dark"
)

const userCols = `id, username, password_hash, role, disabled, theme, created_at, updated_at`

func scanUser(row scanner) (User, error) {
	var u User
	var created, updated int64
	err := row.Scan(&u.ID, &u.Username, &u.PasswordHash, &u.Role, &u.Disabled, &u.Theme, &created, &updated)
	u.CreatedAt, u.UpdatedAt = fromMS(created), fromMS(updated)
	return u, err
}

func validRole(role string) error {
	if role != RoleAdmin && role != RoleUser {
		return errs.E(errs.Invalid, "unknown role %q", role)
	}
	return nil
}

func validUser(username, role string) error {
	if strings.TrimSpace(username) == "" {
		return errs.E(errs.Invalid, "username is required")
	}
	return validRole(role)
}

// CreateFirstAdmin creates an enabled admin, but only while there are no users at
// all; otherwise it returns errs.Conflict. Of several concurrent calls exactly one
// succeeds.
func (db *DB) CreateFirstAdmin(ctx context.Context, username, passwordHash string) (User, error) {
	u := User{Username: username, PasswordHash: passwordHash, Role: RoleAdmin, Theme: ThemeSystem}
	if err := validUser(username, RoleAdmin); err != nil {
		return User{}, fmt.Errorf("store: create first admin: %w", err)
	}
	now := db.now()
	u.CreatedAt, u.UpdatedAt = fromMS(ms(now)), fromMS(ms(now))
	// One statement: the write lock is held from the NOT EXISTS check to the insert.
	err := db.writeRow(ctx, `INSERT INTO users (username, password_hash, role, disabled, created_at, updated_at)
		SELECT ?, ?, 'admin', 0, ?, ? WHERE NOT EXISTS (SELECT 1 FROM users)
		RETURNING id`, []any{username, passwordHash, ms(now), ms(now)}, &u.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("store: create first admin: %w", errs.E(errs.Conflict, "setup is already done"))
	}
	if err != nil {
		return User{}, fmt.Errorf("store: create first admin: %w", err)
	}
	return u, nil
}

// metaDeletedUserID is the meta key of the highest id of a deleted user. SQLite
// hands out max(id)+1, so deleting the newest user would give the next one its id,
// and anything still under way for the deleted user (a reply, a memory extraction)
// would then write into the new account; ids are never reused instead.
const metaDeletedUserID = "users.deleted_max_id"

// CreateUser inserts u and sets its ID and timestamps. A taken username (case
// insensitive) is errs.Conflict. The id is new: never one of a deleted user.
func (db *DB) CreateUser(ctx context.Context, u *User) error {
	if err := validUser(u.Username, u.Role); err != nil {
		return fmt.Errorf("store: create user: %w", err)
	}
	now := ms(db.now())
	err := db.writeRow(ctx, `INSERT INTO users (id, username, password_hash, role, disabled, created_at, updated_at)
		VALUES (max(COALESCE((SELECT MAX(id) FROM users), 0),
		            COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '`+metaDeletedUserID+`'), 0)) + 1,
		        ?, ?, ?, ?, ?, ?) RETURNING id`,
		[]any{u.Username, u.PasswordHash, u.Role, u.Disabled, now, now}, &u.ID)
	if isUnique(err) {
		return fmt.Errorf("store: create user: %w", errs.Wrap(errs.Conflict, err, "the username %q is taken", u.Username))
	}
	if err != nil {
		return fmt.Errorf("store: create user: %w", err)
	}
	u.CreatedAt, u.UpdatedAt, u.Theme = fromMS(now), fromMS(now), ThemeSystem
	return nil
}

// CountUsers returns the number of users, enabled or not.
func (db *DB) CountUsers(ctx context.Context) (int, error) {
	var n int
	if err := db.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count users: %w", err)
	}
	return n, nil
}

// UserByID returns the user or errs.NotFound.
func (db *DB) UserByID(ctx context.Context, id int64) (User, error) {
	u, err := scanUser(db.pool.QueryRowContext(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("store: user by id: %w", errs.E(errs.NotFound, "user not found"))
	}
	if err != nil {
		return User{}, fmt.Errorf("store: user by id: %w", err)
	}
	return u, nil
}

// UserByUsername returns the user (username compared case-insensitively) or
// errs.NotFound.
func (db *DB) UserByUsername(ctx context.Context, name string) (User, error) {
	u, err := scanUser(db.pool.QueryRowContext(ctx, `SELECT `+userCols+` FROM users WHERE username = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("store: user by username: %w", errs.E(errs.NotFound, "user not found"))
	}
	if err != nil {
		return User{}, fmt.Errorf("store: user by username: %w", err)
	}
	return u, nil
}

// ListUsers returns all users ordered by username.
func (db *DB) ListUsers(ctx context.Context) ([]User, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+userCols+` FROM users ORDER BY username, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list users: %w", err)
	}
	us, err := scanAll(rows, scanUser)
	if err != nil {
		return nil, fmt.Errorf("store: list users: %w", err)
	}
	return us, nil
}

// SetUserDisabled enables or disables a user. Disabling also deletes the user's
// logins. Disabling the last enabled admin is errs.Conflict; a missing user is
// errs.NotFound.
func (db *DB) SetUserDisabled(ctx context.Context, id int64, disabled bool) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		u, err := userInTx(ctx, tx, id)
		if err != nil {
			return err
		}
		if disabled && u.Role == RoleAdmin && !u.Disabled {
			if err := ensureOtherAdmin(ctx, tx, id, "disable"); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE users SET disabled = ?, updated_at = ? WHERE id = ?`, disabled, ms(db.now()), id); err != nil {
			return err
		}
		if disabled {
			_, err = tx.ExecContext(ctx, `DELETE FROM logins WHERE user_id = ?`, id)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: set user disabled: %w", err)
	}
	return nil
}

// SetUserRole changes a user's role. Demoting the last enabled admin is
// errs.Conflict; an unknown role is errs.Invalid; a missing user errs.NotFound.
func (db *DB) SetUserRole(ctx context.Context, id int64, role string) error {
	if err := validRole(role); err != nil {
		return fmt.Errorf("store: set user role: %w", err)
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		u, err := userInTx(ctx, tx, id)
		if err != nil {
			return err
		}
		if role != RoleAdmin && u.Role == RoleAdmin && !u.Disabled {
			if err := ensureOtherAdmin(ctx, tx, id, "demote"); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE users SET role = ?, updated_at = ? WHERE id = ?`, role, ms(db.now()), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: set user role: %w", err)
	}
	return nil
}

// ensureOtherAdmin returns errs.Conflict unless an enabled admin other than id exists.
func ensureOtherAdmin(ctx context.Context, tx *sql.Tx, id int64, verb string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled = 0 AND id <> ?`, id).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return errs.E(errs.Conflict, "cannot %s the last enabled admin", verb)
	}
	return nil
}

// SetUserPassword replaces the password hash and deletes all of the user's logins,
// so every other browser is signed out. A missing user is errs.NotFound.
func (db *DB) SetUserPassword(ctx context.Context, id int64, hash string) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET password_hash = ?, updated_at = ? WHERE id = ?`, hash, ms(db.now()), id)
		if err != nil {
			return err
		}
		if err := mustAffect(res, "user not found"); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM logins WHERE user_id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: set user password: %w", err)
	}
	return nil
}

// UserSessionIDs returns the ids of all of a user's chats (to stop their replies
// before the user is deleted).
func (db *DB) UserSessionIDs(ctx context.Context, userID int64) ([]string, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT id FROM sessions WHERE owner_id = ? ORDER BY id`, userID)
	if err != nil {
		return nil, fmt.Errorf("store: user session ids: %w", err)
	}
	ids, err := scanAll(rows, func(r scanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	})
	if err != nil {
		return nil, fmt.Errorf("store: user session ids: %w", err)
	}
	return ids, nil
}

// userRows deletes everything of a user, table by table, leaves before their
// parents. The foreign keys' cascades would reach most of it from the users row;
// the list is spelled out so that no table is missed by accident, and it also
// names what no foreign key reaches: memory_bits and memory_vector_versions
// (kept by triggers, so the versions row goes last), the settings keyed "<area>.user.<id>" and the user's wrapped data key. Audit entries
// about the user go with them; entries they made as an admin stay, their actor set
// to NULL by the foreign key (the record of what was done to others outlives its
// actor). TestDeleteUser checks every table with an owner or user column.
var userRows = []string{
	`DELETE FROM memory_bits WHERE owner_id = ?1`,
	`DELETE FROM memory_embeddings WHERE seq IN (SELECT seq FROM memories WHERE owner_id = ?1)`,
	`DELETE FROM memory_terms WHERE owner_id = ?1`,
	`DELETE FROM memories WHERE owner_id = ?1`,
	`DELETE FROM memory_vector_versions WHERE owner_id = ?1`,
	`DELETE FROM spans WHERE run_id IN (SELECT id FROM runs WHERE owner_id = ?1)`,
	`DELETE FROM runs WHERE owner_id = ?1`,
	`DELETE FROM session_leases WHERE session_id IN (SELECT id FROM sessions WHERE owner_id = ?1)`,
	`DELETE FROM attachments WHERE owner_id = ?1`,
	`DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE owner_id = ?1)`,
	`DELETE FROM sessions WHERE owner_id = ?1`,
	`DELETE FROM logins WHERE user_id = ?1`,
	`DELETE FROM audit_log WHERE subject_id = ?1`,
	`DELETE FROM settings WHERE key LIKE '%.user.' || ?1`,
	`DELETE FROM data_keys WHERE owner_id = ?1`,
	`DELETE FROM users WHERE id = ?1`,
}

// DeleteUser deletes a user and every row of theirs in one transaction (all or
// nothing), including their wrapped data key, so that whatever of theirs survives
// elsewhere (a backup, a copied WAL) can no longer be opened; then it checkpoints
// the WAL so the deleted pages, zeroed by secure_delete, reach the file. The caller
// forgets the key in its Keyring. Deleting the last enabled admin is errs.Conflict;
// a missing user errs.NotFound.
func (db *DB) DeleteUser(ctx context.Context, id int64) error {
	if id == InstanceOwner {
		return fmt.Errorf("store: delete user: %w", errs.E(errs.NotFound, "user not found"))
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		u, err := userInTx(ctx, tx, id)
		if err != nil {
			return err
		}
		if u.Role == RoleAdmin && !u.Disabled {
			if err := ensureOtherAdmin(ctx, tx, id, "delete"); err != nil {
				return err
			}
		}
		for _, q := range userRows {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('`+metaDeletedUserID+`', CAST(?1 AS TEXT))
			ON CONFLICT (key) DO UPDATE SET value = CAST(max(CAST(value AS INTEGER), ?1) AS TEXT)`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: delete user: %w", err)
	}
	return db.Checkpoint(ctx)
}

// userInTx reads user id inside tx (errs.NotFound when missing), for the changes
// that check the user before writing.
func userInTx(ctx context.Context, tx *sql.Tx, id int64) (User, error) {
	u, err := scanUser(tx.QueryRowContext(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, errs.E(errs.NotFound, "user not found")
	}
	return u, err
}
