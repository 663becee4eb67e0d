package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"atrium/internal/errs"
)

// Every write goes through exec, writeRow or inTx: they run on the one writer
// connection, retry while another process holds the lock (SQLITE_BUSY past
// busy_timeout) until ctx ends, drop a connection that turned out read-only so
// that the next write opens a fresh one, and turn a full disk or a read-only
// database into an errs.Storage error that says so.

// exec runs one write statement.
func (db *DB) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := db.retry(ctx, func() error {
		st, err := db.writeStmt(ctx, query)
		if err == nil {
			res, err = st.ExecContext(ctx, args...)
		}
		return err
	})
	return res, err
}

// writeStmt returns the writer's prepared statement for query, preparing it
// the first time: parsing was an eighth of the CPU time under load (spans,
// lease renewals and message updates are small writes of a few fixed kinds).
func (db *DB) writeStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := db.wstmts.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := db.w.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := db.wstmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// writer is an execer for code that also runs inside a transaction.
type writer struct{ db *DB }

func (w writer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return w.db.exec(ctx, query, args...)
}

// writeRow runs one write statement that returns a row (INSERT … RETURNING)
// and scans it into dest.
func (db *DB) writeRow(ctx context.Context, query string, args []any, dest ...any) error {
	return db.retry(ctx, func() error {
		st, err := db.writeStmt(ctx, query)
		if err != nil {
			return err
		}
		return st.QueryRowContext(ctx, args...).Scan(dest...)
	})
}

// inTx runs fn in one IMMEDIATE transaction on the writer, committing when fn
// returns nil. fn may run more than once (after SQLITE_BUSY), so it must only
// set what it returns. fn must not call other DB write methods: the writer is
// its transaction's until it returns.
func (db *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.retry(ctx, func() error {
		tx, err := db.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

func (db *DB) retry(ctx context.Context, op func() error) error {
	reopens := 0
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := op()
		if isReadOnly(err) && reopens < 3 {
			// Writes queued behind a read-only connection each get here; a
			// few new connections tell a lasting condition from a stale one
			// (SQLite may hand a new connection the old one's descriptor).
			db.discardWriter()
			reopens++
			continue
		}
		if !isBusy(err) {
			return storageErr(err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(storageErr(err), ctx.Err())
		case <-time.After(wait):
		}
	}
}

// discardWriter closes the writer connection (the next write opens a new one).
// SQLite opens a file it cannot write read-only without saying so, and such a
// connection stays read-only after the file is writable again.
func (db *DB) discardWriter() {
	c, err := db.w.Conn(context.Background())
	if err != nil {
		return
	}
	c.Raw(func(any) error { return driver.ErrBadConn })
	c.Close()
}

func isBusy(err error) bool { return err != nil && sqliteCode(err)&0xff == sqlite3.SQLITE_BUSY }

func isReadOnly(err error) bool { return err != nil && sqliteCode(err)&0xff == sqlite3.SQLITE_READONLY }

// storageErr gives a full disk and an unwritable database a message for the
// user (errs.Storage); the SQLite error stays in the chain.
func storageErr(err error) error {
	if err == nil {
		return nil
	}
	switch c := sqliteCode(err); {
	case c&0xff == sqlite3.SQLITE_FULL:
		return errs.Wrap(errs.Storage, err, "The server's disk is full, so this could not be saved. Ask the administrator to free some space.")
	case c == sqlite3.SQLITE_READONLY_DBMOVED:
		return errs.Wrap(errs.Storage, err, "The server's database file was moved or deleted, so this could not be saved. Ask the administrator to restore it and restart Atrium.")
	case c&0xff == sqlite3.SQLITE_READONLY:
		return errs.Wrap(errs.Storage, err, "The server's database is read-only, so this could not be saved. Ask the administrator to check the data directory's permissions.")
	}
	return err
}

// Ready reports whether a write would succeed now (for /readyz): the database
// file is still the one opened (not deleted or replaced), it can be opened for
// writing, it has room for another page, and a one-row write commits through
// the WAL. The error is errs.Storage with a message for the operator.
func (db *DB) Ready(ctx context.Context) error {
	fi, err := os.Stat(db.path)
	if err != nil || !os.SameFile(fi, db.file) {
		return errs.Wrap(errs.Storage, err, "The database file was moved or deleted; restore it and restart Atrium.")
	}
	// A connection opened now would be read-only (an open one keeps writing);
	// SQLite creates -wal and -shm with the database file's mode.
	for _, p := range []string{db.path, db.path + "-wal", db.path + "-shm"} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil && (p == db.path || !errors.Is(err, os.ErrNotExist)) {
			return errs.Wrap(errs.Storage, err, "The database file %s cannot be written; check its permissions.", filepath.Base(p))
		}
		if f != nil {
			f.Close()
		}
	}
	// max_page_count is the SQLite limit on the file's size; its default is far
	// beyond any disk, so this matters only when one was set.
	var pages, maxPages, free int64
	err = db.w.QueryRowContext(ctx, `SELECT p.page_count, m.max_page_count, f.freelist_count
		FROM pragma_page_count() p, pragma_max_page_count() m, pragma_freelist_count() f`).Scan(&pages, &maxPages, &free)
	if err != nil {
		return fmt.Errorf("store: ready: %w", storageErr(err))
	}
	if pages >= maxPages && free == 0 {
		return errs.E(errs.Storage, "The database is full (%d of %d pages); free some space.", pages, maxPages)
	}
	// A real write: it appends a frame to the WAL, which fails on a full disk.
	if _, err := db.exec(ctx, `UPDATE schema_migrations SET version = version
		WHERE version = (SELECT MAX(version) FROM schema_migrations)`); err != nil {
		return fmt.Errorf("store: ready: %w", err)
	}
	return nil
}
