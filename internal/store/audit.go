package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// Audit actions: what an admin did to a user's memories, or runs.
const (
	AuditReveal    = "reveal"
	AuditDelete    = "delete"
	AuditDeleteAll = "delete-all"
	AuditRevealRun = "reveal-run" // detail: the run id
)

// AuditEntry is one line of the audit log. Detail is a count, memory ids or a
// run id, never memory text. ActorName is filled by reads ("" once the actor's account
// is deleted, when ActorID is 0).
type AuditEntry struct {
	ID        int64
	At        time.Time
	ActorID   int64
	ActorName string
	SubjectID int64
	Action    string
	Detail    string
}

func validAuditAction(a string) bool {
	return a == AuditReveal || a == AuditDelete || a == AuditDeleteAll || a == AuditRevealRun
}

// AddAudit appends e to the audit log and sets its ID and At (now).
func (db *DB) AddAudit(ctx context.Context, e *AuditEntry) error {
	if !validAuditAction(e.Action) {
		return fmt.Errorf("store: add audit: %w", errs.E(errs.Invalid, "unknown audit action %q", e.Action))
	}
	at := db.now()
	err := db.writeRow(ctx, `INSERT INTO audit_log (at, actor_id, subject_id, action, detail)
		VALUES (?, ?, ?, ?, ?) RETURNING id`, []any{ms(at), e.ActorID, e.SubjectID, e.Action, e.Detail}, &e.ID)
	if err != nil {
		return fmt.Errorf("store: add audit: %w", err)
	}
	e.At = fromMS(ms(at))
	return nil
}

// AuditAbout returns the newest limit entries whose subject is user, newest first.
func (db *DB) AuditAbout(ctx context.Context, subject int64, limit int) ([]AuditEntry, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT a.id, a.at, a.actor_id, u.username, a.subject_id, a.action, a.detail
		FROM audit_log a LEFT JOIN users u ON u.id = a.actor_id
		WHERE a.subject_id = ? ORDER BY a.at DESC, a.id DESC LIMIT ?`, subject, limit)
	if err != nil {
		return nil, fmt.Errorf("store: audit: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var actor sql.NullInt64
		var name sql.NullString
		if err := rows.Scan(&e.ID, &at, &actor, &name, &e.SubjectID, &e.Action, &e.Detail); err != nil {
			return nil, fmt.Errorf("store: audit: %w", err)
		}
		e.At, e.ActorID, e.ActorName = fromMS(at), actor.Int64, name.String
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: audit: %w", err)
	}
	return out, nil
}
