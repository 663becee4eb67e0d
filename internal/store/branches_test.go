package store_test

import (
	"context"
	"strings"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// branchChat is a chat of two turns: u1 a1 u2 a2 (seqs 1–4).
func branchChat(t *testing.T) (*store.DB, store.Session, []*store.Message) {
	t.Helper()
	db := mustOpen(t)
	u := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "chat", u.ID)
	msgs := []*store.Message{
		{SessionID: s.ID, Role: store.RoleUser, Content: "u1 my cat is Pixel"},
		{SessionID: s.ID, Role: store.RoleAssistant, Content: "a1"},
		{SessionID: s.ID, Role: store.RoleUser, Content: "u2"},
		{SessionID: s.ID, Role: store.RoleAssistant, Content: "a2"},
	}
	mustNil(t, db.AppendMessages(context.Background(), msgs))
	return db, s, msgs
}

// onScreen is the branch on screen, as the chat page and the context loader read it.
func onScreen(t *testing.T, db *store.DB, sessionID string) string {
	t.Helper()
	ctx := context.Background()
	page, _, err := db.LatestTurns(ctx, sessionID, 50)
	mustNil(t, err)
	loaded, err := db.LoadContextMessages(ctx, sessionID, 0, 0)
	mustNil(t, err)
	all, err := db.AllMessages(ctx, sessionID)
	mustNil(t, err)
	text := func(ms []store.Message) string {
		var parts []string
		for _, m := range ms {
			parts = append(parts, strings.Fields(m.Content)[0])
		}
		return strings.Join(parts, " ")
	}
	got := text(page)
	if c, e := text(loaded), text(all); c != got || e != got {
		t.Fatalf("page %q, context %q and export %q differ", got, c, e)
	}
	return got
}

func reply(s store.Session, text string) *store.Message {
	return &store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: text}
}

func TestBranchEditFlipAndBack(t *testing.T) {
	db, s, m := branchChat(t)
	ctx := context.Background()
	edited := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u2' edited"}
	mustNil(t, db.EditUserMessage(ctx, m[2].ID, edited))
	if edited.Seq != 5 || edited.ParentID != m[1].ID {
		t.Fatalf("new version seq %d parent %d, want 5 and %d", edited.Seq, edited.ParentID, m[1].ID)
	}
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2'" {
		t.Fatalf("after the edit: %q", got)
	}
	mustNil(t, db.AppendMessage(ctx, reply(s, "a2'")))
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2' a2'" {
		t.Fatalf("after the new reply: %q", got)
	}

	page, _, err := db.LatestTurns(ctx, s.ID, 50)
	mustNil(t, err)
	v, err := db.MessageVersions(ctx, s.ID, page)
	mustNil(t, err)
	if len(v) != 1 || v[edited.ID] != (store.Versions{Index: 2, Count: 2, Prev: m[2].ID}) {
		t.Fatalf("versions %+v, want only the edited message at 2/2", v)
	}

	mustNil(t, db.SelectVersion(ctx, s.ID, m[2].ID))
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2 a2" {
		t.Fatalf("flipped back to the first version: %q", got)
	}
	page, _, _ = db.LatestTurns(ctx, s.ID, 50)
	v, _ = db.MessageVersions(ctx, s.ID, page)
	if v[m[2].ID] != (store.Versions{Index: 1, Count: 2, Next: edited.ID}) {
		t.Fatalf("versions %+v, want the old message at 1/2", v)
	}
	mustNil(t, db.SelectVersion(ctx, s.ID, m[2].ID)) // the version on screen: nothing changes
	mustNil(t, db.SelectVersion(ctx, s.ID, edited.ID))
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2' a2'" {
		t.Fatalf("flipped to the edit again: %q", got)
	}
}

