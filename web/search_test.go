package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/store"
)

// searchHTMX is the sidebar box's request: GET /search with HX-Request, answered with
// the list of results only.
func (b *browser) searchHTMX(q string) response {
	b.env.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.env.ts.URL+"/search?q="+url.QueryEscape(q), nil)
	req.Header.Set("HX-Request", "true")
	return b.do(req)
}

func appendText(t *testing.T, db *store.DB, sessionID, role, text string) {
	t.Helper()
	if err := db.AppendMessage(context.Background(), &store.Message{SessionID: sessionID, Role: role, Content: text}); err != nil {
		t.Fatal(err)
	}
}

var hitRE = regexp.MustCompile(`data-testid="search-hit" data-session-id="([^"]+)" data-seq="(\d+)"`)

func hitList(body string) []string {
	var out []string
	for _, m := range hitRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1]+"#"+m[2])
	}
	return out
}

// TestSearchOnlyOwnChats: a search never shows another user's chat, title or text, and
// a result link into another user's chat is a 404.
func TestSearchOnlyOwnChats(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	mine := admin.newSession()
	theirs := bob.newSession()
	appendText(t, env.db, mine, "user", "The zebra crossing near the station")
	appendText(t, env.db, theirs, "user", "zebra bobsecret: my diary")
	wantStatus(t, bob.post("/s/"+theirs+"/rename", url.Values{"title": {"Zebra notes of bob"}}), http.StatusOK)

	r := admin.searchHTMX("zebra")
	wantStatus(t, r, http.StatusOK)
	if got := hitList(r.body); strings.Join(got, ",") != mine+"#1" {
		t.Errorf("admin's hits %v, want only %s#1", got, mine)
	}
	for _, leak := range []string{theirs, "bobsecret", "notes of bob"} {
		if strings.Contains(r.body, leak) {
			t.Errorf("admin's search shows bob's %q", leak)
		}
	}
	r = bob.searchHTMX("zebra")
	if got := hitList(r.body); strings.Join(got, ",") != theirs+"#0,"+theirs+"#1" {
		t.Errorf("bob's hits %v, want his title and message", got)
	}
	if strings.Contains(r.body, "station") || strings.Contains(r.body, mine) {
		t.Error("bob's search shows the admin's chat")
	}
	// Without JS the box's form opens the page: the query kept in its field, the same hits.
	r = admin.get("/search?q=zebra")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `value="zebra"`) || strings.Join(hitList(r.body), ",") != mine+"#1" ||
		!strings.Contains(r.body, `href="/s/`+mine+`?at=1#msg-1"`) || !strings.Contains(r.body, `id="chat-search"`) {
		t.Errorf("the search page lacks the query, the hit or its link:\n%.2000s", r.body)
	}
	// The plain page is as strict.
	r = bob.get("/search?q=crossing")
	wantStatus(t, r, http.StatusOK)
	if strings.Contains(r.body, "station") || !strings.Contains(r.body, `data-testid="search-none"`) {
		t.Error("bob's search page shows the admin's message, or not 'No chat matches'")
	}
	wantStatus(t, admin.get("/s/"+theirs+"?at=1"), http.StatusNotFound)
	wantStatus(t, admin.get("/s/"+theirs+"/newer?after=0"), http.StatusNotFound)
	// Not logged in: no search at all.
	if r := env.browser().get("/search?q=zebra"); r.StatusCode != http.StatusSeeOther || strings.Contains(r.body, "zebra") {
		t.Errorf("anonymous search: %d", r.StatusCode)
	}
}

