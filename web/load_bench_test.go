package web_test

// The load tool: the real server (app.New, real HTTP, real websockets, a real
// SQLite file) with the fake model, driven by N websocket clients in this
// process. Run it with
//
//	ATRIUM_LOAD_SESSIONS=100 ATRIUM_LOAD_DURATION=30s go test ./web -run '^$' -bench '^BenchmarkLoadReplies$' -benchtime 1x
//	ATRIUM_LOAD_CONNECTS=500 ATRIUM_LOAD_RUNS=10000 go test ./web -run '^$' -bench '^BenchmarkLoadConnects$' -benchtime 1x
//
// (small defaults otherwise). RSS and handles are this process's: server,
// clients and fake model together.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// procStatus returns a field of /proc/self/status in MiB (VmRSS, VmHWM).
func procStatus(field string) float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// resetPeakRSS starts VmHWM again from the current RSS (Linux).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// dbHandles counts this process's open files on the database (atrium.db, -wal, -shm).
func dbHandles(dir string) int {
	fds, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, filepath.Join(dir, "atrium.db")) {
			n++
		}
	}
	return n
}

// sampleHandles records the most database handles seen until stop is closed.
func sampleHandles(dir string, stop chan struct{}, most *atomic.Int64) {
	for {
		if n := int64(dbHandles(dir)); n > most.Load() {
			most.Store(n)
		}
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[(len(ds)-1)*p/100]) / float64(time.Millisecond)
}

// The fake model's first chunk carries the time it was written, so a client
// can tell how long the token took to reach it.
var producedAt = regexp.MustCompile(`t(\d{19})z`)

// A notice with text is the server refusing a send (busy, an error).
var noticeText = regexp.MustCompile(`id="notice"[^>]*>([^<]*)<`)