// A flip higher up brings back, below it, the versions last chosen there.
func TestBranchFlipKeepsChoicesBelow(t *testing.T) {
	db, s, m := branchChat(t)
	ctx := context.Background()
	// Regenerate a2: a2' becomes the chosen reply to u2.
	user, next, err := db.BranchReply(ctx, s.ID, m[3].ID)
	mustNil(t, err)
	if user.ID != m[2].ID || next != (store.Versions{Index: 2, Count: 2, Prev: m[3].ID}) {
		t.Fatalf("branch reply: user %d versions %+v", user.ID, next)
	}
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2" {
		t.Fatalf("while the new reply is written: %q", got)
	}
	a2b := reply(s, "a2'")
	mustNil(t, db.AppendMessage(ctx, a2b))
	if a2b.ParentID != m[2].ID {
		t.Fatalf("new reply's parent %d, want the user message %d", a2b.ParentID, m[2].ID)
	}
	// Edit u1, then flip back to u1: its branch comes back with a2', not a2.
	e := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u1' other"}
	mustNil(t, db.EditUserMessage(ctx, m[0].ID, e))
	if got := onScreen(t, db, s.ID); got != "u1'" {
		t.Fatalf("after editing the first message: %q", got)
	}
	mustNil(t, db.SelectVersion(ctx, s.ID, m[0].ID))
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2 a2'" {
		t.Fatalf("flipped back: %q", got)
	}
	// Paging by whole turns reads the branch only.
	latest, hasOlder, err := db.LatestTurns(ctx, s.ID, 2)
	mustNil(t, err)
	if len(latest) != 2 || latest[0].ID != m[2].ID || latest[1].ID != a2b.ID || !hasOlder {
		t.Fatalf("latest page %v (more: %v)", latest, hasOlder)
	}
	older, hasOlder, err := db.TurnsBefore(ctx, s.ID, latest[0].Seq, 2)
	mustNil(t, err)
	if len(older) != 2 || older[0].Content != "u1 my cat is Pixel" || older[1].Content != "a1" || hasOlder {
		t.Fatalf("older page %v (more: %v)", older, hasOlder)
	}
}

// The rolling summary covers one branch up to its watermark: a branch that leaves that
// watermark gets the summary it had (or none), and gets this one back when flipped back.
func TestBranchSummaryFollowsBranch(t *testing.T) {
	db, s, m := branchChat(t)
	ctx := context.Background()
	summary := func() (string, int64) {
		ss, err := db.SessionForOwner(ctx, s.ID, s.OwnerID)
		mustNil(t, err)
		return ss.Summary, ss.SummarySeq
	}
	ok, err := db.AdvanceSessionSummary(ctx, s.ID, s.OwnerID, "S2: the cat is Pixel", m[1].Seq)
	mustNil(t, err)
	ok2, err := db.AdvanceSessionSummary(ctx, s.ID, s.OwnerID, "S4: the cat is Pixel; u2 a2", m[3].Seq)
	mustNil(t, err)
	if !ok || !ok2 {
		t.Fatal("summaries on the branch on screen were not taken")
	}
	// Editing u2 leaves seq 4: the summary up to seq 2 is the branch's.
	e := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u2' edited"}
	mustNil(t, db.EditUserMessage(ctx, m[2].ID, e))
	if text, seq := summary(); text != "S2: the cat is Pixel" || seq != m[1].Seq {
		t.Fatalf("after editing u2: summary %q up to %d, want S2 up to %d", text, seq, m[1].Seq)
	}
	loaded, err := db.LoadContextMessages(ctx, s.ID, m[1].Seq, 0)
	mustNil(t, err)
	if len(loaded) != 1 || loaded[0].ID != e.ID {
		t.Fatalf("context after the watermark: %v, want only the edit", loaded)
	}
	// A late fold of the branch left behind is kept for it, never shown on this one.
	ok, err = db.AdvanceSessionSummary(ctx, s.ID, s.OwnerID, "S4b: late", m[3].Seq)
	mustNil(t, err)
	if text, _ := summary(); ok || text != "S2: the cat is Pixel" {
		t.Fatalf("a summary of the other branch reached this one (%v, %q)", ok, text)
	}
	// Editing u1: nothing of the summary is on the branch.
	e1 := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u1' my dog is Rex"}
	mustNil(t, db.EditUserMessage(ctx, m[0].ID, e1))
	if text, seq := summary(); text != "" || seq != 0 {
		t.Fatalf("after editing u1: summary %q up to %d, want none", text, seq)
	}
	// Back to u1 (and below it, u2'), then to u2: each branch's own summary.
	mustNil(t, db.SelectVersion(ctx, s.ID, m[0].ID))
	if text, _ := summary(); text != "S2: the cat is Pixel" {
		t.Fatalf("back on u1: summary %q", text)
	}
	mustNil(t, db.SelectVersion(ctx, s.ID, m[2].ID))
	if text, seq := summary(); text != "S4b: late" || seq != m[3].Seq {
		t.Fatalf("back on u2: summary %q up to %d", text, seq)
	}
}

