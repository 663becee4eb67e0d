// Package store is Atrium's SQLite database: one concrete type, DB, with one file per
// aggregate (users, logins, keys, providers, settings, sessions, messages, leases,
// MCP servers, runs and spans, tool vectors) and embedded, numbered SQL migrations.
// All of Atrium's SQL lives here; other packages declare the few methods they need
// as an interface, or take a *DB.
//
// All methods are safe for concurrent use. Failures a user should see carry an
// errs code: errs.NotFound for missing rows (never a nil result with a nil error),
// errs.Conflict for uniqueness and state violations, errs.Invalid for bad input.
// Everything else is wrapped with "store: <operation>: ".
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
	_ "modernc.org/sqlite/vec" // registers sqlite-vec (vec0, vec_*) on every connection

	"atrium/internal/errs"
	"atrium/internal/store/internal/testpool"
)

// DB is the opened database. Create it with Open and release it with Close.
type DB struct {
	// pool (the readers, at most maxReaders connections) and w (the one writer
	// connection) are unexported so that every query is a method here. Every
	// write goes through w: exec, writeRow or inTx (see writer.go).
	pool *sql.DB
	w    *sql.DB

	path   string
	file   os.FileInfo // the database file as opened, for Ready
	wstmts sync.Map    // query -> *sql.Stmt on w, see writeStmt

	// Now supplies every timestamp the store writes. It defaults to time.Now;
	// tests replace it right after Open.
	Now func() time.Time

	stmts stmts
}

// Open opens (creating if needed) the SQLite database at path, sets the connection
// pragmas (foreign keys, WAL, busy timeout 5 s, synchronous NORMAL, secure_delete)
// and applies pending migrations. It refuses a database whose schema is newer than
// this build knows. The parent directory must exist. The caller closes the DB.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" || strings.ContainsRune(path, '?') || strings.HasPrefix(path, ":memory:") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("store: open: unsupported database path %q", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "secure_delete(ON)")
	// The automatic checkpoint runs inside the commit that crosses the threshold
	// and fsyncs there. The default (1000 pages) makes that a large share of
	// AppendMessage's cost; 4000 pages (a WAL of about 16 MiB) roughly doubles
	// append throughput (BenchmarkAppendMessage: ~5,500 -> ~10,000 msgs/s).
	// journal_size_limit shrinks the WAL file again after a reader kept it long.
	q.Add("_pragma", "wal_autocheckpoint(4000)")
	q.Add("_pragma", "journal_size_limit(67108864)")
	// BEGIN IMMEDIATE takes the write lock up front, so two read-then-write
	// transactions wait for each other (busy_timeout) instead of failing with
	// SQLITE_BUSY when the second tries to upgrade its read snapshot.
	q.Set("_txlock", "immediate")

	// Create the file owner-only before SQLite does (it would use 0644); SQLite gives
	// the -wal and -shm files the database file's permissions.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	f.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	dsn := path + "?" + q.Encode()
	// One writer connection: the process's writes queue in Go (database/sql hands
	// the connection on) instead of racing for SQLite's lock in busy_timeout's
	// sleep-and-retry loop, which under load let some writers wait past 5 s and
	// fail. A fixed number of readers bounds handles and page caches (each
	// connection has its own, up to 2 MiB): a reconnect storm queues for them.
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open: %w", err)
	}
	r.SetMaxOpenConns(maxReaders)
	r.SetMaxIdleConns(maxReaders)
	r.SetConnMaxIdleTime(0)
	r.SetConnMaxLifetime(0)

	db := &DB{pool: r, w: w, path: path, file: fi, Now: time.Now}
	fail := func(err error) (*DB, error) {
		db.stmts.close()
		r.Close()
		w.Close()
		return nil, err
	}
	// The writer connects first: it switches a fresh file to WAL.
	if err := pingWhileBusy(ctx, w); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	if err := db.migrate(ctx); err != nil {
		return fail(err)
	}
	if err := pingWhileBusy(ctx, r); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	if err := db.stmts.prepare(ctx, r, w); err != nil {
		return fail(fmt.Errorf("store: prepare statements: %w", err))
	}
	return db, nil
}

// maxReaders is the read connections' budget; with the writer, a DB holds at
// most maxReaders+1 SQLite handles, however many requests and websockets wait.
const maxReaders = 6

// storetest's raw-SQL helpers reach the pool through testpool, which only
// packages under internal/store can import.
func init() {
	testpool.Of = func(db any) *sql.DB { return db.(*DB).pool }
	testpool.Writer = func(db any) *sql.DB { return db.(*DB).w }
}

// Close releases the prepared statements and the connections, the writer last:
// SQLite checkpoints and removes the WAL file when the last connection closes.
func (db *DB) Close() error {
	db.stmts.close()
	db.wstmts.Range(func(_, st any) bool {
		st.(*sql.Stmt).Close()
		return true
	})
	err := db.pool.Close()
	if werr := db.w.Close(); err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.PingContext(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// VecVersion returns the version of the bundled sqlite-vec extension, e.g. "v0.1.9".
func (db *DB) VecVersion(ctx context.Context) (string, error) {
	var v string
	if err := db.pool.QueryRowContext(ctx, `SELECT vec_version()`).Scan(&v); err != nil {
		return "", fmt.Errorf("store: vec version: %w", err)
	}
	return v, nil
}

// Checkpoint copies the WAL into the main database file and truncates the WAL.
// Call it after physical deletes (sessions, memories) so that deleted content no
// longer lingers in the -wal file; secure_delete already zeroes freed pages.
// A reader still on an older snapshot makes SQLite give up ("busy" in its
// result, not an error) after busy_timeout; that is retried until ctx ends,
// since returning would leave the deleted text in the WAL.
func (db *DB) Checkpoint(ctx context.Context) error {
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		var busy, logPages, done int
		err := db.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logPages, &done)
		if err != nil && !isBusy(err) {
			return fmt.Errorf("store: checkpoint: %w", storageErr(err))
		}
		if err == nil && busy == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: checkpoint: the WAL is still in use: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (db *DB) now() time.Time {
	if db.Now == nil {
		return time.Now()
	}
	return db.Now()
}

// ms and fromMS convert between time.Time and the stored unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v) }

func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// pingWhileBusy opens the first connection, retrying for up to 5 s while the file is
// locked: switching a new file to WAL takes an exclusive lock that SQLite does not
// wait for through busy_timeout, so a second process (or goroutine) opening the same
// fresh file at that moment gets SQLITE_BUSY at once.
func pingWhileBusy(ctx context.Context, sqlDB *sql.DB) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := sqlDB.PingContext(ctx)
		if err == nil || sqliteCode(err)&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func isUnique(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func isForeignKey(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY }

func isCheck(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_CHECK }

// mustAffect turns "no row matched" into errs.NotFound with msg.
func mustAffect(res sql.Result, msg string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errs.E(errs.NotFound, "%s", msg)
	}
	return nil
}

// nullText stores an empty JSON value as NULL and anything else as TEXT.
func nullText(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
