package web_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"atrium/internal/store"
)

var searchBenchWords = strings.Fields(`the a model reply context window token budget summary memory tool call result
	server database search index chat message user assistant browser stream error retry page cache
	golang sqlite python docker network kernel socket thread buffer parser schema migration
	我的 猫 喜欢 吃鱼 今天 天气 很好 数据库 搜索 模型`)

// BenchmarkSearchPage is the search end to end: GET /search?q= as the sidebar box sends
// it (HX-Request: the list of results) over real HTTP against the real app and SQLite
// file, for a user with 1,000 chats × 100 messages (about 40 words each, plus one word
// unique to the message) next to a second user with 100 × 100; then opening a chat at an
// old hit (GET /s/{id}?at=SEQ, the page of turns around it). p50-ms is the median.
func BenchmarkSearchPage(b *testing.B) {
	env := newTestEnv(b)
	admin := env.setup()
	env.user(admin, "bob")
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	fill := func(username, prefix string, chats int) {
		u, err := env.db.UserByUsername(ctx, username)
		if err != nil {
			b.Fatal(err)
		}
		for c := range chats {
			s := store.Session{ID: fmt.Sprint(prefix, c), OwnerID: u.ID, Title: fmt.Sprint("chat ", prefix, c)}
			if err := env.db.CreateSession(ctx, &s); err != nil {
				b.Fatal(err)
			}
			msgs := make([]*store.Message, 100)
			for i := range msgs {
				role := store.RoleUser
				if i%2 == 1 {
					role = store.RoleAssistant
				}
				var t strings.Builder
				for range 40 {
					t.WriteString(searchBenchWords[r.IntN(len(searchBenchWords))])
					t.WriteByte(' ')
				}
				fmt.Fprintf(&t, "m%dx%d", c, i)
				msgs[i] = &store.Message{SessionID: s.ID, Role: role, Content: t.String()}
			}
			if err := env.db.AppendMessages(ctx, msgs); err != nil {
				b.Fatal(err)
			}
		}
	}
	start := time.Now()
	fill("admin", "a", 1000)
	fill("bob", "b", 100)
	b.Logf("filled 110,000 messages in %v", time.Since(start).Round(time.Millisecond))

	measure := func(b *testing.B, path string, htmx bool, check func(string) bool) {
		var times []time.Duration
		cpu0 := cpuTime()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodGet, env.ts.URL+path, nil)
			if htmx {
				req.Header.Set("HX-Request", "true")
			}
			t0 := time.Now()
			resp := admin.do(req)
			times = append(times, time.Since(t0))
			if resp.StatusCode != http.StatusOK || !check(resp.body) {
				b.Fatalf("GET %s: %d %.300s", path, resp.StatusCode, resp.body)
			}
		}
		// CPU time (this process: server and client) per request says what a request
		// costs on a shared machine, where the wall time mostly says how busy it is.
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(len(times)), "cpu-ms/op")
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(times[len(times)*95/100].Microseconds())/1000, "p95-ms")
	}
	hasHits := func(body string) bool { return strings.Contains(body, `data-testid="search-hit"`) }
	for _, q := range []string{"m17x42", "database", "数据库", "sqlite kernel", "猫"} {
		b.Run("q="+q, func(b *testing.B) { measure(b, "/search?q="+url.QueryEscape(q), true, hasHits) })
	}
	b.Run("open-at-old-hit", func(b *testing.B) {
		measure(b, "/s/a17?at=12", false, func(body string) bool { return strings.Contains(body, `jump-target" id="msg-12"`) })
	})
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