// Hostile or wrong ids are refused with nothing written.
func TestBranchRefusals(t *testing.T) {
	db, s, m := branchChat(t)
	ctx := context.Background()
	other := mustSession(t, db, "other", s.OwnerID)
	foreign := &store.Message{SessionID: other.ID, Role: store.RoleUser, Content: "elsewhere"}
	mustNil(t, db.AppendMessage(ctx, foreign))
	before := onScreen(t, db, s.ID)
	count := func() int {
		var n int
		all, err := db.AllMessages(ctx, s.ID)
		mustNil(t, err)
		n = len(all)
		return n
	}
	n := count()
	edit := func(id int64) error {
		return db.EditUserMessage(ctx, id, &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "x"})
	}
	_, _, regenUser := db.BranchReply(ctx, s.ID, m[0].ID)
	_, _, regenForeign := db.BranchReply(ctx, s.ID, foreign.ID)
	cases := []struct {
		name string
		err  error
		code string
	}{
		{"edit another chat's message", edit(foreign.ID), errs.NotFound},
		{"edit a missing message", edit(999999), errs.NotFound},
		{"edit a reply", edit(m[1].ID), errs.Invalid},
		{"regenerate a user message", regenUser, errs.Invalid},
		{"regenerate another chat's message", regenForeign, errs.NotFound},
		{"flip to another chat's message", db.SelectVersion(ctx, s.ID, foreign.ID), errs.NotFound},
	}
	for _, tc := range cases {
		if errs.Code(tc.err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.code)
		}
	}
	if got := onScreen(t, db, s.ID); got != before || count() != n {
		t.Fatalf("a refused move changed the chat: %q (%d messages)", got, count())
	}
	// A version whose parent is not on screen cannot be shown.
	e := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u1'"}
	mustNil(t, db.EditUserMessage(ctx, m[0].ID, e))
	if err := db.SelectVersion(ctx, s.ID, m[2].ID); errs.Code(err) != errs.Invalid {
		t.Fatalf("flip to a version below another branch: %v", err)
	}
	if err := edit(m[2].ID); errs.Code(err) != errs.Invalid {
		t.Fatalf("edit of a message not on screen: %v", err)
	}
	if got := onScreen(t, db, s.ID); got != "u1'" {
		t.Fatalf("refusals moved the branch: %q", got)
	}
}

// Search finds only the branch on screen; a fork from a run of another branch copies
// that branch.
func TestBranchSearchAndFork(t *testing.T) {
	db, s, m := branchChat(t)
	ctx := context.Background()
	e := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u2' about zebras"}
	mustNil(t, db.EditUserMessage(ctx, m[2].ID, e))
	mustNil(t, db.AppendMessage(ctx, reply(s, "a2' zebras run")))
	hits, err := db.SearchChats(ctx, s.OwnerID, "zebras", 10)
	mustNil(t, err)
	if len(hits) != 2 {
		t.Fatalf("hits on screen: %+v", hits)
	}
	mustNil(t, db.SelectVersion(ctx, s.ID, m[2].ID))
	if hits, _ := db.SearchChats(ctx, s.OwnerID, "zebras", 10); len(hits) != 0 {
		t.Fatalf("a version not on screen was found: %+v", hits)
	}
	if hits, _ := db.SearchChats(ctx, s.OwnerID, "Pixel", 10); len(hits) != 1 {
		t.Fatalf("the shared first turn: %+v", hits)
	}
	// The run that wrote a2' saw seq 6; its fork holds u1 a1 u2' (the turn it answered).
	upTo, err := db.LastUserSeq(ctx, s.ID, 6)
	mustNil(t, err)
	if upTo != e.Seq {
		t.Fatalf("last user seq of the other branch: %d, want %d", upTo, e.Seq)
	}
	fork := store.Session{ID: "fork", Title: "fork"}
	mustNil(t, db.ForkSession(ctx, s.OwnerID, s.ID, upTo, &fork))
	if got := onScreen(t, db, fork.ID); got != "u1 a1 u2'" {
		t.Fatalf("fork: %q", got)
	}
	// The fork is one branch: a new message follows its last one.
	next := &store.Message{SessionID: fork.ID, Role: store.RoleAssistant, Content: "more"}
	mustNil(t, db.AppendMessage(ctx, next))
	if got := onScreen(t, db, fork.ID); got != "u1 a1 u2' more" {
		t.Fatalf("fork after a reply: %q", got)
	}
}

