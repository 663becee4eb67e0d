package web

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/agent"
	"atrium/internal/markdown"
	"atrium/internal/store"
	"atrium/views"
)

// Hub benchmarks. Results and how to run them: docs/benchmarks.md.

const (
	relayInterval = 30 * time.Millisecond // what main.go gives NewHub
	relayTokenGap = 20 * time.Millisecond // 50 tokens/s per session
	relayTokens   = 100                   // tokens per reply and session
)

// Markers of the frames a browser receives (views/frames.templ).
var (
	markUserMessage = []byte(`hx-swap-oob="beforeend:#messages"`)
	markFinal       = []byte(`hx-swap-oob="outerHTML:#msg-live"`)
	markTail        = []byte(`id="msg-live-tail"`)
	tokenID         = regexp.MustCompile(`\bt(\d{4})\b`)
)

// relayToken is the i-th token (from 1) of a relay reply: unique, so the client can
// tell which tokens a frame shows, with a paragraph break every 40 tokens so that
// finished blocks are split off and appended.
func relayToken(i int) string {
	if i%40 == 0 {
		return fmt.Sprintf("t%04d\n\n", i)
	}
	return fmt.Sprintf("t%04d ", i)
}

// BenchmarkStreamRelay measures provider chunk → websocket frame latency through a real
// websocket: hub.Publish in a producer goroutine, the connection subscribed to the hub
// as chatSocket does, a gorilla client reading frames. Each session streams relayTokens
// unique tokens at 50 tokens/s; latency is the time from Publish of a token to the
// first received frame that shows it. It fails if a token is lost or reordered or the
// final frame is not the whole reply.
func BenchmarkStreamRelay(b *testing.B) {
	for _, sessions := range []int{1, 100, 200} {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			benchmarkRelay(b, sessions)
		})
	}
}

func benchmarkRelay(b *testing.B, sessions int) {
	h := NewHub(HubConfig{Interval: relayInterval, Log: slog.New(slog.DiscardHandler)})
	srv := relayServer(h)
	defer srv.Close()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/?session="

	var (
		latencies []time.Duration
		frames    int
	)
	b.ResetTimer()
	for iter := 0; iter < b.N; iter++ {
		results := make([]relayResult, sessions)
		conns := make([]*websocket.Conn, sessions)
		ids := make([]string, sessions)
		for j := range sessions {
			ids[j] = fmt.Sprintf("s%d-%d", iter, j)
			conn, _, err := websocket.DefaultDialer.Dial(wsURL+ids[j], nil)
			if err != nil {
				b.Fatalf("dial: %v", err)
			}
			// The first frame is the subscription snapshot: from here on nothing is missed.
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, _, err := conn.ReadMessage(); err != nil {
				b.Fatalf("snapshot frame: %v", err)
			}
			conns[j] = conn
		}

		var wg sync.WaitGroup
		start := time.Now().Add(10 * time.Millisecond)
		for j := range sessions {
			res := &results[j]
			res.published = make([]time.Time, relayTokens+1)
			res.seen = make([]time.Time, relayTokens+1)
			wg.Add(2)
			go func() {
				defer wg.Done()
				res.err = readRelay(conns[j], res)
				conns[j].Close()
			}()
			// Stagger the sessions over one token gap, as independent replies would be.
			offset := relayTokenGap * time.Duration(j) / time.Duration(sessions)
			go func() {
				defer wg.Done()
				res.want = produceRelay(h, ids[j], int64(2*iter+1), start.Add(offset), res.published)
			}()
		}
		wg.Wait()

		for j, res := range results {
			if res.err != nil {
				b.Fatalf("session %d: %v", j, res.err)
			}
			if !strings.Contains(res.final, `<div class="md">`+markdown.Render(res.want)+"</div>") {
				b.Fatalf("session %d: final frame is not the whole reply:\n%s", j, res.final)
			}
			for i := 1; i <= relayTokens; i++ {
				if res.seen[i].IsZero() {
					b.Fatalf("session %d: token %d never shown", j, i)
				}
				latencies = append(latencies, res.seen[i].Sub(res.published[i]))
			}
			frames += res.frames
		}
	}
	b.StopTimer()

	slices.Sort(latencies)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(latencies[len(latencies)/2]), "p50-ms")
	b.ReportMetric(ms(latencies[(len(latencies)*99)/100]), "p99-ms")
	b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
	b.ReportMetric(float64(frames)/float64(b.N*sessions), "frames/reply")
}

