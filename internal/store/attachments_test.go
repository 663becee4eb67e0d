package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// An upload is unsent until the message that names it is committed, in the same
// transaction; then it loads with its message for the context (with its data) and for
// the page (without), is no longer unsent, and cannot be bound again. A send naming
// an upload of another chat stores nothing.
func TestAttachmentsBindToTheirMessage(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	other := mustUser(t, db, "bob", store.RoleUser)
	mustSession(t, db, "s1", u.ID)
	mustSession(t, db, "s2", u.ID)
	mustSession(t, db, "b1", other.ID)

	img := store.Attachment{ID: "f-img", OwnerID: u.ID, SessionID: "s1", Name: "p.png", Kind: store.AttachImage, MIME: "image/png",
		Width: 2, Height: 3, Tokens: 85, Data: []byte("\x89PNG-bytes")}
	txt := store.Attachment{ID: "f-txt", OwnerID: u.ID, SessionID: "s1", Name: "n.md", Kind: store.AttachText, MIME: "text/markdown",
		Tokens: 7, Data: []byte("# notes")}
	elsewhere := store.Attachment{ID: "f-s2", OwnerID: u.ID, SessionID: "s2", Name: "x.txt", Kind: store.AttachText, MIME: "text/plain", Data: []byte("x")}
	for _, a := range []*store.Attachment{&img, &txt, &elsewhere} {
		mustNil(t, db.CreateAttachment(ctx, a, 0))
	}
	// Into another user's chat: not found.
	foreign := store.Attachment{ID: "f-b", OwnerID: u.ID, SessionID: "b1", Name: "y", Kind: store.AttachText, MIME: "text/plain", Data: []byte("y")}
	if err := db.CreateAttachment(ctx, &foreign, 0); errs.Code(err) != errs.NotFound {
		t.Errorf("upload into another user's chat: %v", err)
	}
	if got, err := db.UnsentAttachments(ctx, "s1", u.ID, []string{"f-txt", "f-img"}); err != nil || len(got) != 2 || got[0].ID != "f-txt" || got[1].Data != nil {
		t.Fatalf("unsent = %+v, %v", got, err)
	}
	for _, ids := range [][]string{{"f-s2"}, {"f-img", "nope"}} {
		if _, err := db.UnsentAttachments(ctx, "s1", u.ID, ids); errs.Code(err) != errs.NotFound {
			t.Errorf("unsent %v in s1: %v, want NotFound", ids, err)
		}
	}
	if _, err := db.UnsentAttachments(ctx, "s1", other.ID, []string{"f-img"}); errs.Code(err) != errs.NotFound {
		t.Errorf("another owner's unsent: %v", err)
	}

	// A message naming an upload of another chat: nothing is stored.
	bad := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: "x", Attachments: []store.Attachment{{ID: "f-img"}, {ID: "f-s2"}}}
	if err := db.AppendMessage(ctx, bad); errs.Code(err) != errs.NotFound {
		t.Fatalf("bind another chat's file: %v", err)
	}
	if msgs, _, _ := db.LatestMessages(ctx, "s1", 10); len(msgs) != 0 {
		t.Fatalf("a message was stored: %+v", msgs)
	}

	m := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: "look", Attachments: []store.Attachment{{ID: "f-img"}, {ID: "f-txt"}}}
	mustNil(t, db.AppendMessage(ctx, m))
	ctxMsgs, err := db.LoadContextMessages(ctx, "s1", 0, 0)
	mustNil(t, err)
	if len(ctxMsgs) != 1 || len(ctxMsgs[0].Attachments) != 2 || string(ctxMsgs[0].Attachments[0].Data) != "\x89PNG-bytes" ||
		ctxMsgs[0].Attachments[0].Width != 2 || ctxMsgs[0].Attachments[1].Tokens != 7 {
		t.Fatalf("context messages = %+v", ctxMsgs)
	}
	page, err := db.MessageAttachments(ctx, "s1", []int64{m.ID})
	mustNil(t, err)
	if a := page[m.ID]; len(a) != 2 || a[0].Data != nil || a[0].Name != "p.png" {
		t.Errorf("page attachments = %+v", page)
	}
	if _, err := db.UnsentAttachments(ctx, "s1", u.ID, []string{"f-img"}); errs.Code(err) != errs.NotFound {
		t.Errorf("a sent file is still unsent: %v", err)
	}
	again := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: "again", Attachments: []store.Attachment{{ID: "f-img"}}}
	if err := db.AppendMessage(ctx, again); errs.Code(err) != errs.NotFound {
		t.Errorf("a file bound twice: %v", err)
	}
	if err := db.DeleteUnsentAttachment(ctx, "f-img", u.ID); errs.Code(err) != errs.NotFound {
		t.Errorf("removing a sent file: %v", err)
	}
	if _, err := db.Attachment(ctx, "f-img", other.ID); errs.Code(err) != errs.NotFound {
		t.Errorf("another owner reads the file: %v", err)
	}

	// Pruning takes only old unsent uploads; deleting the chat takes the rest.
	if n, err := db.PruneUnsentAttachments(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("pruned %d (%v), want 1 (f-s2)", n, err)
	}
	mustNil(t, db.DeleteSession(ctx, "s1", u.ID))
	if _, err := db.Attachment(ctx, "f-txt", u.ID); errs.Code(err) != errs.NotFound {
		t.Errorf("a file of a deleted chat: %v", err)
	}
}

