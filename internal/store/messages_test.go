package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func seqs(ms []store.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestAppendMessage(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)

	user := store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "hello"}
	mustNil(t, db.AppendMessage(ctx, &user))
	asst := store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "hi", Reasoning: "greet back",
		ToolCalls: []byte(`[{"id":"c1","name":"clock","arguments":"{}"}]`), Model: "gpt-4o", Tokens: 12}
	mustNil(t, db.AppendMessage(ctx, &asst))
	tool := store.Message{SessionID: s.ID, Role: store.RoleTool, ToolCallID: "c1", Content: `{"now":"noon"}`,
		Status: store.StatusError, Error: "late"}
	mustNil(t, db.AppendMessage(ctx, &tool))

	if user.Seq != 1 || asst.Seq != 2 || tool.Seq != 3 || user.ID == 0 || user.Status != store.StatusComplete {
		t.Fatalf("seqs %d %d %d, user %+v", user.Seq, asst.Seq, tool.Seq, user)
	}
	got, err := db.SessionForOwner(ctx, s.ID, ann.ID)
	mustNil(t, err)
	if !got.UpdatedAt.Equal(tool.CreatedAt) {
		t.Errorf("session updated_at %v, want %v (last append)", got.UpdatedAt, tool.CreatedAt)
	}

	msgs, hasOlder, err := db.LatestMessages(ctx, s.ID, 10)
	mustNil(t, err)
	if hasOlder || len(msgs) != 3 {
		t.Fatalf("latest: %d msgs, hasOlder %v", len(msgs), hasOlder)
	}
	m := msgs[1]
	if m.ID != asst.ID || m.Content != "hi" || m.Reasoning != "greet back" || string(m.ToolCalls) != string(asst.ToolCalls) ||
		m.Model != "gpt-4o" || m.Tokens != 12 || !m.CreatedAt.Equal(asst.CreatedAt) {
		t.Errorf("assistant round trip: %+v", m)
	}
	if msgs[0].ToolCalls != nil {
		t.Errorf("no tool calls should read back as nil, got %q", msgs[0].ToolCalls)
	}
	if msgs[2].ToolCallID != "c1" || msgs[2].Status != store.StatusError || msgs[2].Error != "late" {
		t.Errorf("tool round trip: %+v", msgs[2])
	}

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name string
			m    store.Message
			code string
		}{
			{"missing session", store.Message{SessionID: "nope", Role: store.RoleUser}, errs.NotFound},
			{"bad role", store.Message{SessionID: s.ID, Role: "robot"}, errs.Invalid},
			{"bad status", store.Message{SessionID: s.ID, Role: store.RoleUser, Status: "done"}, errs.Invalid},
			{"bad tool calls", store.Message{SessionID: s.ID, Role: store.RoleAssistant, ToolCalls: []byte("[oops")}, errs.Invalid},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				m := tc.m
				wantCode(t, db.AppendMessage(ctx, &m), tc.code)
			})
		}
		// Failed appends must not burn seqs.
		next := store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "again"}
		mustNil(t, db.AppendMessage(ctx, &next))
		if next.Seq != 4 {
			t.Errorf("seq after failures = %d, want 4", next.Seq)
		}
	})

	t.Run("update", func(t *testing.T) {
		m := asst
		m.Content, m.Status, m.Tokens = "hi there", store.StatusStopped, 20
		mustNil(t, db.UpdateMessage(ctx, &m))
		got, err := db.MessageByID(ctx, s.ID, m.ID)
		mustNil(t, err)
		if got.Content != "hi there" || got.Status != store.StatusStopped || got.Tokens != 20 || got.Seq != 2 {
			t.Errorf("after update %+v", got)
		}
		m.ID = 9999
		wantCode(t, db.UpdateMessage(ctx, &m), errs.NotFound)
		_, err = db.MessageByID(ctx, "other", asst.ID)
		wantCode(t, err, errs.NotFound)
	})
}

