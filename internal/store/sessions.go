package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Session is one conversation. State is a JSON document (the session's working
// memory, "{}" when empty); Summary is the rolling summary of the messages up to
// and including SummarySeq.
type Session struct {
	ID         string
	OwnerID    int64
	Title      string
	Model      string
	State      []byte
	Summary    string
	SummarySeq int64
	Temporary  bool // neither reads nor writes long-term memory
	// SystemPrompt is this chat's own instructions, added to the pinned zone.
	SystemPrompt string
	TitleSource  string // TitleByUser, TitleFromMessage or TitleByModel
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

const sessionCols = `id, owner_id, title, model, state, summary, summary_seq, temporary, system_prompt, title_source, created_at, updated_at`

func scanSession(row scanner) (Session, error) {
	var s Session
	var state string
	var created, updated int64
	err := row.Scan(&s.ID, &s.OwnerID, &s.Title, &s.Model, &state, &s.Summary, &s.SummarySeq, &s.Temporary, &s.SystemPrompt, &s.TitleSource, &created, &updated)
	s.State = []byte(state)
	s.CreatedAt, s.UpdatedAt = fromMS(created), fromMS(updated)
	return s, err
}

const sessionNotFound = "session not found"

// CreateSession inserts s; the caller supplies s.ID (a UUID). Timestamps are set
// from Now and an empty State becomes "{}". A taken ID is errs.Conflict, an
// unknown owner errs.NotFound, State that is not JSON errs.Invalid.
func (db *DB) CreateSession(ctx context.Context, s *Session) error {
	if s.ID == "" {
		return fmt.Errorf("store: create session: %w", errs.E(errs.Invalid, "session id is required"))
	}
	if len(s.State) == 0 {
		s.State = []byte("{}")
	}
	now := ms(db.now())
	_, err := db.exec(ctx, `INSERT INTO sessions (id, owner_id, title, model, state, summary, summary_seq, temporary, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.OwnerID, s.Title, s.Model, string(s.State), s.Summary, s.SummarySeq, s.Temporary, now, now)
	switch {
	case isUnique(err):
		return fmt.Errorf("store: create session: %w", errs.Wrap(errs.Conflict, err, "session already exists"))
	case isForeignKey(err):
		return fmt.Errorf("store: create session: %w", errs.Wrap(errs.NotFound, err, "user not found"))
	case isCheck(err):
		return fmt.Errorf("store: create session: %w", errs.Wrap(errs.Invalid, err, "session state must be JSON"))
	case err != nil:
		return fmt.Errorf("store: create session: %w", err)
	}
	s.CreatedAt, s.UpdatedAt = fromMS(now), fromMS(now)
	return nil
}

// SessionForOwner returns session id if owner owns it. A missing session and
// someone else's session are the same errs.NotFound.
func (db *DB) SessionForOwner(ctx context.Context, id string, owner int64) (Session, error) {
	s, err := scanSession(db.pool.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ? AND owner_id = ?`, id, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("store: session for owner: %w", errs.E(errs.NotFound, sessionNotFound))
	}
	if err != nil {
		return Session{}, fmt.Errorf("store: session for owner: %w", err)
	}
	return s, nil
}

// SessionCursor marks a position in ListSessions' order (UpdatedAt descending,
// then ID ascending). Its String form is opaque and URL-safe.
type SessionCursor struct {
	UpdatedAt time.Time
	ID        string
}

// String encodes the cursor for a URL; ParseSessionCursor reverses it.
func (c SessionCursor) String() string {
	raw := strconv.FormatInt(c.UpdatedAt.UnixMilli(), 10) + "." + c.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseSessionCursor decodes a cursor made by SessionCursor.String. Anything else
// is errs.Invalid.
func ParseSessionCursor(s string) (SessionCursor, error) {
	bad := errs.E(errs.Invalid, "invalid page cursor")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return SessionCursor{}, bad
	}
	msPart, id, ok := strings.Cut(string(raw), ".")
	if !ok || id == "" {
		return SessionCursor{}, bad
	}
	v, err := strconv.ParseInt(msPart, 10, 64)
	if err != nil {
		return SessionCursor{}, bad
	}
	return SessionCursor{UpdatedAt: fromMS(v), ID: id}, nil
}

// Page size bounds for ListSessions.
const (
	DefaultSessionPage = 50
	MaxSessionPage     = 200
)

// ListSessions returns owner's sessions, most recently updated first, starting
// after the cursor (nil: from the top). limit <= 0 means DefaultSessionPage and is
// capped at MaxSessionPage. next is the cursor for the following page, nil when
// there is none.
func (db *DB) ListSessions(ctx context.Context, owner int64, after *SessionCursor, limit int) (sessions []Session, next *SessionCursor, err error) {
	if limit <= 0 {
		limit = DefaultSessionPage
	}
	limit = min(limit, MaxSessionPage)
	var rows *sql.Rows
	if after == nil {
		rows, err = db.pool.QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions
			WHERE owner_id = ?
			ORDER BY updated_at DESC, id ASC LIMIT ?`, owner, limit+1)
	} else {
		at := ms(after.UpdatedAt)
		rows, err = db.pool.QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions
			WHERE owner_id = ? AND (updated_at < ? OR (updated_at = ? AND id > ?))
			ORDER BY updated_at DESC, id ASC LIMIT ?`, owner, at, at, after.ID, limit+1)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: list sessions: %w", err)
	}
	if sessions, err = scanAll(rows, scanSession); err != nil {
		return nil, nil, fmt.Errorf("store: list sessions: %w", err)
	}
	if len(sessions) > limit {
		sessions = sessions[:limit]
		last := sessions[limit-1]
		next = &SessionCursor{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	return sessions, next, nil
}

// updateSession runs one owner-scoped UPDATE; no match is errs.NotFound.
func (db *DB) updateSession(ctx context.Context, op, set string, id string, owner int64, args ...any) error {
	args = append(args, ms(db.now()), id, owner)
	res, err := db.exec(ctx, `UPDATE sessions SET `+set+`, updated_at = ? WHERE id = ? AND owner_id = ?`, args...)
	if isCheck(err) {
		err = errs.Wrap(errs.Invalid, err, "session state must be JSON")
	}
	if err == nil {
		err = mustAffect(res, sessionNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

// RenameSession sets the title and bumps UpdatedAt. Missing or foreign is
// errs.NotFound.
func (db *DB) RenameSession(ctx context.Context, id string, owner int64, title string) error {
	return db.updateSession(ctx, "rename session", "title = ?, title_source = 'user'", id, owner, title)
}

// SetSessionModel sets the model used for the next reply and bumps UpdatedAt.
// Missing or foreign is errs.NotFound.
func (db *DB) SetSessionModel(ctx context.Context, id string, owner int64, model string) error {
	return db.updateSession(ctx, "set session model", "model = ?", id, owner, model)
}

// SetSessionState replaces the working-memory JSON and bumps UpdatedAt, and records it
// on the newest message on screen, so that the branch keeps its task when the user
// flips away and back (see pickTask). Missing or foreign is errs.NotFound; invalid JSON
// errs.Invalid.
func (db *DB) SetSessionState(ctx context.Context, id string, owner int64, state []byte) error {
	if len(state) == 0 {
		state = []byte("{}")
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET state = ?, updated_at = ? WHERE id = ? AND owner_id = ?`,
			string(state), ms(db.now()), id, owner)
		if isCheck(err) {
			return errs.Wrap(errs.Invalid, err, "session state must be JSON")
		}
		if err == nil {
			err = mustAffect(res, sessionNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE messages SET task_state = ?1 WHERE id =
			(SELECT id FROM messages WHERE session_id = ?2 AND active = 1 ORDER BY seq DESC LIMIT 1)`, string(state), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: set session state: %w", err)
	}
	return nil
}

// SetSessionSummary stores the rolling summary covering the branch on screen up to
// and including message seq, and bumps UpdatedAt. Missing or foreign is errs.NotFound.
func (db *DB) SetSessionSummary(ctx context.Context, id string, owner int64, summary string, seq int64) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET summary = ?, summary_seq = ?, updated_at = ? WHERE id = ? AND owner_id = ?`,
			summary, seq, ms(db.now()), id, owner)
		if err == nil {
			err = mustAffect(res, sessionNotFound)
		}
		if err == nil {
			err = keepSummary(ctx, tx, id, summary, seq)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: set session summary: %w", err)
	}
	return nil
}

// keepSummary records a summary under its watermark, for when the branch moves back to
// it (see pickSummary). A summary of no message (seq 0) is none.
func keepSummary(ctx context.Context, tx *sql.Tx, sessionID, summary string, seq int64) error {
	if seq <= 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO chat_summaries (session_id, seq, summary) VALUES (?, ?, ?)
		ON CONFLICT (session_id, seq) DO UPDATE SET summary = excluded.summary`, sessionID, seq, summary)
	return err
}

// DeleteSession physically deletes the session and, by cascade, its messages,
// runs and spans, then checkpoints the WAL: secure_delete zeroes the freed
// pages, but until a checkpoint the WAL still holds the old ones, text and all.
// Missing or foreign is errs.NotFound.
func (db *DB) DeleteSession(ctx context.Context, id string, owner int64) error {
	res, err := db.exec(ctx, `DELETE FROM sessions WHERE id = ? AND owner_id = ?`, id, owner)
	if err == nil {
		err = mustAffect(res, sessionNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: delete session: %w", err)
	}
	return db.Checkpoint(ctx)
}

// AdvanceSessionSummary records summary as the rolling summary of the branch up to and
// including message seq (the watermark), and makes it the session's summary only if seq
// is past the current watermark and still on the branch on screen, so that summaries
// folded concurrently or late never move it back, and a summary of a branch the user
// left never reaches the context. It reports whether it changed the session; it does
// not reorder the sidebar. Another owner's session changes nothing.
func (db *DB) AdvanceSessionSummary(ctx context.Context, id string, owner int64, summary string, seq int64) (bool, error) {
	var changed bool
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE id = ? AND owner_id = ?`, id, owner).Scan(&n); err != nil || n == 0 {
			return err
		}
		if err := keepSummary(ctx, tx, id, summary, seq); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET summary = ?, summary_seq = ?
			WHERE id = ? AND summary_seq < ?
				AND EXISTS (SELECT 1 FROM messages WHERE session_id = ? AND seq = ? AND active = 1)`, summary, seq, id, seq, id, seq)
		if err != nil {
			return err
		}
		rows, err := res.RowsAffected()
		changed = rows == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: advance session summary: %w", err)
	}
	return changed, nil
}