// relayServer answers websocket upgrades the way chatSocket does once the session is
// authorised: subscribe a client to the hub, write its frames with writeLoop, read
// until the peer goes away. The session ID comes from the query string.
func relayServer(h *Hub) *httptest.Server {
	up := websocket.Upgrader{ReadBufferSize: 4096, WriteBufferSize: 8192}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		id := r.URL.Query().Get("session")
		cl := newClient()
		h.subscribe(id, cl, func(Snapshot) []byte {
			return renderFrame(views.FrameRunState("idle"))
		})
		defer h.unsubscribe(id, cl)
		go (&Server{}).writeLoop(conn, cl)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				break
			}
		}
		cl.close()
	}))
}

// produceRelay publishes one reply like an agent run: the user message, relayTokens
// text deltas paced relayTokenGap apart from start, and the final message. It records
// when each token was published and returns the whole reply.
func produceRelay(h *Hub, sessionID string, seq int64, start time.Time, published []time.Time) string {
	time.Sleep(time.Until(start))
	h.Publish(agent.Event{Kind: agent.EventUserMessage, SessionID: sessionID,
		Message: &store.Message{SessionID: sessionID, Seq: seq, Role: "user", Content: "Count for me.", Status: "complete"}})
	h.Publish(agent.Event{Kind: agent.EventRunStarted, SessionID: sessionID, Model: "bench"})
	var full strings.Builder
	for i := 1; i <= relayTokens; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * relayTokenGap)))
		tok := relayToken(i)
		full.WriteString(tok)
		published[i] = time.Now()
		h.Publish(agent.Event{Kind: agent.EventText, SessionID: sessionID, Text: tok})
	}
	h.Publish(agent.Event{Kind: agent.EventFinal, SessionID: sessionID, Message: &store.Message{
		SessionID: sessionID, Seq: seq + 1, Role: "assistant", Content: full.String(), Status: "complete", Model: "bench"}})
	return full.String()
}

type relayResult struct {
	published []time.Time // by token number, set by the producer
	seen      []time.Time // by token number: when a frame first showed it
	want      string      // the whole reply, as published
	final     string      // the final frame
	frames    int         // live frames received (not counting user message and final)
	err       error
}

// readRelay reads one reply's frames until the final one, keeping the client's view of
// the live reply (appended blocks + morphed tail) and checking after every frame that it
// shows tokens 1..k in order, with k never shrinking.
func readRelay(conn *websocket.Conn, res *relayResult) error {
	var blocks, tail []int
	shown := 0
	for {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, frame, err := conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("read after %d tokens: %w", shown, err)
		}
		now := time.Now()
		switch {
		case bytes.Contains(frame, markUserMessage):
			blocks, tail, shown = nil, nil, 0
			continue
		case bytes.Contains(frame, markFinal):
			ids := tokenIDs(frame)
			if err := checkPrefix(ids, relayTokens); err != nil {
				return fmt.Errorf("final frame: %w", err)
			}
			for _, id := range ids {
				if res.seen[id].IsZero() {
					res.seen[id] = now
				}
			}
			res.final = string(frame)
			return nil
		}
		res.frames++
		head, tailPart := frame, []byte(nil)
		if i := bytes.Index(frame, markTail); i >= 0 {
			head, tailPart = frame[:i], frame[i:]
			tail = tokenIDs(tailPart)
		}
		blocks = append(blocks, tokenIDs(head)...)
		view := append(slices.Clip(blocks), tail...)
		if err := checkPrefix(view, 0); err != nil {
			return fmt.Errorf("live frame %d: %w", res.frames, err)
		}
		if len(view) < shown {
			return fmt.Errorf("live frame %d: shows %d tokens, before %d", res.frames, len(view), shown)
		}
		for _, id := range view[shown:] {
			res.seen[id] = now
		}
		shown = len(view)
	}
}

