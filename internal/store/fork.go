package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"atrium/internal/errs"
)

// branchTo is a CTE, "branch(id)": message ?2 of session ?1 and the messages before it
// in its branch, on screen or not.
const branchTo = `WITH RECURSIVE branch(id) AS (
		SELECT id FROM messages WHERE session_id = ?1 AND seq = ?2
		UNION ALL
		SELECT m.parent_id FROM messages m JOIN branch ON m.id = branch.id WHERE m.parent_id <> 0
	) `

// LastUserSeq returns the seq of the last user message of session sessionID at or
// before message seq in its branch: the user turn a model step at that point of the
// chat answered, whichever version is on screen now. None is errs.NotFound. Ownership
// is the caller's check.
func (db *DB) LastUserSeq(ctx context.Context, sessionID string, seq int64) (int64, error) {
	var got int64
	err := db.pool.QueryRowContext(ctx, branchTo+`SELECT m.seq FROM branch JOIN messages m ON m.id = branch.id
		WHERE m.role = 'user' ORDER BY m.seq DESC LIMIT 1`, sessionID, seq).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: last user message: %w", errs.E(errs.NotFound, "no user message at or before %d", seq))
	}
	if err != nil {
		return 0, fmt.Errorf("store: last user message: %w", err)
	}
	return got, nil
}

// ForkSession creates dst (its ID, title and model set by the caller; owner and
// temporary taken from the source) as a copy of owner's session srcID up to and
// including message seq upTo, in one transaction: upTo's branch (the versions that led
// to it, whether on screen now or not; the fork has no other versions) keeps its seqs,
// roles, texts, tool calls, attached files and the memories they used. The newest rolling summary of
// that branch that covers no message past upTo comes along (it summarises copied
// messages only); the task state and "undo remember" marks stay with the source, which they
// describe. A source that is missing or not owner's is errs.NotFound, as is an upTo
// with no message.
func (db *DB) ForkSession(ctx context.Context, owner int64, srcID string, upTo int64, dst *Session) error {
	src, err := db.SessionForOwner(ctx, srcID, owner)
	if err != nil {
		return fmt.Errorf("store: fork session: %w", err)
	}
	if dst.ID == "" || dst.ID == srcID {
		return fmt.Errorf("store: fork session: %w", errs.E(errs.Invalid, "the fork needs a new session id"))
	}
	dst.OwnerID, dst.Temporary, dst.State = owner, src.Temporary, []byte("{}")
	dst.SystemPrompt, dst.TitleSource = src.SystemPrompt, TitleByUser // the fork answers as the source did
	dst.Summary, dst.SummarySeq = "", 0
	now := ms(db.now())
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, branchTo+`SELECT c.summary, c.seq FROM branch JOIN messages m ON m.id = branch.id
			JOIN chat_summaries c ON c.session_id = ?1 AND c.seq = m.seq ORDER BY c.seq DESC LIMIT 1`, srcID, upTo).Scan(&dst.Summary, &dst.SummarySeq)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, owner_id, title, model, state, summary, summary_seq, temporary, system_prompt, created_at, updated_at)
			VALUES (?, ?, ?, ?, '{}', ?, ?, ?, ?, ?, ?)`,
			dst.ID, owner, dst.Title, dst.Model, dst.Summary, dst.SummarySeq, dst.Temporary, dst.SystemPrompt, now, now); err != nil {
			return err
		}
		if err := keepSummary(ctx, tx, dst.ID, dst.Summary, dst.SummarySeq); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, branchTo+`INSERT INTO messages (session_id, seq, role, content, reasoning, tool_calls, tool_call_id,
				call_key, status, error, model, tokens, duration_ms, memories, saved_memories, created_at, updated_at)
			SELECT ?3, seq, role, content, reasoning, tool_calls, tool_call_id, call_key, status, error, model, tokens, duration_ms,
				memories, '', created_at, ?4
			FROM messages WHERE id IN (SELECT id FROM branch) ORDER BY seq`, srcID, upTo, dst.ID, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, errs.E(errs.NotFound, "no messages to fork"))
		}
		// A call key names its step message by id ("atrium_<id>_<index>"), and the copies
		// have new ids: point each copied result at the copy of its step (same seq).
		_, err = tx.ExecContext(ctx, `UPDATE messages SET call_key = COALESCE('atrium_' || (
				SELECT n.id FROM messages n JOIN messages o ON o.seq = n.seq AND o.session_id = ?2
				WHERE n.session_id = ?1
					AND o.id = CAST(substr(messages.call_key, 8, instr(substr(messages.call_key, 8), '_') - 1) AS INTEGER)
			) || substr(call_key, 7 + instr(substr(call_key, 8), '_')), '')
			WHERE session_id = ?1 AND call_key LIKE 'atrium\_%' ESCAPE '\'`, dst.ID, srcID)
		if err != nil {
			return err
		}
		// The copied messages carry their files: a message of files alone would be empty.
		rows, err := tx.QueryContext(ctx, `SELECT o.id, n.id FROM messages n JOIN messages o ON o.session_id = ?2 AND o.seq = n.seq
			WHERE n.session_id = ?1 AND n.role = 'user' AND EXISTS (SELECT 1 FROM attachments WHERE message_id = o.id)`, dst.ID, srcID)
		if err != nil {
			return err
		}
		var pairs [][2]int64
		for rows.Next() {
			var p [2]int64
			if err := rows.Scan(&p[0], &p[1]); err != nil {
				rows.Close()
				return err
			}
			pairs = append(pairs, p)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, p := range pairs {
			if err := copyAttachments(ctx, tx, p[0], p[1], dst.ID); err != nil {
				return err
			}
		}
		return linkBranch(ctx, tx, dst.ID)
	})
	if isUnique(err) {
		return fmt.Errorf("store: fork session: %w", errs.Wrap(errs.Conflict, err, "session already exists"))
	}
	if err != nil {
		return fmt.Errorf("store: fork session: %w", err)
	}
	dst.CreatedAt, dst.UpdatedAt = fromMS(now), fromMS(now)
	return nil
}

// linkBranch links the messages of a chat written as one branch (a fork, an import):
// each one's parent is the message before it.
func linkBranch(ctx context.Context, tx *sql.Tx, sessionID string) error {
	_, err := tx.ExecContext(ctx, `UPDATE messages SET parent_id = coalesce((SELECT p.id FROM messages p
		WHERE p.session_id = ?1 AND p.seq < messages.seq ORDER BY p.seq DESC LIMIT 1), 0) WHERE session_id = ?1`, sessionID)
	return err
}
