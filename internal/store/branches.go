package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"atrium/internal/errs"
)

// Branches (migration 0033). A message can have versions: an edited user message, a
// regenerated or retried reply. Versions of one point share their parent; the branch on
// screen is the active rows, read in seq order. Every write here moves the branch in one
// transaction and re-picks the rolling summary that covers the new branch, and its task. The caller
// holds the session's lease (one reply at a time) and has checked ownership.

// Versions says where a message stands among its versions: Index (1-based) of Count,
// and the ids of the previous and next versions (0 at either end).
type Versions struct {
	Index, Count int
	Prev, Next   int64
}

// messageNotFound is the answer for a message that is missing or in another chat.
const messageNotFound = "Message not found."

// branchRow is what a branch move reads of a message.
type branchRow struct {
	role   string
	seq    int64
	parent int64
	active bool
}

func readBranchRow(ctx context.Context, tx *sql.Tx, sessionID string, id int64) (branchRow, error) {
	var r branchRow
	err := tx.QueryRowContext(ctx, `SELECT role, seq, parent_id, active FROM messages WHERE id = ? AND session_id = ?`,
		id, sessionID).Scan(&r.role, &r.seq, &r.parent, &r.active)
	if errors.Is(err, sql.ErrNoRows) {
		return r, errs.E(errs.NotFound, messageNotFound)
	}
	return r, err
}

// leaveScreen takes the branch on screen from seq on off the screen: the rows at or after
// seq are exactly the one at seq and those below it, since seq grows along a branch.
func leaveScreen(ctx context.Context, tx *sql.Tx, sessionID string, seq int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE messages SET active = 0 WHERE session_id = ? AND active = 1 AND seq >= ?`, sessionID, seq)
	return err
}

// unchoose clears the chosen mark of parent's children (a new version is about to be
// the chosen one).
func unchoose(ctx context.Context, tx *sql.Tx, sessionID string, parent int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE messages SET chosen = 0 WHERE session_id = ? AND parent_id = ? AND chosen = 1`, sessionID, parent)
	return err
}

// pickSummary makes the session's rolling summary the newest one whose watermark is on
// the branch on screen (none: no summary), so that a summary of other versions never
// reaches the context.
func pickSummary(ctx context.Context, tx *sql.Tx, sessionID string) error {
	_, err := tx.ExecContext(ctx, `UPDATE sessions SET
		summary = coalesce((SELECT c.summary FROM chat_summaries c JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq
			WHERE c.session_id = ?1 AND m.active = 1 ORDER BY c.seq DESC LIMIT 1), ''),
		summary_seq = coalesce((SELECT c.seq FROM chat_summaries c JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq
			WHERE c.session_id = ?1 AND m.active = 1 ORDER BY c.seq DESC LIMIT 1), 0)
		WHERE id = ?1`, sessionID)
	return err
}

// pickTask makes the session's task the one of the branch on screen: the newest
// recorded on it. A chat with none recorded (from before migration 0033) keeps its task.
func pickTask(ctx context.Context, tx *sql.Tx, sessionID string) error {
	_, err := tx.ExecContext(ctx, `UPDATE sessions SET state = coalesce((SELECT task_state FROM messages
		WHERE session_id = ?1 AND active = 1 AND task_state IS NOT NULL ORDER BY seq DESC LIMIT 1), state) WHERE id = ?1`, sessionID)
	return err
}

// moved re-picks what follows the branch on screen: its summary and its task.
func moved(ctx context.Context, tx *sql.Tx, sessionID string) error {
	if err := pickSummary(ctx, tx, sessionID); err != nil {
		return err
	}
	return pickTask(ctx, tx, sessionID)
}