// A message's files come back in the order they were uploaded (the composer's chips),
// also when they were uploaded in the same millisecond and their random ids sort the
// other way; an edit's copies keep that order (TestFilesExportImportRoundTrip saw the
// two files of one message swapped when both uploads fell in one millisecond).
func TestAttachmentsKeepUploadOrder(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	mustSession(t, db, "s1", u.ID)
	at := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	db.Now = func() time.Time { return at } // every upload in the same millisecond
	var ids []string
	var want []string
	for i := range 6 {
		a := store.Attachment{ID: fmt.Sprintf("f-%d", 9-i), OwnerID: u.ID, SessionID: "s1", Name: fmt.Sprintf("n%d.txt", i),
			Kind: store.AttachText, MIME: "text/plain", Data: []byte("x")}
		mustNil(t, db.CreateAttachment(ctx, &a, 0))
		ids = append(ids, a.ID)
		want = append(want, a.Name)
	}
	m := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: "files"}
	for _, id := range ids {
		m.Attachments = append(m.Attachments, store.Attachment{ID: id})
	}
	mustNil(t, db.AppendMessage(ctx, m))
	names := func(list []store.Attachment) string {
		var out []string
		for _, a := range list {
			out = append(out, a.Name)
		}
		return strings.Join(out, " ")
	}
	page, err := db.MessageAttachments(ctx, "s1", []int64{m.ID})
	mustNil(t, err)
	if got := names(page[m.ID]); got != strings.Join(want, " ") {
		t.Errorf("page order %q, want %q", got, strings.Join(want, " "))
	}
	mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "s1", Role: store.RoleAssistant, Content: "ok"}))
	edited := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: "files again"}
	mustNil(t, db.EditUserMessage(ctx, m.ID, edited))
	loaded, err := db.LoadContextMessages(ctx, "s1", 0, 0)
	mustNil(t, err)
	if got := names(loaded[len(loaded)-1].Attachments); got != strings.Join(want, " ") {
		t.Errorf("edited version's order %q, want %q", got, strings.Join(want, " "))
	}
}

