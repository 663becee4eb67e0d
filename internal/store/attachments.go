package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"atrium/internal/errs"
)

// Attachment kinds.
const (
	AttachText  = "text"  // UTF-8 text, sent to the model as a delimited block
	AttachImage = "image" // a decode-checked raster image, sent as an image part
)

// PDFText is the MIME of a text attachment whose text was read from an uploaded PDF.
// Only the text is kept (Data): the PDF itself is not stored.
const PDFText = "application/pdf"

// Attachment is a file attached to a user's message. An upload has MessageID 0 until
// the message that uses it is committed (AppendMessage binds it). Data is filled only
// by the reads that say so.
type Attachment struct {
	ID            string
	OwnerID       int64
	SessionID     string
	MessageID     int64
	Name          string
	Kind          string // AttachText or AttachImage
	MIME          string // sniffed from the content
	Size          int64
	Width, Height int // images
	Tokens        int // its cost in the context
	Data          []byte
	CreatedAt     time.Time
}

const attachmentCols = `id, owner_id, session_id, COALESCE(message_id, 0), name, kind, mime, size, width, height, tokens, created_at`

func scanAttachment(row scanner, withData bool) (Attachment, error) {
	var a Attachment
	var created int64
	dest := []any{&a.ID, &a.OwnerID, &a.SessionID, &a.MessageID, &a.Name, &a.Kind, &a.MIME, &a.Size, &a.Width, &a.Height, &a.Tokens, &created}
	if withData {
		dest = append(dest, &a.Data)
	}
	err := row.Scan(dest...)
	a.CreatedAt = fromMS(created)
	return a, err
}

const attachmentNotFound = "file not found"

// CreateAttachment stores an upload (MessageID 0) of session a.SessionID for owner
// a.OwnerID; the caller supplies a.ID (random) and has checked the content. With
// maxUnsent > 0 the owner may have at most that many uploads no message uses: one
// more is errs.Conflict, counted in the insert's transaction, so parallel uploads
// cannot all pass. A missing or foreign session is errs.NotFound.
func (db *DB) CreateAttachment(ctx context.Context, a *Attachment, maxUnsent int) error {
	if a.Kind != AttachText && a.Kind != AttachImage {
		return fmt.Errorf("store: create attachment: %w", errs.E(errs.Invalid, "unknown attachment kind %q", a.Kind))
	}
	now := db.now()
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if maxUnsent > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM attachments WHERE owner_id = ? AND message_id IS NULL`, a.OwnerID).Scan(&n); err != nil {
				return err
			}
			if n >= maxUnsent {
				return errs.E(errs.Conflict, "You have %d attached files that are not sent yet: send or remove some first.", n)
			}
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO attachments (id, owner_id, session_id, name, kind, mime, size, width, height, tokens, data, created_at)
			SELECT ?, ?, id, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM sessions WHERE id = ? AND owner_id = ?`,
			a.ID, a.OwnerID, a.Name, a.Kind, a.MIME, len(a.Data), a.Width, a.Height, a.Tokens, a.Data, ms(now), a.SessionID, a.OwnerID)
		if err == nil {
			err = mustAffect(res, sessionNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: create attachment: %w", err)
	}
	a.Size, a.CreatedAt = int64(len(a.Data)), now
	return nil
}

// Attachment returns attachment id of owner, with its data. Missing or foreign is
// errs.NotFound.
func (db *DB) Attachment(ctx context.Context, id string, owner int64) (Attachment, error) {
	a, err := scanAttachment(db.pool.QueryRowContext(ctx, `SELECT `+attachmentCols+`, data FROM attachments
		WHERE id = ? AND owner_id = ?`, id, owner), true)
	if errors.Is(err, sql.ErrNoRows) {
		err = errs.E(errs.NotFound, attachmentNotFound)
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("store: attachment: %w", err)
	}
	return a, nil
}

// UnsentAttachments returns the uploads ids of session sessionID and owner that no
// message uses yet, without their data, in the order of ids. Any id that is missing,
// foreign, of another chat or already sent is errs.NotFound (naming none of them).
func (db *DB) UnsentAttachments(ctx context.Context, sessionID string, owner int64, ids []string) ([]Attachment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q := `SELECT ` + attachmentCols + ` FROM attachments WHERE session_id = ? AND owner_id = ? AND message_id IS NULL
		AND id IN (?` + strings.Repeat(",?", len(ids)-1) + `)`
	args := []any{sessionID, owner}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := db.pool.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: unsent attachments: %w", err)
	}
	list, err := scanAll(rows, func(r scanner) (Attachment, error) { return scanAttachment(r, false) })
	if err != nil {
		return nil, fmt.Errorf("store: unsent attachments: %w", err)
	}
	byID := make(map[string]Attachment, len(list))
	for _, a := range list {
		byID[a.ID] = a
	}
	out := make([]Attachment, 0, len(ids))
	for _, id := range ids {
		a, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("store: unsent attachments: %w", errs.E(errs.NotFound,
				"An attached file is no longer there (it expired or was sent already). Attach it again."))
		}
		out = append(out, a)
	}
	return out, nil
}

