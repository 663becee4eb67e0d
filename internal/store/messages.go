package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Message statuses.
const (
	StatusComplete = "complete"
	StatusStopped  = "stopped"
	StatusError    = "error"
)

// ReplyInterrupted is the Error of a reply whose run died with its process (kill -9,
// power loss). A streaming reply is stored with it from its first byte (status stopped),
// so whatever was saved survives marked; finishing the reply overwrites the mark.
const ReplyInterrupted = "Interrupted: the server stopped while this reply was being written."

// Message roles; a user's message has role RoleUser ("user").
const (
	RoleSystem    = "system"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one row of a session's transcript. Seq numbers start at 1 and grow
// along a branch; the branch on screen (active rows) has gaps where other versions
// are (see branches.go). Every read here but MessageByID returns the branch on screen. ToolCalls is a JSON array (nil when none). A tool
// result's CallKey is the ToolCallKey of the call it answers: what pairs them.
// ToolCallID is the provider's id for that call, kept for the wire only
// (providers reuse ids: "call_1", "0" or "" every time).
type Message struct {
	ID         int64
	SessionID  string
	Seq        int64
	Role       string
	Content    string
	Reasoning  string
	ToolCalls  []byte
	ToolCallID string
	CallKey    string
	Status     string
	Error      string
	Model      string
	Tokens     int
	Duration   time.Duration // a tool call's run time (millisecond precision)
	Memories   []string      // ids of the long-term memories a reply used
	Saved      []string      // ids of the memories an explicit "remember …" created (on its reply)
	RunID      string        // the run that wrote it ("" for a user's message or one from before 0026)
	// Attachments of a user's message: AppendMessage binds the uploads named by their
	// IDs; LoadContextMessages fills them with their data.
	Attachments []Attachment
	// ParentID is the message before this one in its branch (0: the chat's first);
	// versions of one point share it (see migration 0033).
	ParentID  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

const messageCols = `id, session_id, seq, role, content, reasoning, tool_calls, tool_call_id, call_key, status, error, model, tokens, duration_ms, memories, saved_memories, created_at, updated_at, run_id, parent_id`

// ToolCallKey is the id Atrium gives call index (0-based) of the assistant message
// with id messageID: unique in the database, unlike the provider's call ids, and made
// of [A-Za-z0-9_] so that it is a valid DOM id and a valid call id on any wire.
// Migration 0025 builds the same string in SQL.
func ToolCallKey(messageID int64, index int) string {
	return "atrium_" + strconv.FormatInt(messageID, 10) + "_" + strconv.Itoa(index)
}

// Page size bounds for LatestMessages and MessagesBefore.
const (
	DefaultMessagePage = 50
	MaxMessagePage     = 1000
)

// stmts are the prepared statements of the hot paths.
type stmts struct {
	touchSession *sql.Stmt // bump sessions.updated_at; 0 rows = no such session
	insertMsg    *sql.Stmt // insert with seq = max(seq)+1, returning id, seq
	msgsBefore   *sql.Stmt // newest first, seq < ?, limit ?
	loadContext  *sql.Stmt // LoadContextMessages: newest first, seq > ?, limit ?, the columns the context engine reads
}

// prepare prepares the reads on r and the writes on w (the writer).
func (s *stmts) prepare(ctx context.Context, r, w *sql.DB) error {
	var err error
	prepOn := func(db *sql.DB, q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = db.PrepareContext(ctx, q)
		return st
	}
	prep := func(q string) *sql.Stmt { return prepOn(r, q) }
	s.touchSession = prepOn(w, `UPDATE sessions SET updated_at = ? WHERE id = ?`)
	// A new message goes at the end of the branch on screen: its parent is the last
	// active message. A user message records the task its turn starts from.
	s.insertMsg = prepOn(w, `INSERT INTO messages (session_id, seq, role, content, reasoning, tool_calls, tool_call_id, status, error, model, tokens, duration_ms, memories, saved_memories, created_at, updated_at, run_id, call_key, parent_id, task_state)
		SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?13, ?14, ?11, ?11, ?15, ?16,
			COALESCE((SELECT id FROM messages WHERE session_id = ?1 AND active = 1 ORDER BY seq DESC LIMIT 1), 0),
			CASE WHEN ?2 = 'user' THEN (SELECT state FROM sessions WHERE id = ?1) END
		FROM messages WHERE session_id = ?1
		RETURNING id, seq, parent_id`)
	s.msgsBefore = prep(`SELECT ` + messageCols + ` FROM messages
		WHERE session_id = ? AND active = 1 AND seq < ? ORDER BY seq DESC LIMIT ?`)
	s.loadContext = prep(loadContextQuery)
	return err
}

func (s *stmts) close() {
	for _, st := range []*sql.Stmt{s.touchSession, s.insertMsg, s.msgsBefore, s.loadContext} {
		if st != nil {
			st.Close()
		}
	}
}

func scanMessage(row scanner) (Message, error) {
	var m Message
	var created, updated, durMS int64
	var toolCalls sql.NullString
	var memories, saved string
	err := row.Scan(&m.ID, &m.SessionID, &m.Seq, &m.Role, &m.Content, &m.Reasoning, &toolCalls,
		&m.ToolCallID, &m.CallKey, &m.Status, &m.Error, &m.Model, &m.Tokens, &durMS, &memories, &saved, &created, &updated, &m.RunID, &m.ParentID)
	if memories != "" {
		m.Memories = strings.Split(memories, ",")
	}
	if saved != "" {
		m.Saved = strings.Split(saved, ",")
	}
	m.Duration = time.Duration(durMS) * time.Millisecond
	if toolCalls.Valid {
		m.ToolCalls = []byte(toolCalls.String)
	}
	m.CreatedAt, m.UpdatedAt = fromMS(created), fromMS(updated)
	return m, err
}

func validMessage(m *Message) error {
	switch m.Role {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
	default:
		return errs.E(errs.Invalid, "unknown message role %q", m.Role)
	}
	switch m.Status {
	case "":
		m.Status = StatusComplete
	case StatusComplete, StatusStopped, StatusError:
	default:
		return errs.E(errs.Invalid, "unknown message status %q", m.Status)
	}
	return nil
}

// AppendMessage adds m at the end of its session in one transaction: it takes
// seq = max(seq)+1, inserts, and bumps the session's UpdatedAt. It sets m.ID,
// m.Seq, the timestamps, and Status (empty means StatusComplete). A missing
// session is errs.NotFound; a bad role/status or non-JSON ToolCalls errs.Invalid.
// The caller checks ownership first. Safe for concurrent use: concurrent appends
// to one session get distinct, gapless seqs.
func (db *DB) AppendMessage(ctx context.Context, m *Message) error {
	if err := db.appendMessages(ctx, []*Message{m}); err != nil {
		return fmt.Errorf("store: append message: %w", err)
	}
	return nil
}

// AppendMessages appends msgs in order, all in one transaction, with the same
// contract as AppendMessage; on error nothing is stored and the messages' IDs and
// seqs are left as they were.
func (db *DB) AppendMessages(ctx context.Context, msgs []*Message) error {
	if err := db.appendMessages(ctx, msgs); err != nil {
		return fmt.Errorf("store: append messages: %w", err)
	}
	return nil
}

func (db *DB) appendMessages(ctx context.Context, msgs []*Message) error {
	for _, m := range msgs {
		if err := validMessage(m); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	now := ms(db.now())
	ids := make([]int64, len(msgs))
	seqs := make([]int64, len(msgs))
	parents := make([]int64, len(msgs))
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for i, m := range msgs {
			var err error
			if ids[i], seqs[i], parents[i], err = db.insertInTx(ctx, tx, m, now); err != nil {
				return err
			}
			if len(m.Attachments) > 0 {
				bound := *m
				bound.ID = ids[i]
				if err := bindAttachments(ctx, tx, &bound); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, m := range msgs {
		m.ID, m.Seq, m.ParentID = ids[i], seqs[i], parents[i]
		m.CreatedAt, m.UpdatedAt = fromMS(now), fromMS(now)
	}
	return nil
}

// UpdateMessage rewrites the mutable fields of message m.ID (content, reasoning,
// tool calls, status, error, model, tokens, duration, memories, saved memories) and
// sets m.UpdatedAt; used to finish a reply that was stored while streaming. A missing
// message is errs.NotFound.
func (db *DB) UpdateMessage(ctx context.Context, m *Message) error {
	if err := validMessage(m); err != nil {
		return fmt.Errorf("store: update message: %w", err)
	}
	now := ms(db.now())
	res, err := db.exec(ctx, `UPDATE messages SET content = ?, reasoning = ?, tool_calls = ?, status = ?, error = ?,
		model = ?, tokens = ?, duration_ms = ?, memories = ?, saved_memories = ?, updated_at = ? WHERE id = ?`,
		m.Content, m.Reasoning, nullText(m.ToolCalls), m.Status, m.Error, m.Model, m.Tokens, m.Duration.Milliseconds(),
		strings.Join(m.Memories, ","), strings.Join(m.Saved, ","), now, m.ID)
	if isCheck(err) {
		err = errs.Wrap(errs.Invalid, err, "invalid message (tool calls must be JSON)")
	}
	if err == nil {
		err = mustAffect(res, "message not found")
	}
	if err != nil {
		return fmt.Errorf("store: update message: %w", err)
	}
	m.UpdatedAt = fromMS(now)
	return nil
}

// SaveDraft stores the text streamed so far into reply id, which must still be a draft
// (status stopped with ReplyInterrupted): a late write never overwrites a finished
// reply. It reports whether the draft was still there.
func (db *DB) SaveDraft(ctx context.Context, id int64, content, reasoning string) (bool, error) {
	res, err := db.exec(ctx, `UPDATE messages SET content = ?, reasoning = ?, updated_at = ?
		WHERE id = ? AND status = 'stopped' AND error = ?`, content, reasoning, ms(db.now()), id, ReplyInterrupted)
	if err != nil {
		return false, fmt.Errorf("store: save draft: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: save draft: %w", err)
	}
	return n == 1, nil
}

// LatestMessages returns the last limit messages of the session in ascending seq
// order, and whether older ones exist. limit <= 0 means DefaultMessagePage; it is
// capped at MaxMessagePage. An unknown session yields no messages (ownership is
// the caller's check, via SessionForOwner). A chat page uses LatestTurns instead.
func (db *DB) LatestMessages(ctx context.Context, sessionID string, limit int) (msgs []Message, hasOlder bool, err error) {
	msgs, hasOlder, err = db.messagesBefore(ctx, sessionID, math.MaxInt64, limit)
	if err != nil {
		return nil, false, fmt.Errorf("store: latest messages: %w", err)
	}
	return msgs, hasOlder, nil
}

// MessagesBefore returns the limit messages just before beforeSeq, ascending, and
// whether even older ones exist. Limits as for LatestMessages.
func (db *DB) MessagesBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]Message, bool, error) {
	msgs, hasOlder, err := db.messagesBefore(ctx, sessionID, beforeSeq, limit)
	if err != nil {
		return nil, false, fmt.Errorf("store: messages before: %w", err)
	}
	return msgs, hasOlder, nil
}

func (db *DB) messagesBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]Message, bool, error) {
	msgs, limit, err := db.newestBefore(ctx, sessionID, beforeSeq, limit)
	if err != nil {
		return nil, false, err
	}
	hasOlder := len(msgs) > limit
	if hasOlder {
		msgs = msgs[:limit]
	}
	slices.Reverse(msgs)
	return msgs, hasOlder, nil
}

// newestBefore reads up to limit+1 messages before beforeSeq, newest first (one more
// than a page, to tell whether older ones exist), with limit bounded as for
// LatestMessages; it returns the bounded limit.
func (db *DB) newestBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]Message, int, error) {
	if limit <= 0 {
		limit = DefaultMessagePage
	}
	limit = min(limit, MaxMessagePage)
	rows, err := db.stmts.msgsBefore.QueryContext(ctx, sessionID, beforeSeq, limit+1)
	if err != nil {
		return nil, limit, err
	}
	msgs, err := appendRows(make([]Message, 0, min(limit+1, 64)), rows, scanMessage)
	return msgs, limit, err
}

