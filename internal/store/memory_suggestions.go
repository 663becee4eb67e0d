package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// MemorySuggestion is a memory write that extraction proposed and the user has yet
// to accept or reject. Like a Memory, the store never sees its text: Sealed is
// produced and opened by internal/memory.
type MemorySuggestion struct {
	Seq       int64
	ID        string
	OwnerID   int64
	Op        string // add or update
	Kind      string
	TargetID  string // the memory an update replaces ("" for an add)
	Sealed    []byte
	SessionID string // the chat it was proposed in ("" when none)
	SourceSeq *int64 // the user message it came from
	ReplySeq  *int64 // the reply its chip is shown on
	CreatedAt time.Time
	ExpiresAt time.Time
}

const suggestionCols = `seq, id, owner_id, op, kind, target_id, sealed, session_id, source_seq, reply_seq, created_at, expires_at`

func scanSuggestion(row interface{ Scan(...any) error }) (MemorySuggestion, error) {
	var s MemorySuggestion
	var target, session sql.NullString
	var src, reply sql.NullInt64
	var created, expires int64
	err := row.Scan(&s.Seq, &s.ID, &s.OwnerID, &s.Op, &s.Kind, &target, &s.Sealed, &session, &src, &reply, &created, &expires)
	s.TargetID, s.SessionID = target.String, session.String
	if src.Valid {
		s.SourceSeq = &src.Int64
	}
	if reply.Valid {
		s.ReplySeq = &reply.Int64
	}
	s.CreatedAt, s.ExpiresAt = fromMS(created), fromMS(expires)
	return s, err
}

func nullSeq(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// InsertMemorySuggestion stores s; ID, OwnerID, Op, Kind, Sealed and ExpiresAt must
// be set, CreatedAt defaults to now.
func (db *DB) InsertMemorySuggestion(ctx context.Context, s *MemorySuggestion) error {
	if s.CreatedAt.IsZero() {
		s.CreatedAt = db.now()
	}
	err := db.writeRow(ctx, `INSERT INTO memory_suggestions (id, owner_id, op, kind, target_id, sealed,
		session_id, source_seq, reply_seq, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
		[]any{s.ID, s.OwnerID, s.Op, s.Kind, nullString(s.TargetID), s.Sealed, nullString(s.SessionID),
			nullSeq(s.SourceSeq), nullSeq(s.ReplySeq), ms(s.CreatedAt), ms(s.ExpiresAt)}, &s.Seq)
	if isCheck(err) {
		return fmt.Errorf("store: insert memory suggestion: %w", errs.Wrap(errs.Invalid, err, "invalid memory suggestion"))
	}
	if err != nil {
		return fmt.Errorf("store: insert memory suggestion: %w", err)
	}
	return nil
}

// MemorySuggestionByID returns owner's unexpired suggestion id; another owner's is
// errs.NotFound, exactly like a missing or expired one.
func (db *DB) MemorySuggestionByID(ctx context.Context, owner int64, id string) (MemorySuggestion, error) {
	s, err := scanSuggestion(db.pool.QueryRowContext(ctx, `SELECT `+suggestionCols+` FROM memory_suggestions
		WHERE owner_id = ? AND id = ? AND expires_at > ?`, owner, id, ms(db.now())))
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("store: memory suggestion: %w", errs.E(errs.NotFound, "suggestion not found"))
	}
	if err != nil {
		return s, fmt.Errorf("store: memory suggestion: %w", err)
	}
	return s, nil
}

// ListMemorySuggestions returns owner's unexpired suggestions, oldest first; only
// those of sessionID when it is not "".
func (db *DB) ListMemorySuggestions(ctx context.Context, owner int64, sessionID string) ([]MemorySuggestion, error) {
	q := `SELECT ` + suggestionCols + ` FROM memory_suggestions WHERE owner_id = ? AND expires_at > ?`
	args := []any{owner, ms(db.now())}
	if sessionID != "" {
		q += ` AND session_id = ?`
		args = append(args, sessionID)
	}
	rows, err := db.pool.QueryContext(ctx, q+` ORDER BY created_at, seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: memory suggestions: %w", err)
	}
	defer rows.Close()
	var out []MemorySuggestion
	for rows.Next() {
		s, err := scanSuggestion(rows)
		if err != nil {
			return nil, fmt.Errorf("store: memory suggestions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: memory suggestions: %w", err)
	}
	return out, nil
}

// DeleteMemorySuggestion removes owner's suggestion id and checkpoints the WAL (its
// sealed text leaves both files). Another owner's id is errs.NotFound.
func (db *DB) DeleteMemorySuggestion(ctx context.Context, owner int64, id string) error {
	res, err := db.exec(ctx, `DELETE FROM memory_suggestions WHERE owner_id = ? AND id = ?`, owner, id)
	if err != nil {
		return fmt.Errorf("store: delete memory suggestion: %w", err)
	}
	if err := mustAffect(res, "suggestion not found"); err != nil {
		return fmt.Errorf("store: delete memory suggestion: %w", err)
	}
	return db.Checkpoint(ctx)
}

// DeleteOwnerMemorySuggestions removes all of owner's suggestions and returns how
// many there were.
func (db *DB) DeleteOwnerMemorySuggestions(ctx context.Context, owner int64) (int, error) {
	res, err := db.exec(ctx, `DELETE FROM memory_suggestions WHERE owner_id = ?`, owner)
	if err != nil {
		return 0, fmt.Errorf("store: delete memory suggestions: %w", err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return 0, nil
	}
	return int(n), db.Checkpoint(ctx)
}

// PurgeExpiredMemorySuggestions removes every owner's expired suggestions.
func (db *DB) PurgeExpiredMemorySuggestions(ctx context.Context) (int, error) {
	res, err := db.exec(ctx, `DELETE FROM memory_suggestions WHERE expires_at <= ?`, ms(db.now()))
	if err != nil {
		return 0, fmt.Errorf("store: purge memory suggestions: %w", err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return 0, nil
	}
	return int(n), db.Checkpoint(ctx)
}