func tokenIDs(frame []byte) []int {
	var ids []int
	for _, m := range tokenID.FindAllSubmatch(frame, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		ids = append(ids, n)
	}
	return ids
}

// checkPrefix reports an error unless ids is 1, 2, ..., len(ids) (and has n of them, if
// n > 0).
func checkPrefix(ids []int, n int) error {
	for i, id := range ids {
		if id != i+1 {
			return fmt.Errorf("token %d where token %d belongs (lost or reordered)", id, i+1)
		}
	}
	if n > 0 && len(ids) != n {
		return fmt.Errorf("%d tokens, want %d", len(ids), n)
	}
	return nil
}

// BenchmarkStreamCPU measures the process CPU time (user+sys, all goroutines) spent
// streaming one reply of realistic markdown through the hub to one subscribed client
// whose frames are drained (no socket), from the user message to the final frame.
//
//   - flush=every-token: a fake clock moves past the interval before every token, so
//     the tail is rendered once per token: the worst case.
//   - flush=50tok/s: a fake clock moves 20 ms per token with the production 30 ms
//     interval, so about every other token flushes: a reply streamed at 50 tokens/s.
//   - flush=burst: the real clock, tokens published as fast as possible; the 30 ms
//     interval coalesces almost all of them.
//
// tokens=N shows that the cost is linear in the reply length.
func BenchmarkStreamCPU(b *testing.B) {
	modes := []struct {
		name string
		step time.Duration // fake clock step per token; 0 = real clock
	}{
		{"flush=every-token", relayInterval + time.Millisecond},
		{"flush=50tok/s", relayTokenGap},
		{"flush=burst", 0},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			for _, n := range []int{1000, 4000, 16000} {
				b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
					benchmarkCPU(b, markdownTokens(n), m.step)
				})
			}
		})
	}
}

func benchmarkCPU(b *testing.B, tokens []string, step time.Duration) {
	now := time.Now
	var clock atomic.Int64
	if step > 0 {
		clock.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		now = func() time.Time { return time.Unix(0, clock.Load()) }
	}
	h := NewHub(HubConfig{Interval: relayInterval, Now: now, Log: slog.New(slog.DiscardHandler)})
	const id = "cpu"
	cl := newClient()
	h.subscribe(id, cl, func(Snapshot) []byte { return nil })
	defer h.unsubscribe(id, cl)

	finals := make(chan int) // live frames before each final frame
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		n := 0
		for {
			select {
			case f := <-cl.send:
				if bytes.Contains(f, markFinal) {
					finals <- n
					n = 0
				} else {
					n++
				}
			case <-cl.closed:
				close(finals) // dropped for falling behind
				return
			case <-stop:
				return
			}
		}
	}()
	full := strings.Join(tokens, "")

	var frames int
	runtime.GC()
	before := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		seq := int64(2*i + 1)
		h.Publish(agent.Event{Kind: agent.EventUserMessage, SessionID: id,
			Message: &store.Message{SessionID: id, Seq: seq, Role: "user", Content: "Explain.", Status: "complete"}})
		for _, tok := range tokens {
			clock.Add(int64(step))
			h.Publish(agent.Event{Kind: agent.EventText, SessionID: id, Text: tok})
			// A real stream is far slower than this loop; do not let the client fall
			// 256 frames behind and be dropped.
			for len(cl.send) > clientBuffer/2 {
				time.Sleep(50 * time.Microsecond)
			}
		}
		h.Publish(agent.Event{Kind: agent.EventFinal, SessionID: id, Message: &store.Message{
			SessionID: id, Seq: seq + 1, Role: "assistant", Content: full, Status: "complete"}})
		n, ok := <-finals
		if !ok {
			b.Fatal("the client was dropped: it could not keep up")
		}
		frames += n
	}
	b.StopTimer()
	cpu := cpuTime() - before
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/reply")
	b.ReportMetric(float64(frames)/float64(b.N), "frames/reply")
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// markdownTokens returns n tokens of a plausible model reply, cut from a repeating
// section (~730 tokens) with a heading, paragraphs with some **bold**, an eight-item
// list and a 40-line fenced code block. Tokens are words with their spacing, as
// providers stream them.
func markdownTokens(n int) []string {
	words := strings.Fields(`the hub renders only the unfinished tail of a reply while finished
		blocks are appended once so a long answer costs time in proportion to its length and
		every browser watching the session sees the same frames in the same order even when
		the network is slow or the model is fast`)
	var toks []string
	w := 0
	word := func() string { w++; return words[w%len(words)] }
	paragraph := func(nwords int) {
		for i := range nwords {
			s := word()
			if i%12 == 5 {
				s = "**" + s + "**"
			}
			if i == nwords-1 {
				toks = append(toks, s+".\n\n")
			} else {
				toks = append(toks, s+" ")
			}
		}
	}
	for section := 1; len(toks) < n; section++ {
		toks = append(toks, "## ", "Section ", strconv.Itoa(section), "\n\n")
		for range 3 {
			paragraph(60)
		}
		for range 8 {
			toks = append(toks, "- ")
			for i := range 10 {
				if i == 9 {
					toks = append(toks, word()+"\n")
				} else {
					toks = append(toks, word()+" ")
				}
			}
		}
		toks = append(toks, "\n")
		paragraph(60)
		toks = append(toks, "```go\n")
		for line := range 40 {
			toks = append(toks, "\tx", " :=", " compute(a,", " b)", " //", fmt.Sprintf(" step %d\n", line))
		}
		toks = append(toks, "```\n\n")
		paragraph(60)
	}
	return toks[:n]
}