// BenchmarkLoadReplies: N sessions, each sending "hello" again as soon as the
// previous reply is final, for a duration. Reports replies/s, first token (send
// to the first frame with reply text) and relay (the model writing its first
// chunk to the client seeing it) p50/p99, errors, replies lost (a user message
// without a complete reply in the database), rows, RSS and database handles.
func BenchmarkLoadReplies(b *testing.B) {
	sessions := envInt("ATRIUM_LOAD_SESSIONS", 10)
	duration := envDuration("ATRIUM_LOAD_DURATION", 2*time.Second)
	extract := os.Getenv("ATRIUM_LOAD_EXTRACT") != "0"
	for b.Loop() {
		env := newTestEnvConfig(b, app.Options{}, func(c *config.Config) { c.MemoryExtraction = extract })
		env.llm.Unrecorded = true
		env.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
			return llmtest.Reply{Text: []string{fmt.Sprintf("t%dz ", time.Now().UnixNano()), "hello ", "there."}}
		})
		admin := env.setup()
		admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
		ids := make([]string, sessions)
		conns := make([]*wsConn, sessions)
		for i := range ids {
			ids[i] = admin.newSession()
			conns[i] = admin.dial(ids[i])
		}

		var (
			mu                  sync.Mutex
			firstTok, relay     []time.Duration
			replies, errorsSeen atomic.Int64
			most                atomic.Int64
			firstErr            atomic.Value
		)
		stop := make(chan struct{})
		go sampleHandles(env.dir, stop, &most)
		resetPeakRSS()
		start := time.Now()
		end := start.Add(duration)
		var wg sync.WaitGroup
		for i := range sessions {
			c := conns[i].conn
			wg.Go(func() {
				for time.Now().Before(end) {
					sent := time.Now()
					if err := c.WriteJSON(map[string]any{"type": "send", "text": "hello"}); err != nil {
						errorsSeen.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						return
					}
					gotFirst := false
					for {
						_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
						_, data, err := c.ReadMessage()
						if err != nil {
							errorsSeen.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
							return
						}
						f := string(data)
						now := time.Now()
						if m := producedAt.FindStringSubmatch(f); m != nil && !gotFirst {
							gotFirst = true
							ns, _ := strconv.ParseInt(m[1], 10, 64)
							mu.Lock()
							firstTok = append(firstTok, now.Sub(sent))
							relay = append(relay, now.Sub(time.Unix(0, ns)))
							mu.Unlock()
						}
						if m := noticeText.FindStringSubmatch(f); m != nil && strings.TrimSpace(m[1]) != "" {
							errorsSeen.Add(1)
							firstErr.CompareAndSwap(nil, m[1])
						}
						if strings.Contains(f, finalMarker) {
							if strings.Contains(f, `data-status="error"`) || !gotFirst {
								errorsSeen.Add(1)
								firstErr.CompareAndSwap(nil, f)
							} else {
								replies.Add(1)
							}
							break
						}
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(stop)
		rss, peak := procStatus("VmRSS"), procStatus("VmHWM")

		// What the database holds: every user message has its complete reply.
		ctx := context.Background()
		var users, complete, lost int
		for _, id := range ids {
			msgs, _, err := env.db.LatestMessages(ctx, id, 100000)
			if err != nil {
				b.Fatal(err)
			}
			u, a := 0, 0
			for _, m := range msgs {
				switch {
				case m.Role == store.RoleUser:
					u++
				case m.Role == store.RoleAssistant && m.Status == store.StatusComplete:
					a++
				}
			}
			users, complete, lost = users+u, complete+a, lost+max(0, u-a)
		}
		runs, spans := storetest.Int(b, env.db, `SELECT COUNT(*) FROM runs`), storetest.Int(b, env.db, `SELECT COUNT(*) FROM spans`)

		b.ReportMetric(float64(replies.Load())/elapsed.Seconds(), "replies/s")
		b.ReportMetric(pct(firstTok, 50), "first-p50-ms")
		b.ReportMetric(pct(firstTok, 99), "first-p99-ms")
		b.ReportMetric(pct(relay, 50), "relay-p50-ms")
		b.ReportMetric(pct(relay, 99), "relay-p99-ms")
		b.ReportMetric(float64(errorsSeen.Load()), "errors")
		b.ReportMetric(float64(lost), "lost")
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(peak, "peak-rss-MiB")
		b.ReportMetric(float64(most.Load()), "max-db-handles")
		b.Logf("%d sessions × %v (memory extraction %v): %d replies, %d errors, %d lost; stored %d user messages, %d complete replies, %d runs, %d spans; load %s",
			sessions, duration, extract, replies.Load(), errorsSeen.Load(), lost, users, complete, runs, spans, loadAvg())
		if e := firstErr.Load(); e != nil {
			b.Logf("first error: %.500s", e)
		}
		for _, c := range conns {
			c.conn.Close()
		}
	}
}

// BenchmarkLoadConnects: a user with many runs (10 per chat), then M websocket
// connects at once to that user's chats (a reconnect storm after a restart),
// held open together. Reports connect p50/p99 (dial to the snapshot frame),
// peak RSS over the storm, and the most database handles seen.
func BenchmarkLoadConnects(b *testing.B) {
	connects := envInt("ATRIUM_LOAD_CONNECTS", 100)
	runs := envInt("ATRIUM_LOAD_RUNS", 1000)
	for b.Loop() {
		env := newTestEnv(b)
		admin := env.setup()
		admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
		owner := env.userID("admin")
		ctx := context.Background()
		chats := max(1, runs/10)
		ids := make([]string, chats)
		ctxSpan := []byte(`{"zones":[{"name":"pinned","tokens":120},{"name":"summary","tokens":0},{"name":"recent","tokens":900}],"budget":32768}`)
		for c := range chats {
			ids[c] = admin.newSession()
			for r := range 10 {
				run := store.RunStart{ID: fmt.Sprintf("%s-%d", ids[c], r), SessionID: ids[c], OwnerID: owner,
					StartedAt: time.Now().Add(time.Duration(c*10+r) * time.Millisecond)}
				if _, err := env.db.InsertSpan(ctx, &run, store.SpanRow{RunID: run.ID, Seq: 1, Kind: "context",
					StartedAt: run.StartedAt, Data: ctxSpan}); err != nil {
					b.Fatal(err)
				}
			}
		}
		rssBefore := procStatus("VmRSS")
		var most atomic.Int64
		stop := make(chan struct{})
		go sampleHandles(env.dir, stop, &most)
		resetPeakRSS()

		d := websocket.Dialer{Jar: admin.jar, HandshakeTimeout: 60 * time.Second}
		conns := make([]*websocket.Conn, connects)
		took := make([]time.Duration, connects)
		var failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for i := range connects {
			wg.Go(func() {
				t0 := time.Now()
				c, _, err := d.Dial(admin.wsURL(ids[i%chats]), map[string][]string{"Origin": {env.ts.URL}})
				if err != nil {
					failed.Add(1)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
				if _, data, err := c.ReadMessage(); err != nil || !strings.Contains(string(data), `id="messages"`) {
					failed.Add(1)
				}
				took[i], conns[i] = time.Since(t0), c
			})
		}
		wg.Wait()
		storm := time.Since(start)
		peak := procStatus("VmHWM")
		close(stop)
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		b.ReportMetric(pct(took, 50), "connect-p50-ms")
		b.ReportMetric(pct(took, 99), "connect-p99-ms")
		b.ReportMetric(rssBefore, "rss-before-MiB")
		b.ReportMetric(peak, "peak-rss-MiB")
		b.ReportMetric(float64(most.Load()), "max-db-handles")
		b.ReportMetric(float64(failed.Load()), "failed")
		b.Logf("%d connects over %d chats with %d runs in %v (%d failed); load %s", connects, chats, chats*10, storm, failed.Load(), loadAvg())
	}
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