// A fork carries the files of the messages it copies, as copies of its own (same bytes,
// same order): a message that was files alone would otherwise be empty and cut.
func TestForkKeepsAttachments(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	mustSession(t, db, "src", u.ID)
	send := func(text string, files ...store.Attachment) {
		m := &store.Message{SessionID: "src", Role: store.RoleUser, Content: text}
		for _, a := range files {
			a.OwnerID, a.SessionID = u.ID, "src"
			mustNil(t, db.CreateAttachment(ctx, &a, 0))
			m.Attachments = append(m.Attachments, store.Attachment{ID: a.ID})
		}
		mustNil(t, db.AppendMessage(ctx, m))
		mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "src", Role: store.RoleAssistant, Content: "ok"}))
	}
	send("", store.Attachment{ID: "f-2", Name: "b.png", Kind: store.AttachImage, MIME: "image/png", Width: 4, Height: 4, Tokens: 85, Data: []byte("\x89PNG-b")},
		store.Attachment{ID: "f-1", Name: "a.md", Kind: store.AttachText, MIME: "text/markdown", Tokens: 3, Data: []byte("# a")})
	send("plain")
	send("one more", store.Attachment{ID: "f-3", Name: "c.txt", Kind: store.AttachText, MIME: "text/plain", Tokens: 1, Data: []byte("c")})

	dst := store.Session{ID: "fork", Title: "Fork", Model: "1:m"}
	mustNil(t, db.ForkSession(ctx, u.ID, "src", 6, &dst))
	describe := func(sessionID string) string {
		msgs, err := db.LoadContextMessages(ctx, sessionID, 0, 0)
		mustNil(t, err)
		var out []string
		for _, m := range msgs {
			for _, a := range m.Attachments {
				if a.SessionID != sessionID || a.MessageID != m.ID {
					t.Errorf("%s: file %s belongs to %s/%d, not message %d", sessionID, a.Name, a.SessionID, a.MessageID, m.ID)
				}
				out = append(out, fmt.Sprintf("%d:%s:%s:%s:%dx%d:%d", m.Seq, a.Name, a.MIME, a.Data, a.Width, a.Height, a.Tokens))
			}
		}
		return strings.Join(out, " ")
	}
	want := describe("src")
	if got := describe("fork"); got != want || want == "" {
		t.Errorf("the fork's files are %q, want %q", got, want)
	}
	// The copies are the fork's own: deleting the source leaves them.
	mustNil(t, db.DeleteSession(ctx, "src", u.ID))
	if got := describe("fork"); got != want {
		t.Errorf("after the source's deletion the fork's files are %q, want %q", got, want)
	}
}

// The files of a chat's messages are read for exactly the messages asked for: after
// five edits of a message with a file, the five versions off screen (each with its
// copy of the file) are not read with the one on screen.
func TestMessageAttachmentsReadOnlyThoseAsked(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	mustSession(t, db, "s1", u.ID)
	send := func(text, fileID string) *store.Message {
		a := store.Attachment{ID: fileID, OwnerID: u.ID, SessionID: "s1", Name: fileID + ".txt", Kind: store.AttachText, MIME: "text/plain",
			Data: []byte(strings.Repeat("x", 1000))}
		mustNil(t, db.CreateAttachment(ctx, &a, 0))
		m := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: text, Attachments: []store.Attachment{{ID: a.ID}}}
		mustNil(t, db.AppendMessage(ctx, m))
		mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "s1", Role: store.RoleAssistant, Content: "ok"}))
		return m
	}
	first := send("first", "f-1")
	last := send("second", "f-2")
	for i := range 5 {
		edited := &store.Message{SessionID: "s1", Role: store.RoleUser, Content: fmt.Sprintf("second, edit %d", i+1)}
		mustNil(t, db.EditUserMessage(ctx, last.ID, edited))
		mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: "s1", Role: store.RoleAssistant, Content: "ok"}))
		last = edited
	}
	for name, read := range map[string]func(context.Context, string, []int64) (map[int64][]store.Attachment, error){
		"page": db.MessageAttachments, "export": db.MessageFiles,
	} {
		got, err := read(ctx, "s1", []int64{first.ID, last.ID})
		mustNil(t, err)
		n := 0
		for id, list := range got {
			if id != first.ID && id != last.ID {
				t.Errorf("%s: read the files of message %d, which was not asked for", name, id)
			}
			n += len(list)
		}
		if n != 2 || len(got[first.ID]) != 1 || len(got[last.ID]) != 1 {
			t.Errorf("%s: read %d files of %d messages, want 2 of 2", name, n, len(got))
		}
	}
	msgs, err := db.LoadContextMessages(ctx, "s1", 0, 0)
	mustNil(t, err)
	if len(msgs) != 4 || len(msgs[2].Attachments) != 1 || msgs[2].Content != "second, edit 5" {
		t.Errorf("context messages = %+v", msgs)
	}
}