// TestTailExtension checks that extending the tail's HTML without rendering (markdown.ExtendTail)
// always gives what rendering would: streams of tricky markdown, cut into words, bytes
// and random chunks, each chunk flushed, the tail compared with markdown.Render.
func TestTailExtension(t *testing.T) {
	docs := []string{
		strings.Join(markdownTokens(2200), ""),
		"visit www.example.com now and then www.test.org. ok, WWW.X.COM and Www.y.z wwwx done",
		"email me at a@b.com please, or mailto:x@y.z and http://example.com/path?q=1 words",
		"**bold** text *em* and `code` and ~~del~~ done **unclosed bold words and *open em words",
		"- item one\n- item two with words\n\n1. first words\n2) second words\n\nafter words",
		"> quote line words\nlazy continuation words\n\npara words",
		"| a | b |\n|---|---|\n| c | d |\nmore row words\n\nafter words",
		"a | b\n--|--\nc d e words\nf | g words\n",
		"# Heading words\n\nSetext words\n===\n\nOther words\n---\n\nend",
		"[ref]: http://x.com 'title words\nmore'\n\nSee [ref] words [x]: y\n\n[z]: w words",
		"```go\nfunc main() {\n\tfmt.Println(\"hi <b> & 'q'\")\n}\n```\n\nafter code words",
		"~~~\ncode ``` inside\n  ```\n~~~~\ntext words\n\n````\nx\n```\nstill code\n````\nout words",
		"    indented code words\n    more\n\npara words",
		"- a\n\n  ```\n  code in list words\n  ```\n\n- b words",
		"Text with trailing spaces   \nnext line words  \nthird",
		"&amp entity &copy; words &#35 x &lt y",
		"word\\\nhard break words",
		"__init__ words and _under_ x __open words",
		"*   star item words\n+ plus item words\n\n***\n\nwords * * * and - - - words",
		"Heading? No! Really, yes. 3.14 is pi 1. not a list\n2024 was a year. 2024. Year words",
		"10. ten words\n11. eleven words\n\n1234567890. not a list words",
		"![alt words](http://x/y.png) after words ![open alt words",
		"<div>raw html words</div> and <script>alert(1)</script> words <b words",
		"\u00dcn\u00efc\u00f6d\u00e9 words \u2014 dashes \u201cquotes\u201d \u65e5\u672c\u8a9e words",
		"```\nunclosed code block words\nwith lines <and> & \"quotes\"\n\tand tabs",
		"  ```\nindented fence words\n  more\n  ```\nafter",
		"para words\n```\ncode after para\n```\nafter",
		"- [ ] task words\n- [x] done words\n- [ plain words",
		"1. a\n\n   nested para words\n\n   - nested item words\n     lazy words",
		"text\r\nwith crlf words\r\n```\r\ncode\r\n```\r\n",
		"a\tb\ttab words\n\tindented tab words",
		"foo\n\n```js\nconst s = `template ${x}`;\n``\n```\nafter words",
		"Term words\n: not a definition words\n\nfoo  \nbar words",
		"some **bold** words, *em* too, **two** **in** a **row**. And **end**, *x*! **y**? done",
		"**open bold words **w** and *open em *e* words ** x** **y ** *z** **q* words",
		"*outer words **inner** still* after **a**b **c**d *e*f word**g** h*i* done",
		"***three*** words ****four**** and **w.** *e,* **a1** **9** words",
		"- item **bold** words *em*\n- next **b** words\n\n1. **x** y\n\n> quote **q** words",
		"| a | b |\n|---|---|\n| **c** d | e *f* words",
		"__under__ **mixed_** **x_y** words _**a**_ **b**_ words",
		"para words\n\nnext **bold** para\n\n- list\n\nafter *em* words\n\n  indented words",
		"# Head **bold** words\n\nText\n===\n\n**Bold line** words",
		"www **www** and **http** words **a@b** x",
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for d, doc := range docs {
		cuts := map[string][]string{
			"words": regexp.MustCompile(`\S+\s*|\s+`).FindAllString(doc, -1),
			"bytes": strings.Split(doc, ""),
		}
		var chunks []string
		for rest := doc; rest != ""; {
			n := min(len(rest), 1+rnd.IntN(8))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		cuts["random"] = chunks
		for name, chunks := range cuts {
			l := &liveReply{}
			for i, c := range chunks {
				l.text = append(l.text, c...)
				l.render()
				if k := markdown.SplitStable(string(l.text[l.stable:])); k != 0 {
					t.Fatalf("doc %d cut in %s, after chunk %d (%q): tail %q has finished blocks",
						d, name, i, c, l.text[l.stable:])
				}
				if want := markdown.Render(string(l.text[l.stable:])); l.tailHTML != want {
					t.Fatalf("doc %d cut in %s, after chunk %d (%q): tail of %q\n got %q\nwant %q",
						d, name, i, c, l.text[l.stable:], l.tailHTML, want)
				}
			}
		}
	}
}

// TestFrameMarkup checks that the live frames the hub writes directly are byte for byte
// what the templ components render.
func TestFrameMarkup(t *testing.T) {
	reasoning := renderFrame(views.FrameLiveReasoning("why <not>"))
	for _, html := range []string{"", "<p>x &amp; y</p>\n", markdown.Render("# T\n\n```go\nx\n```\n")} {
		for _, tt := range []struct {
			blocks, tail bool
			want         []byte
		}{
			{true, false, renderFrame(views.FrameLiveBlocks(html))},
			{false, true, renderFrame(views.FrameLiveTail(html))},
			{true, true, renderFrame(views.FrameLiveBlocks(html), views.FrameLiveTail(html+"tail"))},
		} {
			tail := html
			if tt.blocks && tt.tail {
				tail += "tail"
			}
			if got := appendLiveFrame(nil, tt.blocks, html, tt.tail, tail); !bytes.Equal(got, tt.want) {
				t.Errorf("appendLiveFrame(blocks=%v, tail=%v, %q) =\n%s\nwant\n%s", tt.blocks, tt.tail, html, got, tt.want)
			}
			want := append(slices.Clip(reasoning), tt.want...)
			if got := appendLiveFrame(reasoning, tt.blocks, html, tt.tail, tail); !bytes.Equal(got, want) {
				t.Errorf("appendLiveFrame with reasoning =\n%s\nwant\n%s", got, want)
			}
		}
	}
	if got := appendLiveFrame(nil, false, "", false, ""); got != nil {
		t.Errorf("empty frame = %q, want nil", got)
	}
}