func TestMessagePaging(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)
	empty := mustSession(t, db, "s2", ann.ID)

	batch := make([]*store.Message, 25)
	for i := range batch {
		batch[i] = &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprint("m", i+1)}
	}
	mustNil(t, db.AppendMessages(ctx, batch))
	for i, m := range batch {
		if m.Seq != int64(i+1) || m.ID == 0 {
			t.Fatalf("batch[%d] seq %d id %d", i, m.Seq, m.ID)
		}
	}

	t.Run("latest", func(t *testing.T) {
		tests := []struct {
			limit     int
			want      []int64
			wantOlder bool
		}{
			{10, seqRange(16, 25), true},
			{24, seqRange(2, 25), true},
			{25, seqRange(1, 25), false},
			{100, seqRange(1, 25), false},
		}
		for _, tc := range tests {
			t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
				msgs, older, err := db.LatestMessages(ctx, s.ID, tc.limit)
				mustNil(t, err)
				if fmt.Sprint(seqs(msgs)) != fmt.Sprint(tc.want) || older != tc.wantOlder {
					t.Errorf("got %v older=%v, want %v older=%v", seqs(msgs), older, tc.want, tc.wantOlder)
				}
			})
		}
	})

	t.Run("scroll back through every page", func(t *testing.T) {
		msgs, older, err := db.LatestMessages(ctx, s.ID, 10)
		mustNil(t, err)
		all := msgs
		pages := 1
		for older {
			msgs, older, err = db.MessagesBefore(ctx, s.ID, all[0].Seq, 10)
			mustNil(t, err)
			all = append(msgs, all...)
			pages++
		}
		if pages != 3 || fmt.Sprint(seqs(all)) != fmt.Sprint(seqRange(1, 25)) {
			t.Errorf("%d pages, seqs %v", pages, seqs(all))
		}
		if all[0].Content != "m1" || all[24].Content != "m25" {
			t.Errorf("content order wrong: %q .. %q", all[0].Content, all[24].Content)
		}
	})

	t.Run("before", func(t *testing.T) {
		msgs, older, err := db.MessagesBefore(ctx, s.ID, 6, 5)
		mustNil(t, err)
		if fmt.Sprint(seqs(msgs)) != fmt.Sprint(seqRange(1, 5)) || older {
			t.Errorf("before 6: %v older=%v", seqs(msgs), older)
		}
		msgs, older, err = db.MessagesBefore(ctx, s.ID, 6, 4)
		mustNil(t, err)
		if fmt.Sprint(seqs(msgs)) != fmt.Sprint(seqRange(2, 5)) || !older {
			t.Errorf("before 6 limit 4: %v older=%v", seqs(msgs), older)
		}
	})

	t.Run("after", func(t *testing.T) {
		msgs, err := db.MessagesAfter(ctx, s.ID, 22)
		mustNil(t, err)
		if fmt.Sprint(seqs(msgs)) != fmt.Sprint(seqRange(23, 25)) {
			t.Errorf("after 22: %v", seqs(msgs))
		}
		msgs, err = db.MessagesAfter(ctx, s.ID, 25)
		mustNil(t, err)
		if len(msgs) != 0 {
			t.Errorf("after last: %v", seqs(msgs))
		}
	})

	t.Run("empty session", func(t *testing.T) {
		msgs, older, err := db.LatestMessages(ctx, empty.ID, 10)
		mustNil(t, err)
		if len(msgs) != 0 || older {
			t.Errorf("empty: %v %v", msgs, older)
		}
	})

	t.Run("batch is all or nothing", func(t *testing.T) {
		bad := []*store.Message{
			{SessionID: empty.ID, Role: store.RoleUser, Content: "ok"},
			{SessionID: "missing", Role: store.RoleUser},
		}
		wantCode(t, db.AppendMessages(ctx, bad), errs.NotFound)
		msgs, _, err := db.LatestMessages(ctx, empty.ID, 10)
		mustNil(t, err)
		if len(msgs) != 0 || bad[0].Seq != 0 {
			t.Errorf("partial batch stored: %v, seq %d", seqs(msgs), bad[0].Seq)
		}
	})
}

