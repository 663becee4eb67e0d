package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"atrium/internal/store"
)

// BenchmarkOpenSession measures opening a long chat: GET /s/{id} on a session of
// 10,000 messages, end to end through the handler (login, ownership, the latest page
// of messages, markdown, the sidebar, the page template). The goal is ≤ 20 ms.
//
//	go test ./web -run x -bench OpenSession -benchtime 50x
func BenchmarkOpenSession(b *testing.B) {
	env := newTestEnv(b)
	admin := env.setup()
	id := admin.newSession()
	seedMessages(b, env.db, id, 10_000, 300)
	get := admin.serveGET()
	open := func() *httptest.ResponseRecorder { return get("/s/" + id) }
	rec := open()
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="msg-10000"`) || !strings.Contains(rec.Body.String(), `id="older"`) {
		b.Fatalf("GET /s/{id}: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	for b.Loop() {
		if rec := open(); rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchmarkOpenBranchedChat compares opening a chat of 100 turns where every turn has
// 3 versions (its user message edited twice, each version answered, and the reply on
// screen regenerated twice: 800 messages, 200 on screen, a ‹ 3/3 › pager on each) with
// a linear chat of 100 turns, end to end through the handler as BenchmarkOpenSession.
//
//	go test ./web -run x -bench OpenBranchedChat -benchtime 200x -count 3
func BenchmarkOpenBranchedChat(b *testing.B) {
	for _, versions := range []int{1, 3} {
		name := "linear"
		if versions > 1 {
			name = "3versions"
		}
		b.Run(name, func(b *testing.B) {
			env := newTestEnv(b)
			admin := env.setup()
			id := admin.newSession()
			seedBranchedTurns(b, env.db, id, 100, versions)
			get := admin.serveGET()
			open := func() *httptest.ResponseRecorder { return get("/s/" + id) }
			rec := open()
			body := rec.Body.String()
			wantPagers := 0
			if versions > 1 {
				wantPagers = 50 // every message of the latest page (25 turns)
			}
			if rec.Code != http.StatusOK || strings.Count(body, `data-testid="version-label"`) != wantPagers ||
				strings.Count(body, `data-testid="message"`) != 50 || !strings.Contains(body, "turn 99 version "+strconv.Itoa(versions)) {
				b.Fatalf("GET /s/{id}: %d, %d pagers, %d messages", rec.Code, strings.Count(body, `data-testid="version-label"`),
					strings.Count(body, `data-testid="message"`))
			}
			for b.Loop() {
				if rec := open(); rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

// seedBranchedTurns writes turns turns of ~300-byte messages to session id through the
// branch operations the chat uses: each turn's user message gets versions versions (each
// answered) and the last version's reply gets versions versions.
func seedBranchedTurns(tb testing.TB, db *store.DB, id string, turns, versions int) {
	tb.Helper()
	ctx := context.Background()
	text := strings.Repeat("lorem ipsum ", 25)
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	for i := range turns {
		user := &store.Message{SessionID: id, Role: store.RoleUser, Content: fmt.Sprintf("turn %d version 1 %s", i, text)}
		must(db.AppendMessage(ctx, user))
		var reply *store.Message
		for v := 1; v <= versions; v++ {
			if v > 1 {
				next := &store.Message{SessionID: id, Role: store.RoleUser, Content: fmt.Sprintf("turn %d version %d %s", i, v, text)}
				must(db.EditUserMessage(ctx, user.ID, next))
				user = next
			}
			reply = &store.Message{SessionID: id, Role: store.RoleAssistant, Content: "answer " + text}
			must(db.AppendMessage(ctx, reply))
		}
		for v := 2; v <= versions; v++ {
			_, _, err := db.BranchReply(ctx, id, reply.ID)
			must(err)
			reply = &store.Message{SessionID: id, Role: store.RoleAssistant, Content: fmt.Sprintf("answer %d %s", v, text)}
			must(db.AppendMessage(ctx, reply))
		}
	}
}
