-- 0003: one reply at a time per session, across processes. A run holds the lease and
-- renews it while it lives; a lease left by a crashed process expires and is taken over.
CREATE TABLE session_leases (
	session_id TEXT    PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	holder     TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