func TestConcurrentAppends(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)
	const writers, each = 8, 25

	var wg sync.WaitGroup
	errc := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				m := store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("w%d-%d", w, i)}
				if err := db.AppendMessage(ctx, &m); err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	msgs, err := db.MessagesAfter(ctx, s.ID, 0)
	mustNil(t, err)
	if fmt.Sprint(seqs(msgs)) != fmt.Sprint(seqRange(1, writers*each)) {
		t.Errorf("seqs not unique and gapless: %v", seqs(msgs))
	}
}

func BenchmarkAppendMessage(b *testing.B) {
	db := mustOpen(b)
	ctx := context.Background()
	u := mustUser(b, db, "ann", store.RoleUser)
	s := mustSession(b, db, "bench", u.ID)
	content := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200]
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m := store.Message{SessionID: s.ID, Role: store.RoleUser, Content: content}
		if err := db.AppendMessage(ctx, &m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkLatestMessages(b *testing.B) {
	db := mustOpen(b)
	ctx := context.Background()
	u := mustUser(b, db, "ann", store.RoleUser)
	s := mustSession(b, db, "bench", u.ID)
	content := strings.Repeat("x", 200)
	batch := make([]*store.Message, 1000)
	for i := range batch {
		batch[i] = &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: content}
	}
	mustNil(b, db.AppendMessages(ctx, batch))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := db.LatestMessages(ctx, s.ID, 50); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSaveDraft: a draft's text is rewritten in place while it is one; once the reply
// is finished (UpdateMessage), a late draft write changes nothing.
func TestSaveDraft(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := &store.User{Username: "draft", PasswordHash: "x", Role: store.RoleUser}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	s := &store.Session{ID: "33333333-3333-4333-8333-333333333333", OwnerID: u.ID}
	if err := db.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	m := &store.Message{SessionID: s.ID, Role: store.RoleAssistant, Status: store.StatusStopped, Error: store.ReplyInterrupted}
	if err := db.AppendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.SaveDraft(ctx, m.ID, "partial", "thinking"); err != nil || !ok {
		t.Fatalf("save draft: %v %v", ok, err)
	}
	got, err := db.MessageByID(ctx, s.ID, m.ID)
	if err != nil || got.Content != "partial" || got.Reasoning != "thinking" || got.Error != store.ReplyInterrupted {
		t.Fatalf("draft %+v %v", got, err)
	}
	m.Content, m.Status, m.Error, m.Memories, m.Saved = "partial and done", store.StatusComplete, "", []string{"m1", "m2"}, []string{"s1"}
	if err := db.UpdateMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.SaveDraft(ctx, m.ID, "stale", ""); err != nil || ok {
		t.Fatalf("late draft write: %v %v, want false", ok, err)
	}
	got, err = db.MessageByID(ctx, s.ID, m.ID)
	if err != nil || got.Content != "partial and done" || got.Status != store.StatusComplete || len(got.Memories) != 2 ||
		len(got.Saved) != 1 {
		t.Fatalf("finished reply %+v %v; want it untouched by the late write, its memories kept", got, err)
	}
}

// BenchmarkSaveDraft: one draft write of a streaming reply of 4 KB (about 1,000 tokens),
// round robin over 100 replies; a streaming reply costs one such write per second.
func BenchmarkSaveDraft(b *testing.B) {
	db := mustOpen(b)
	ctx := context.Background()
	u := mustUser(b, db, "ann", store.RoleUser)
	ids := make([]int64, 100)
	for i := range ids {
		s := mustSession(b, db, fmt.Sprintf("bench-%d", i), u.ID)
		m := store.Message{SessionID: s.ID, Role: store.RoleAssistant, Status: store.StatusStopped, Error: store.ReplyInterrupted}
		mustNil(b, db.AppendMessage(ctx, &m))
		ids[i] = m.ID
	}
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)[:4096]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if ok, err := db.SaveDraft(ctx, ids[i%len(ids)], text, ""); err != nil || !ok {
			b.Fatal(ok, err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "drafts/s")
}