// LatestTurns is a chat page: the newest whole turns of the session, at most limit
// messages unless the newest turn alone is longer, in ascending seq order, and
// whether older ones exist. A turn is a user message and everything up to the next
// one: a page never splits it, so a tool call and its result are always on the
// same page. Limits as for LatestMessages.
func (db *DB) LatestTurns(ctx context.Context, sessionID string, limit int) ([]Message, bool, error) {
	msgs, hasOlder, err := db.turnsBefore(ctx, sessionID, math.MaxInt64, limit)
	if err != nil {
		return nil, false, fmt.Errorf("store: latest turns: %w", err)
	}
	return msgs, hasOlder, nil
}

// TurnsBefore is the "Load older" page: the whole turns just before beforeSeq, as
// LatestTurns, and whether even older ones exist. Given the first seq of a page (a
// turn's start), the page before it ends with the turn before.
func (db *DB) TurnsBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]Message, bool, error) {
	msgs, hasOlder, err := db.turnsBefore(ctx, sessionID, beforeSeq, limit)
	if err != nil {
		return nil, false, fmt.Errorf("store: turns before: %w", err)
	}
	return msgs, hasOlder, nil
}

func (db *DB) turnsBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]Message, bool, error) {
	msgs, limit, err := db.newestBefore(ctx, sessionID, beforeSeq, limit)
	if err != nil {
		return nil, false, err
	}
	if len(msgs) <= limit { // the rest of the chat fits
		slices.Reverse(msgs)
		return msgs, false, nil
	}
	// msgs is newest first and msgs[limit] is beyond the page: the page starts at
	// the oldest turn start within it.
	for i := limit - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser {
			msgs = msgs[:i+1]
			slices.Reverse(msgs)
			return msgs, true, nil
		}
	}
	return db.wholeTurnBefore(ctx, sessionID, msgs[limit].Seq, beforeSeq)
}