// DeleteUnsentAttachment deletes an upload of owner that no message uses yet, then
// checkpoints the WAL (as DeleteSession: the file's bytes would linger in the WAL).
// Missing, foreign or sent is errs.NotFound.
func (db *DB) DeleteUnsentAttachment(ctx context.Context, id string, owner int64) error {
	res, err := db.exec(ctx, `DELETE FROM attachments WHERE id = ? AND owner_id = ? AND message_id IS NULL`, id, owner)
	if err == nil {
		err = mustAffect(res, attachmentNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: delete attachment: %w", err)
	}
	return db.Checkpoint(ctx)
}

// UnsentAttachmentTTL is how long an upload no message uses is kept (PruneUnsentAttachments).
const UnsentAttachmentTTL = 24 * time.Hour

// PruneUnsentAttachments deletes the uploads older than before that no message uses
// (a page closed before sending), checkpointing the WAL when any went, and reports
// how many went.
func (db *DB) PruneUnsentAttachments(ctx context.Context, before time.Time) (int64, error) {
	res, err := db.exec(ctx, `DELETE FROM attachments WHERE message_id IS NULL AND created_at < ?`, ms(before))
	if err != nil {
		return 0, fmt.Errorf("store: prune attachments: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store: prune attachments: %w", err)
	}
	if n > 0 {
		return n, db.Checkpoint(ctx)
	}
	return n, nil
}

// bindAttachments gives message m the uploads in m.Attachments (by ID), inside the
// transaction that inserts it: each must be an unsent upload of m's chat.
func bindAttachments(ctx context.Context, tx *sql.Tx, m *Message) error {
	for _, a := range m.Attachments {
		res, err := tx.ExecContext(ctx, `UPDATE attachments SET message_id = ? WHERE id = ? AND session_id = ? AND message_id IS NULL`,
			m.ID, a.ID, m.SessionID)
		if err == nil {
			err = mustAffect(res, "An attached file is no longer there (it expired or was sent already). Attach it again.")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// MessageAttachments returns the attachments of the given messages (without data),
// by message id, in the order they were uploaded (the composer's chips): what a chat
// page shows. (Uploads in one millisecond share created_at, and ids are random.)
func (db *DB) MessageAttachments(ctx context.Context, sessionID string, messageIDs []int64) (map[int64][]Attachment, error) {
	return db.messageAttachments(ctx, sessionID, messageIDs, false)
}

func (db *DB) messageAttachments(ctx context.Context, sessionID string, messageIDs []int64, withData bool) (map[int64][]Attachment, error) {
	if len(messageIDs) == 0 {
		return nil, nil
	}
	cols := attachmentCols
	if withData {
		cols += ", data"
	}
	// Exactly the messages asked for: a range of ids would also read the files of every
	// version between them that is not on screen (an edit copies its message's files).
	out := map[int64][]Attachment{}
	for chunk := range slices.Chunk(messageIDs, 500) {
		args := []any{sessionID}
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := db.pool.QueryContext(ctx, `SELECT `+cols+` FROM attachments
			WHERE session_id = ? AND message_id IN (?`+strings.Repeat(",?", len(chunk)-1)+`) ORDER BY message_id, rowid`, args...)
		if err != nil {
			return nil, fmt.Errorf("store: message attachments: %w", err)
		}
		list, err := scanAll(rows, func(r scanner) (Attachment, error) { return scanAttachment(r, withData) })
		if err != nil {
			return nil, fmt.Errorf("store: message attachments: %w", err)
		}
		for _, a := range list {
			out[a.MessageID] = append(out[a.MessageID], a)
		}
	}
	return out, nil
}

// CountUnsentAttachments counts owner's uploads that no message uses yet.
func (db *DB) CountUnsentAttachments(ctx context.Context, owner int64) (int, error) {
	var n int
	err := db.pool.QueryRowContext(ctx, `SELECT count(*) FROM attachments WHERE owner_id = ? AND message_id IS NULL`, owner).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count unsent attachments: %w", err)
	}
	return n, nil
}

// MessageFiles is MessageAttachments with the files' data (a chat's export).
func (db *DB) MessageFiles(ctx context.Context, sessionID string, messageIDs []int64) (map[int64][]Attachment, error) {
	return db.messageAttachments(ctx, sessionID, messageIDs, true)
}