// EditUserMessage stores m (a user message of the same session) as a new version of
// user message id, in one transaction: id and everything after it on screen leave the
// screen, and m takes id's place (same parent, next seq) with copies of id's attached
// files; the old version stays, one flip away. It sets m's ID, Seq, ParentID and timestamps. A missing id or one of
// another chat is errs.NotFound; a message that is not the user's, or not on screen,
// errs.Invalid. Nothing is written on error.
func (db *DB) EditUserMessage(ctx context.Context, id int64, m *Message) error {
	if err := validMessage(m); err != nil {
		return fmt.Errorf("store: edit message: %w", err)
	}
	if m.Role != RoleUser {
		return fmt.Errorf("store: edit message: %w", errs.E(errs.Invalid, "a new version of a user message must be a user message"))
	}
	now := ms(db.now())
	var newID, seq, parent int64
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		old, err := readBranchRow(ctx, tx, m.SessionID, id)
		if err != nil {
			return err
		}
		if old.role != RoleUser {
			return errs.E(errs.Invalid, "Only your own messages can be edited.")
		}
		if !old.active {
			return errs.E(errs.Invalid, "That version is no longer on screen; reload the chat.")
		}
		if err := leaveScreen(ctx, tx, m.SessionID, old.seq); err != nil {
			return err
		}
		if err := unchoose(ctx, tx, m.SessionID, old.parent); err != nil {
			return err
		}
		// The new version starts from the task the old one started from (with the branch
		// before it, none for the first message: its own record is the one to go by).
		if err := moved(ctx, tx, m.SessionID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET state = coalesce((SELECT task_state FROM messages WHERE id = ?), state)
			WHERE id = ?`, id, m.SessionID); err != nil {
			return err
		}
		if newID, seq, parent, err = db.insertInTx(ctx, tx, m, now); err != nil {
			return err
		}
		if parent != old.parent {
			return fmt.Errorf("new version's parent %d is not the old one's %d", parent, old.parent)
		}
		// An edit changes the words, not the files sent with them: the new version
		// carries copies of the old one's (the old version keeps its own, one flip away).
		return copyAttachments(ctx, tx, id, newID, m.SessionID)
	})
	if err != nil {
		return fmt.Errorf("store: edit message: %w", err)
	}
	m.ID, m.Seq, m.ParentID = newID, seq, parent
	m.CreatedAt, m.UpdatedAt = fromMS(now), fromMS(now)
	return nil
}

// copyAttachments gives message to of chat sessionID copies of the files of message
// from, in their upload order (an edit, a fork).
func copyAttachments(ctx context.Context, tx *sql.Tx, from, to int64, sessionID string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO attachments (id, owner_id, session_id, message_id, name, kind, mime, size, width, height, tokens, data, created_at)
		SELECT lower(hex(randomblob(16))), owner_id, ?, ?, name, kind, mime, size, width, height, tokens, data, created_at
		FROM attachments WHERE message_id = ? ORDER BY rowid`, sessionID, to, from)
	return err
}

// insertInTx appends m at the end of the branch on screen and bumps its session.
func (db *DB) insertInTx(ctx context.Context, tx *sql.Tx, m *Message, now int64) (id, seq, parent int64, err error) {
	res, err := tx.StmtContext(ctx, db.stmts.touchSession).ExecContext(ctx, now, m.SessionID)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := mustAffect(res, sessionNotFound); err != nil {
		return 0, 0, 0, err
	}
	err = tx.StmtContext(ctx, db.stmts.insertMsg).QueryRowContext(ctx, m.SessionID, m.Role, m.Content, m.Reasoning, nullText(m.ToolCalls),
		m.ToolCallID, m.Status, m.Error, m.Model, m.Tokens, now, m.Duration.Milliseconds(), strings.Join(m.Memories, ","),
		strings.Join(m.Saved, ","), m.RunID, m.CallKey).Scan(&id, &seq, &parent)
	if isCheck(err) {
		err = errs.Wrap(errs.Invalid, err, "invalid message (tool calls must be JSON)")
	}
	return id, seq, parent, err
}