// The task (the chat's working memory) follows the branch: an edit starts from the task
// before it, and a flip back brings back the task that branch reached.
func TestBranchTaskFollowsBranch(t *testing.T) {
	db, s, m := branchChat(t)
	ctx := context.Background()
	task := func() string {
		ss, err := db.SessionForOwner(ctx, s.ID, s.OwnerID)
		mustNil(t, err)
		return string(ss.State)
	}
	mustNil(t, db.SetSessionState(ctx, s.ID, s.OwnerID, []byte(`{"goal":"plan a trip","stage":"dates"}`)))
	// Turn 3: its user message, then task_update moves the stage.
	u3 := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u3 book it"}
	mustNil(t, db.AppendMessage(ctx, u3))
	mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "a3 step",
		ToolCalls: []byte(`[{"id":"c","name":"task_update","arguments":"{}"}]`)}))
	mustNil(t, db.SetSessionState(ctx, s.ID, s.OwnerID, []byte(`{"goal":"plan a trip","stage":"booked"}`)))
	mustNil(t, db.AppendMessage(ctx, reply(s, "a3 done")))

	e := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u3' not yet"}
	mustNil(t, db.EditUserMessage(ctx, u3.ID, e))
	if got := task(); got != `{"goal":"plan a trip","stage":"dates"}` {
		t.Fatalf("task after editing u3: %s", got)
	}
	mustNil(t, db.SelectVersion(ctx, s.ID, u3.ID))
	if got := task(); got != `{"goal":"plan a trip","stage":"booked"}` {
		t.Fatalf("task back on u3: %s", got)
	}
	// Regenerating the reply to u3 starts from the task its turn started from.
	_, _, err := db.BranchReply(ctx, s.ID, m[3].ID+3) // a3 done
	mustNil(t, err)
	if got := task(); got != `{"goal":"plan a trip","stage":"dates"}` {
		t.Fatalf("task while regenerating u3's reply: %s", got)
	}
	// Editing u1 goes back to before any task.
	mustNil(t, db.EditUserMessage(ctx, m[0].ID, &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u1'"}))
	if got := task(); got != `{}` {
		t.Fatalf("task after editing the first message: %s", got)
	}
}

// An edit changes the words, not the files: the new version is sent with copies of the
// old version's files, and the old version keeps its own.
func TestBranchEditKeepsFiles(t *testing.T) {
	db, s, _ := branchChat(t)
	ctx := context.Background()
	img := store.Attachment{ID: "f-img", OwnerID: s.OwnerID, SessionID: s.ID, Name: "p.png", Kind: store.AttachImage, MIME: "image/png",
		Width: 2, Height: 3, Tokens: 85, Data: []byte("\x89PNG-bytes")}
	txt := store.Attachment{ID: "f-txt", OwnerID: s.OwnerID, SessionID: s.ID, Name: "n.md", Kind: store.AttachText, MIME: "text/markdown",
		Tokens: 7, Data: []byte("# notes")}
	for _, a := range []*store.Attachment{&img, &txt} {
		mustNil(t, db.CreateAttachment(ctx, a, 0))
	}
	u3 := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u3 look", Attachments: []store.Attachment{{ID: "f-img"}, {ID: "f-txt"}}}
	mustNil(t, db.AppendMessage(ctx, u3))
	mustNil(t, db.AppendMessage(ctx, reply(s, "a3")))

	edited := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u3' look again"}
	mustNil(t, db.EditUserMessage(ctx, u3.ID, edited))
	if got := onScreen(t, db, s.ID); got != "u1 a1 u2 a2 u3'" {
		t.Fatalf("on screen %q", got)
	}
	loaded, err := db.LoadContextMessages(ctx, s.ID, 0, 0)
	mustNil(t, err)
	last := loaded[len(loaded)-1]
	if last.ID != edited.ID || len(last.Attachments) != 2 {
		t.Fatalf("the edited version's files: %+v", last)
	}
	names := map[string]string{}
	for _, a := range last.Attachments {
		names[a.Name] = string(a.Data)
		if a.ID == "f-img" || a.ID == "f-txt" {
			t.Errorf("the new version shares file id %s with the old one", a.ID)
		}
	}
	if names["p.png"] != "\x89PNG-bytes" || names["n.md"] != "# notes" {
		t.Errorf("copied files = %v", names)
	}
	page, err := db.MessageAttachments(ctx, s.ID, []int64{u3.ID, edited.ID})
	mustNil(t, err)
	if len(page[u3.ID]) != 2 || len(page[edited.ID]) != 2 {
		t.Errorf("files per version = %d (old), %d (new), want 2 and 2", len(page[u3.ID]), len(page[edited.ID]))
	}
}
