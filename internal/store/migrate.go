package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations ordered by version. Files are named
// NNNN_description.sql; numbers must be unique.
func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var list []migration
	seen := map[int]string{}
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and '_'", base)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, base, v)
		}
		seen[v] = base
		body, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		list = append(list, migration{version: v, name: base, sql: string(body)})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].version < list[j].version })
	return list, nil
}

// LatestSchemaVersion is the highest migration version this build knows.
func LatestSchemaVersion() int {
	list, err := migrations()
	if err != nil || len(list) == 0 {
		return 0
	}
	return list[len(list)-1].version
}

// SchemaVersion returns the highest migration version applied to the database.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := db.pool.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	return v, nil
}

// appliedVersions returns the migration versions recorded in schema_migrations.
func (db *DB) appliedVersions(ctx context.Context) (map[int]bool, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: migrate: %w", err)
		}
		out[v] = true
	}
	return out, rows.Err()
}

// migrate applies pending migrations, each in its own transaction, recording each
// in schema_migrations. Re-running is a no-op; concurrent Opens of one file are
// serialised by the IMMEDIATE transactions.
func (db *DB) migrate(ctx context.Context) error {
	list, err := migrations()
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	known := 0
	if len(list) > 0 {
		known = list[len(list)-1].version
	}
	if _, err := db.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	current, err := db.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if current > known {
		return fmt.Errorf("store: database schema version %d is newer than this Atrium understands (%d): a newer Atrium has migrated it. Upgrade Atrium to that version again, or, to roll back, restore the backup taken before the upgrade into a fresh data directory", current, known)
	}
	applied, err := db.appliedVersions(ctx)
	if err != nil {
		return err
	}
	// Every migration not yet recorded is applied, in version order, including one
	// numbered below the highest applied: work merged out of order must not be skipped.
	for _, m := range list {
		if applied[m.version] {
			continue
		}
		err := db.inTx(ctx, func(tx *sql.Tx) error {
			var done int
			// Another process may have applied it since we looked.
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&done); err != nil {
				return err
			}
			if done > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, ms(db.now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migrate %s: %w", m.name, err)
		}
	}
	return nil
}