// BranchReply makes room for a new version of the reply that holds assistant message
// id (Regenerate, or Retry after an error or a stop), in one transaction: the reply,
// from the first message after its turn's user message, and everything after it leave
// the screen, so the next message appended (the new reply) is a version of it. It
// returns the turn's user message, which the new reply answers, and where the new reply
// will stand among the versions (the last one). A missing id or one of
// another chat is errs.NotFound; one that is not an assistant message, not on screen,
// or answers no user message, errs.Invalid. Nothing is written on error.
func (db *DB) BranchReply(ctx context.Context, sessionID string, id int64) (Message, Versions, error) {
	var user Message
	var next Versions
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		x, err := readBranchRow(ctx, tx, sessionID, id)
		if err != nil {
			return err
		}
		if x.role != RoleAssistant {
			return errs.E(errs.Invalid, "Only a reply can be regenerated.")
		}
		if !x.active {
			return errs.E(errs.Invalid, "That version is no longer on screen; reload the chat.")
		}
		user, err = scanMessage(tx.QueryRowContext(ctx, `SELECT `+messageCols+` FROM messages
			WHERE session_id = ? AND active = 1 AND role = 'user' AND seq < ? ORDER BY seq DESC LIMIT 1`, sessionID, x.seq))
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.Invalid, "This reply answers no message, so it cannot be regenerated.")
		}
		if err != nil {
			return err
		}
		var first int64
		if err := tx.QueryRowContext(ctx, `SELECT min(seq) FROM messages WHERE session_id = ? AND active = 1 AND seq > ?`,
			sessionID, user.Seq).Scan(&first); err != nil {
			return err
		}
		if err := leaveScreen(ctx, tx, sessionID, first); err != nil {
			return err
		}
		if err := unchoose(ctx, tx, sessionID, user.ID); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(max(id), 0) FROM messages WHERE session_id = ? AND parent_id = ?`,
			sessionID, user.ID).Scan(&next.Count, &next.Prev); err != nil {
			return err
		}
		next.Count++
		next.Index = next.Count
		return moved(ctx, tx, sessionID)
	})
	if err != nil {
		return Message{}, Versions{}, fmt.Errorf("store: branch reply: %w", err)
	}
	return user, next, nil
}

// SelectVersion puts version id of a message on screen in place of the version shown,
// with the later turns last shown below it (each point keeps its chosen version), in one
// transaction. Selecting the version on screen changes nothing. A missing id or one of
// another chat is errs.NotFound; a version of a message that is not on screen is
// errs.Invalid.
func (db *DB) SelectVersion(ctx context.Context, sessionID string, id int64) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		b, err := readBranchRow(ctx, tx, sessionID, id)
		if err != nil || b.active {
			return err
		}
		if b.parent != 0 {
			var parentActive bool
			err := tx.QueryRowContext(ctx, `SELECT active FROM messages WHERE id = ? AND session_id = ?`, b.parent, sessionID).Scan(&parentActive)
			if err != nil {
				return err
			}
			if !parentActive {
				return errs.E(errs.Invalid, "That version is not on screen; reload the chat.")
			}
		}
		var shown sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT min(seq) FROM messages WHERE session_id = ? AND parent_id = ? AND active = 1`,
			sessionID, b.parent).Scan(&shown); err != nil {
			return err
		}
		if shown.Valid {
			if err := leaveScreen(ctx, tx, sessionID, shown.Int64); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE messages SET chosen = (id = ?3) WHERE session_id = ?1 AND parent_id = ?2`,
			sessionID, b.parent, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE messages SET active = 1 WHERE id IN (
			WITH RECURSIVE branch(id) AS (
				SELECT ?2
				UNION ALL
				SELECT m.id FROM messages m JOIN branch ON m.session_id = ?1 AND m.parent_id = branch.id AND m.chosen = 1
			) SELECT id FROM branch)`, sessionID, id); err != nil {
			return err
		}
		return moved(ctx, tx, sessionID)
	})
	if err != nil {
		return fmt.Errorf("store: select version: %w", err)
	}
	return nil
}

// MessageVersions returns, for each of msgs (messages of the session on screen) that
// has other versions, where it stands among them; the others are absent.
func (db *DB) MessageVersions(ctx context.Context, sessionID string, msgs []Message) (map[int64]Versions, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	parents := make([]any, 0, len(msgs)+1)
	parents = append(parents, sessionID)
	seen := map[int64]bool{}
	for _, m := range msgs {
		if !seen[m.ParentID] {
			seen[m.ParentID] = true
			parents = append(parents, m.ParentID)
		}
	}
	rows, err := db.pool.QueryContext(ctx, `SELECT parent_id, id FROM messages WHERE session_id = ?1 AND parent_id IN (?`+
		strings.Repeat(", ?", len(parents)-2)+`) ORDER BY parent_id, seq`, parents...)
	if err != nil {
		return nil, fmt.Errorf("store: message versions: %w", err)
	}
	defer rows.Close()
	siblings := map[int64][]int64{}
	for rows.Next() {
		var parent, id int64
		if err := rows.Scan(&parent, &id); err != nil {
			return nil, fmt.Errorf("store: message versions: %w", err)
		}
		siblings[parent] = append(siblings[parent], id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: message versions: %w", err)
	}
	out := map[int64]Versions{}
	for _, m := range msgs {
		ids := siblings[m.ParentID]
		if len(ids) < 2 {
			continue
		}
		for i, id := range ids {
			if id != m.ID {
				continue
			}
			v := Versions{Index: i + 1, Count: len(ids)}
			if i > 0 {
				v.Prev = ids[i-1]
			}
			if i+1 < len(ids) {
				v.Next = ids[i+1]
			}
			out[m.ID] = v
		}
	}
	return out, nil
}
