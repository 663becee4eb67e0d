// Package testpool hands the store's unexported connection pool to storetest's
// raw-SQL helpers. Being internal to internal/store, it cannot be imported from
// outside it, so production code still has no way to the pool.
package testpool

import "database/sql"

// Of returns the pool of a *store.DB; package store sets it in init.
var Of func(db any) *sql.DB

// Writer returns the writer connection's pool of a *store.DB (one connection),
// for tests that set a per-connection pragma on it.
var Writer func(db any) *sql.DB
