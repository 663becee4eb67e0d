-- 0009: the audit log of what admins did to a user's memories (reveal, delete,
-- delete-all). detail never holds memory text: only a count or memory ids.
-- An entry goes with its subject (deleting a user deletes what was done to
-- them); it outlives its actor, whose id becomes NULL, so a user still sees that
-- someone looked.
CREATE TABLE audit_log (
	id         INTEGER PRIMARY KEY,
	at         INTEGER NOT NULL,
	actor_id   INTEGER REFERENCES users (id) ON DELETE SET NULL,
	subject_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	action     TEXT    NOT NULL CHECK (action IN ('reveal', 'delete', 'delete-all')),
	detail     TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX audit_log_subject ON audit_log (subject_id, at);