// TestSearchSnippetsEscaped: the snippet is the message text, escaped, around the match,
// and the only markup in it is the server's <mark>: HTML, attributes, markdown, NUL and
// bidi controls from the message (or the title) do nothing.
func TestSearchSnippetsEscaped(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	wantStatus(t, admin.post("/s/"+id+"/rename", url.Values{"title": {`<b>Bold</b> "><img src=x onerror=alert(1)> title`}}), http.StatusOK)
	hostile := strings.Repeat("padding words ", 20) + "Needle 我的猫喜欢吃鱼 needle nul\x00here \u202eevil\u202c " +
		`<script>alert(1)</script> "><img src=x onerror=alert(2)> **bold** [x](javascript:alert(3)) ` +
		strings.Repeat("tail words ", 30)
	appendText(t, env.db, id, store.RoleAssistant, hostile)

	r := admin.searchHTMX("needle")
	wantStatus(t, r, http.StatusOK)
	body := r.body
	for _, bad := range []string{"<script>alert", "<img", "<b>", "<strong>", "\x00", "\u202e", "\u202c", `href="javascript`} {
		if strings.Contains(body, bad) {
			t.Errorf("results contain %q:\n%s", bad, body)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;", "**bold**",
		"<mark>Needle</mark> 我的猫喜欢吃鱼 <mark>needle</mark>", "nul here", "…"} {
		if !strings.Contains(body, want) {
			t.Errorf("results lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "padding words padding words padding words padding words padding") || strings.Contains(body, "…dding") {
		t.Error("the snippet is not cut around the match, at a word boundary")
	}
	if n := strings.Count(body, "<mark>"); n != 2 {
		t.Errorf("%d <mark>, want 2 (one per match)", n)
	}

	r = admin.searchHTMX("喜欢")
	if !strings.Contains(r.body, "我的猫<mark>喜欢</mark>吃鱼") {
		t.Errorf("Chinese match not marked:\n%s", r.body)
	}
	r = admin.searchHTMX("title")
	if !strings.Contains(r.body, "&lt;b&gt;Bold&lt;/b&gt; &#34;&gt;&lt;img src=x onerror=alert(1)&gt; <mark>title</mark>") || strings.Contains(r.body, "<img") {
		t.Errorf("title hit not escaped and marked:\n%s", r.body)
	}
}

// TestSearchOddQueries: FTS5 operators, quotes, one character, control characters and
// long input are plain text to search for, never an error; too long a query is refused
// with its reason.
func TestSearchOddQueries(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	appendText(t, env.db, id, "user", `She said "NEAR(x y)" OR * maybe -not col:val ^start`)
	for _, q := range []string{`"`, `""`, `"unterminated`, `*`, `OR`, `NEAR(`, `NEAR(x y)`, `x OR y`, `-not`, `col:val`, `^start`,
		"a", "\x00", "\u202e", "nul\x00l", "'; DROP TABLE messages; --", `\`, `%`, `_`, strings.Repeat("a", 200), "   "} {
		for _, htmx := range []bool{true, false} {
			var r response
			if htmx {
				r = admin.searchHTMX(q)
			} else {
				r = admin.get("/search?q=" + url.QueryEscape(q))
			}
			if r.StatusCode != http.StatusOK {
				t.Errorf("query %q (htmx %v): status %d\n%.300s", q, htmx, r.StatusCode, r.body)
			}
		}
	}
	// Operators are searched for as text.
	for _, q := range []string{`NEAR(`, `"NEAR(x`, `OR *`, `col:val`, `"`} {
		if got := hitList(admin.searchHTMX(q).body); strings.Join(got, ",") != id+"#1" {
			t.Errorf("query %q: hits %v, want the message", q, got)
		}
	}
	if got := hitList(admin.searchHTMX(`%`).body); len(got) != 0 {
		t.Errorf("%% matched %v: LIKE wildcards must be literal", got)
	}
	r := admin.searchHTMX(strings.Repeat("a", 201))
	wantStatus(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(r.body, "at most 200 characters") {
		t.Errorf("a too long query does not say why: %s", r.body)
	}
	if r := admin.searchHTMX(""); r.StatusCode != http.StatusOK || strings.Contains(r.body, "search-hit") || strings.Contains(r.body, "search-none") {
		t.Errorf("empty query: %d %s", r.StatusCode, r.body)
	}
}

// TestSearchResultOpensOldMessage: a hit older than the chat's latest page opens the
// whole turns around it, the message marked, with Load older and Load newer; the newer
// pages lead to the end; the websocket's first snapshot is the same window, so it does
// not morph the page back to the latest messages.
func TestSearchResultOpensOldMessage(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	seedMessages(t, env.db, id, 40, 40)
	appendText(t, env.db, id, "user", "Where did the platypus go?") // seq 41
	seedMessages(t, env.db, id, 100, 40)                            // 42..141, even seqs are user messages

	r := admin.searchHTMX("platypus")
	if !strings.Contains(r.body, `href="/s/`+id+`?at=41#msg-41"`) {
		t.Fatalf("no link to message 41:\n%s", r.body)
	}
	r = admin.get("/s/" + id + "?at=41")
	wantStatus(t, r, http.StatusOK)
	if got, want := msgSeqs(r.body), seqStrings(15, 67); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("opened at 41, the page shows %v, want %v", got, want)
	}
	if !regexp.MustCompile(`class="msg msg-user status-complete jump-target" id="msg-41"`).MatchString(r.body) || strings.Count(r.body, "jump-target") != 1 {
		t.Error("message 41 is not the one marked as the target")
	}
	if !strings.Contains(r.body, `messages?before=15"`) || !strings.Contains(r.body, `/newer?after=67"`) {
		t.Error("no Load older before 15 and Load newer after 67")
	}
	if !strings.Contains(r.body, `ws-connect="/s/`+id+`/ws?at=41"`) {
		t.Error("the websocket is not opened at the message")
	}

	r = admin.get("/s/" + id + "/newer?after=67")
	wantStatus(t, r, http.StatusOK)
	if got, want := msgSeqs(r.body), seqStrings(68, 117); strings.Join(got, ",") != strings.Join(want, ",") || !strings.Contains(r.body, `/newer?after=117"`) {
		t.Fatalf("newer page %v (want %v) or no next Load newer", got, want)
	}
	r = admin.get("/s/" + id + "/newer?after=117")
	if got, want := msgSeqs(r.body), seqStrings(118, 141); strings.Join(got, ",") != strings.Join(want, ",") || strings.Contains(r.body, `id="newer"`) {
		t.Fatalf("last newer page %v (want %v), or a Load newer at the end", got, want)
	}
	wantStatus(t, admin.get("/s/"+id+"/newer?after=x"), http.StatusBadRequest)

	d := websocket.Dialer{Jar: admin.jar, HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial(admin.wsURL(id)+"?at=41", http.Header{"Origin": {env.ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ws := &wsConn{t: t, conn: conn}
	if got, want := msgSeqs(ws.next()), seqStrings(15, 67); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("websocket snapshot at 41 shows %v, want %v", got, want)
	}

	// A message on the latest page: the normal page, with it marked; bad or unknown ?at=
	// is the normal page.
	r = admin.get("/s/" + id + "?at=130")
	if got := msgSeqs(r.body); len(got) != 50 || got[49] != "141" || !strings.Contains(r.body, `jump-target" id="msg-130"`) || strings.Contains(r.body, `id="newer"`) {
		t.Errorf("at 130: %v, target marked %v", got, strings.Contains(r.body, `jump-target" id="msg-130"`))
	}
	for _, at := range []string{"abc", "-5", "99999", "0"} {
		r = admin.get("/s/" + id + "?at=" + at)
		if got := msgSeqs(r.body); r.StatusCode != http.StatusOK || len(got) != 50 || got[49] != "141" || strings.Contains(r.body, "jump-target") {
			t.Errorf("at=%s: status %d, %d messages", at, r.StatusCode, len(got))
		}
	}
}

// TestSearchLongMessagesStayCheap: a hit in a long message is cut around its match
// before anything is copied rune by rune, so a search over messages of hundreds of
// kilobytes allocates about what it reads, not four times each message twice.
func TestSearchLongMessagesStayCheap(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	long := strings.Repeat("filler words here ", 20_000) // 360 KB
	for range 4 {
		appendText(t, env.db, id, store.RoleAssistant, long+"the Zebracorn lives here "+long)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := admin.searchHTMX("zebracorn")
	runtime.ReadMemStats(&after)
	wantStatus(t, r, http.StatusOK)
	if n := strings.Count(r.body, "filler words here the <mark>Zebracorn</mark> lives here filler"); n != 4 {
		t.Errorf("%d snippets around the match, want 4:\n%.2000s", n, r.body)
	}
	// Reading the four hits is about 3 MB (2.9 MB measured in all); turning each whole
	// into runes and folded runes made it 41 MB.
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("the search allocated %.1f MB", float64(grew)/(1<<20))
	if grew > 12<<20 {
		t.Errorf("the search allocated %d MB", grew>>20)
	}
}
