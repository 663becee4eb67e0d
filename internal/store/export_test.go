package store

import "database/sql"

// SQLForTest is the pool, for this package's tests that check pragmas, plans
// and raw rows. Other packages' tests use storetest.
func (db *DB) SQLForTest() *sql.DB { return db.pool }

// DropConnsForTest closes every idle connection, the writer last, so that the
// next query and write open new ones (SQLite reuses a closed connection's file
// descriptor while another connection holds a lock on the file).
func DropConnsForTest(db *DB) {
	db.pool.SetMaxIdleConns(0)
	db.pool.SetMaxIdleConns(maxReaders)
	db.discardWriter()
}

// LatestSpanQueryForTest is LatestSpanData's SQL, for a test of its plan.
const LatestSpanQueryForTest = latestSpanQuery
