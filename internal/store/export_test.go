package store

import "database/sql"

// SQLForTest is the pool, for this package's tests that check pragmas, plans
// and raw rows. Other packages' tests use storetest.
func (db *DB) SQLForTest() *sql.DB { return db.pool }