// wholeTurnBefore is the page when one turn is longer than the page size: the turn
// that holds seq at, whole, up to beforeSeq.
func (db *DB) wholeTurnBefore(ctx context.Context, sessionID string, at, beforeSeq int64) ([]Message, bool, error) {
	var start sql.NullInt64
	if err := db.pool.QueryRowContext(ctx, `SELECT MAX(seq) FROM messages WHERE session_id = ? AND active = 1 AND seq <= ? AND role = 'user'`,
		sessionID, at).Scan(&start); err != nil {
		return nil, false, err
	}
	rows, err := db.pool.QueryContext(ctx, `SELECT `+messageCols+` FROM messages
		WHERE session_id = ? AND active = 1 AND seq >= ? AND seq < ? ORDER BY seq`, sessionID, start.Int64, beforeSeq)
	if err != nil {
		return nil, false, err
	}
	msgs, err := scanAll(rows, scanMessage)
	if err != nil || !start.Valid {
		return msgs, false, err // no user message before: the page reaches the start of the chat
	}
	var older bool
	err = db.pool.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM messages WHERE session_id = ? AND active = 1 AND seq < ?)`,
		sessionID, start.Int64).Scan(&older)
	return msgs, older, err
}

// MessagesAfter returns every message with seq > afterSeq, ascending.
func (db *DB) MessagesAfter(ctx context.Context, sessionID string, afterSeq int64) ([]Message, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+messageCols+` FROM messages
		WHERE session_id = ? AND active = 1 AND seq > ? ORDER BY seq`, sessionID, afterSeq)
	if err != nil {
		return nil, fmt.Errorf("store: messages after: %w", err)
	}
	msgs, err := scanAll(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("store: messages after: %w", err)
	}
	return msgs, nil
}

// MessageByID returns one message of the session, on the branch on screen or not, or
// errs.NotFound.
func (db *DB) MessageByID(ctx context.Context, sessionID string, id int64) (Message, error) {
	m, err := scanMessage(db.pool.QueryRowContext(ctx, `SELECT `+messageCols+` FROM messages WHERE id = ? AND session_id = ?`, id, sessionID))
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, fmt.Errorf("store: message by id: %w", errs.E(errs.NotFound, "message not found"))
	}
	if err != nil {
		return Message{}, fmt.Errorf("store: message by id: %w", err)
	}
	return m, nil
}

// SessionSavedMemory reports whether a message of the session records that its
// explicit "remember …" created memory id (what an Undo chip may remove).
func (db *DB) SessionSavedMemory(ctx context.Context, sessionID, id string) (bool, error) {
	var n int
	err := db.pool.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE session_id = ? AND saved_memories <> ''
		AND instr(',' || saved_memories || ',', ',' || ? || ',') > 0`, sessionID, id).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: saved memory: %w", err)
	}
	return n > 0, nil
}

// MessagesFrom returns up to limit messages with seq > afterSeq, oldest first (for
// folding old turns into the summary in bounded batches).
func (db *DB) MessagesFrom(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Message, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+messageCols+` FROM messages
		WHERE session_id = ? AND active = 1 AND seq > ? ORDER BY seq LIMIT ?`, sessionID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("store: messages from: %w", err)
	}
	out, err := scanAll(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("store: messages from: %w", err)
	}
	return out, nil
}

// DefaultContextMessages is how many messages LoadContextMessages returns when
// max <= 0.
const DefaultContextMessages = 400

const loadContextQuery = `SELECT id, seq, role, content, tool_calls, tool_call_id, call_key, status, tokens, created_at, updated_at
	FROM messages WHERE session_id = ? AND active = 1 AND seq > ? ORDER BY seq DESC LIMIT ?`

// LoadContextMessages returns the newest max messages of the session with seq >
// afterSeq (the summary's watermark), ascending: what the context engine
// (contextwin.Assemble) needs every turn, at a cost that does not grow with the
// session (one range scan of the (session_id, seq) index, on a statement
// prepared at Open). max <= 0 means DefaultContextMessages. Only the fields the
// context engine reads are filled: Reasoning, Error and Model are left empty, and
// SessionID is sessionID. A user message's Attachments come with their data. An unknown session yields no messages; ownership is the
// caller's check.
func (db *DB) LoadContextMessages(ctx context.Context, sessionID string, afterSeq int64, max int) ([]Message, error) {
	if max <= 0 {
		max = DefaultContextMessages
	}
	rows, err := db.stmts.loadContext.QueryContext(ctx, sessionID, afterSeq, max)
	if err != nil {
		return nil, fmt.Errorf("store: load context messages: %w", err)
	}
	msgs, err := appendRows(make([]Message, 0, min(max, 64)), rows, func(row scanner) (Message, error) {
		m := Message{SessionID: sessionID}
		var calls sql.NullString
		var created, updated int64
		err := row.Scan(&m.ID, &m.Seq, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.CallKey, &m.Status, &m.Tokens, &created, &updated)
		if calls.Valid {
			m.ToolCalls = []byte(calls.String)
		}
		m.CreatedAt, m.UpdatedAt = fromMS(created), fromMS(updated)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load context messages: %w", err)
	}
	slices.Reverse(msgs)
	var users []int64
	for _, m := range msgs {
		if m.Role == RoleUser {
			users = append(users, m.ID)
		}
	}
	if len(users) > 0 {
		atts, err := db.messageAttachments(ctx, sessionID, users, true)
		if err != nil {
			return nil, fmt.Errorf("store: load context messages: %w", err)
		}
		for i := range msgs {
			msgs[i].Attachments = atts[msgs[i].ID]
		}
	}
	return msgs, nil
}
