package web_test

import (
	"bytes"
	"context"
	"html"
	"mime/multipart"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/trace"
)

// chatRun has b send text in a new chat, the fake model answering reply, and
// returns the id of the run once it is recorded as finished.
func (e *testEnv) chatRun(b *browser, username, text, reply string) string {
	e.t.Helper()
	id := b.newSession()
	e.llm.Enqueue(llmtest.Reply{Text: []string{reply}})
	ws := b.dial(id)
	ws.send(text)
	ws.until(finalMarker)
	var runID string
	testkit.Eventually(e.t, 5*time.Second, "the run recorded", func() bool {
		runs, err := e.db.ListRuns(context.Background(), e.userID(username), id, 1)
		if err != nil || len(runs) == 0 || runs[0].EndedAt.IsZero() {
			return false
		}
		runID = runs[0].ID
		return true
	})
	return runID
}

var adminRunRE = regexp.MustCompile(`data-testid="admin-run" data-run-id="([^"]+)"`)

func listedRuns(body string) []string {
	var ids []string
	for _, m := range adminRunRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// Another user's run is metadata in the list and on its page until the admin
// reveals it; the reveal is audited before anything is shown, the owner sees it
// on their Memories page, and it lapses after an hour. Users get the 404 of a
// page that does not exist.
func TestAdminRunsHiddenUntilReveal(t *testing.T) {
	env, admin, _ := chatEnv(t)
	ann := env.user(admin, "ann")
	bob := env.user(admin, "bob")
	annRun := env.chatRun(ann, "ann", "where is the gnome key", "under-the-gnome-marker")
	mine := env.chatRun(admin, "admin", "admin own question", "admin-reply-marker")

	r := admin.get("/settings/runs")
	wantStatus(t, r, http.StatusOK)
	if got := listedRuns(r.body); !slices.Equal(got, []string{mine, annRun}) {
		t.Fatalf("listed %v, want %v", got, []string{mine, annRun})
	}
	if !strings.Contains(r.body, "admin own question") {
		t.Error("the admin's own chat title is not shown")
	}
	for _, leak := range []string{"gnome", "under-the-gnome-marker", "admin-reply-marker"} {
		if strings.Contains(r.body, leak) {
			t.Errorf("the list shows %q", leak)
		}
	}
	if !strings.Contains(r.body, `data-owner="ann" data-status="complete"`) || !strings.Contains(r.body, `data-testid="admin-run-reveal"`) {
		t.Errorf("ann's run lacks its metadata or Reveal: %.3000s", r.body)
	}

	page := admin.get("/settings/runs/" + annRun)
	wantStatus(t, page, http.StatusOK)
	if strings.Contains(page.body, "gnome") || strings.Contains(page.body, `data-testid="admin-run-span"`) ||
		!strings.Contains(page.body, `data-testid="admin-run-reveal"`) {
		t.Errorf("ann's run page before the reveal: %.3000s", page.body)
	}
	wantStatus(t, admin.get("/runs/"+annRun+"/export"), http.StatusNotFound)
	if n := len(env.auditAbout("ann")); n != 0 {
		t.Fatalf("%d audit entries before a reveal", n)
	}

	for _, u := range []*browser{ann, bob} {
		wantStatus(t, u.get("/settings/runs"), http.StatusNotFound)
		wantStatus(t, u.get("/settings/runs/"+annRun), http.StatusNotFound)
		wantStatus(t, u.post("/settings/runs/"+annRun+"/reveal", nil), http.StatusNotFound)
		wantStatus(t, u.post("/settings/runs/import", nil), http.StatusNotFound)
	}
	wantStatus(t, bob.get("/runs/"+annRun+"/export"), http.StatusNotFound)
	wantStatus(t, admin.post("/settings/runs/no-such-run/reveal", nil), http.StatusNotFound)
	if n := len(env.auditAbout("ann")); n != 0 {
		t.Fatalf("%d audit entries after refused reveals", n)
	}

	if r := admin.postRaw("/settings/runs/"+annRun+"/reveal", nil, nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("a reveal without the CSRF token: %d", r.StatusCode)
	}
	if n := len(env.auditAbout("ann")); n != 0 {
		t.Fatalf("%d audit entries after a forged reveal", n)
	}
	wantRedirect(t, admin.post("/settings/runs/"+annRun+"/reveal", nil), "/settings/runs/"+annRun)
	log := env.auditAbout("ann")
	if len(log) != 1 || log[0].Action != store.AuditRevealRun || log[0].Detail != annRun || log[0].ActorID != env.userID("admin") {
		t.Fatalf("audit after the reveal: %+v", log)
	}
	page = admin.get("/settings/runs/" + annRun)
	if !strings.Contains(page.body, "under-the-gnome-marker") || !strings.Contains(page.body, "where is the gnome key") ||
		!strings.Contains(page.body, `data-kind="model_request"`) || page.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("ann's run page after the reveal: %.4000s", page.body)
	}
	if r := admin.get("/settings/runs"); !strings.Contains(r.body, "where is the gnome key") {
		t.Error("the list does not show the revealed run's chat title")
	}
	exp := admin.get("/runs/" + annRun + "/export")
	wantStatus(t, exp, http.StatusOK)
	if !strings.Contains(exp.body, "under-the-gnome-marker") || !strings.Contains(exp.Header.Get("Content-Disposition"), "atrium-run-") {
		t.Errorf("export: %s %.500s", exp.Header.Get("Content-Disposition"), exp.body)
	}
	wantStatus(t, ann.get("/runs/"+annRun+"/export"), http.StatusOK) // the owner's own
	wantStatus(t, bob.get("/runs/"+annRun+"/export"), http.StatusNotFound)

	annPage := ann.get("/memories").body
	if !strings.Contains(annPage, "Admin admin viewed the content of your run "+annRun[:8]) {
		t.Errorf("ann's page does not show the reveal: %.3000s", annPage)
	}
	if strings.Contains(bob.get("/memories").body, "viewed the content") {
		t.Error("bob is told about ann's reveal")
	}
	// The admin's own run needs no reveal and writes none.
	wantRedirect(t, admin.post("/settings/runs/"+mine+"/reveal", nil), "/settings/runs/"+mine)
	if n := len(env.auditAbout("admin")); n != 0 {
		t.Errorf("opening an own run wrote %d audit entries", n)
	}

	env.clock.advance(time.Hour + time.Minute)
	admin = env.login("admin", testPassword) // the login lapsed too
	page = admin.get("/settings/runs/" + annRun)
	if strings.Contains(page.body, "gnome") || !strings.Contains(page.body, `data-testid="admin-run-reveal"`) {
		t.Error("the reveal did not lapse after an hour")
	}
	wantStatus(t, admin.get("/runs/"+annRun+"/export"), http.StatusNotFound)
}

// seedRuns writes n finished runs of owner, one a second from start, with
// metadata varied by index: every 10th failed, every 3rd on model m-big and
// calling the tool "search", lasting i % 20 seconds; every 50th in session
// when it is not "".
func seedRuns(tb testing.TB, db *store.DB, owner int64, prefix string, start time.Time, n int, session ...string) {
	tb.Helper()
	seedRunsEvery(tb, db, owner, prefix, start, n, time.Second, session...)
}

// seedRunsEvery is seedRuns with runs every apart.
func seedRunsEvery(tb testing.TB, db *store.DB, owner int64, prefix string, start time.Time, n int, every time.Duration, session ...string) {
	tb.Helper()
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		var runs []store.ImportedRun
		for i := lo; i < min(n, lo+batch); i++ {
			at := start.Add(time.Duration(i) * every)
			r := store.ImportedRun{RunInfo: store.RunInfo{ID: prefix + itoa(int64(i)), OwnerID: owner, Model: "m-small",
				Status: trace.StatusComplete, StartedAt: at, EndedAt: at.Add(time.Duration(i%20) * time.Second),
				InputTokens: 100 + i, OutputTokens: 10, Steps: 1}}
			if i%10 == 0 {
				r.Status, r.Error = trace.StatusError, "model failed"
			}
			if len(session) > 0 && i%50 == 0 {
				r.SessionID = session[0]
			}
			r.Spans = []store.ImportedSpan{{SpanRow: store.SpanRow{RunID: r.ID, Seq: 1, Kind: trace.KindContext, StartedAt: at, EndedAt: at}}}
			if i%3 == 0 {
				r.Model = "m-big"
				r.Spans = append(r.Spans, store.ImportedSpan{SpanRow: store.SpanRow{RunID: r.ID, Seq: 2, Kind: trace.KindToolCall,
					Name: "search", StartedAt: at, EndedAt: at}})
			}
			runs = append(runs, r)
		}
		if err := db.InsertRuns(context.Background(), runs); err != nil {
			tb.Fatal(err)
		}
	}
}

// The filter form narrows the list as the store does; Older runs pages through
// all matches once; a malformed filter is a 400 that says which field.
func TestAdminRunsFiltersAndPages(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	env.user(admin, "ann")
	ann := env.userID("ann")
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	seedRuns(t, env.db, ann, "a-", start, 120)
	seedRuns(t, env.db, env.userID("admin"), "m-", start.Add(24*time.Hour), 30)

	all := func(query string) []string {
		t.Helper()
		var ids []string
		next := "/settings/runs?" + query
		for pages := 0; next != ""; pages++ {
			if pages > 20 {
				t.Fatal("paging does not end")
			}
			r := admin.get(next)
			wantStatus(t, r, http.StatusOK)
			ids = append(ids, listedRuns(r.body)...)
			next = ""
			if m := regexp.MustCompile(`href="([^"]+)" data-testid="admin-runs-next"`).FindStringSubmatch(r.body); m != nil {
				next = html.UnescapeString(m[1])
			}
		}
		return ids
	}
	want := func(owner string, n int, keep func(i int) bool) []string {
		var ids []string
		for i := n - 1; i >= 0; i-- {
			if keep(i) {
				ids = append(ids, owner+itoa(int64(i)))
			}
		}
		return ids
	}
	any := func(int) bool { return true }
	annAll := want("a-", 120, any)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", append(want("m-", 30, any), annAll...)},
		{"user=" + itoa(ann), annAll},
		{"from=2026-03-02", want("m-", 30, any)},
		{"to=2026-03-01", annAll},
		{"status=error", append(want("m-", 30, func(i int) bool { return i%10 == 0 }), want("a-", 120, func(i int) bool { return i%10 == 0 })...)},
		{"failed=1&user=" + itoa(ann), want("a-", 120, func(i int) bool { return i%10 == 0 })},
		{"model=m-big&user=" + itoa(ann), want("a-", 120, func(i int) bool { return i%3 == 0 })},
		{"tool=search&to=2026-03-01", want("a-", 120, func(i int) bool { return i%3 == 0 })},
		{"min_s=18.5&user=" + itoa(ann), want("a-", 120, func(i int) bool { return i%20 == 19 })},
		{"tool=nothing", nil},
	} {
		if got := all(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%q: listed %d runs %v…, want %d %v…", tc.query, len(got), head(got), len(tc.want), head(tc.want))
		}
	}
	for query, msg := range map[string]string{
		"user=ann":           "Choose a user",
		"from=yesterday":     "From must be a date",
		"status=lost":        "Choose a status",
		"min_s=-1":           "At least",
		"after=not-a-cursor": "bad page cursor",
	} {
		r := admin.get("/settings/runs?" + query)
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(html.UnescapeString(r.body), msg) || len(listedRuns(r.body)) != 0 {
			t.Errorf("%s: no %q, or runs listed", query, msg)
		}
	}
}

func head(ids []string) []string { return ids[:min(len(ids), 4)] }

// postRunImport uploads file to /settings/runs/import as b.
func (b *browser) postRunImport(file []byte) response {
	b.env.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("_csrf", b.token())
	fw, _ := mw.CreateFormFile("file", "atrium-run.json")
	fw.Write(file)
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, b.env.ts.URL+"/settings/runs/import", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return b.do(req)
}

// An exported run goes back in through the import form as a run of the admin,
// marked imported and without a chat; hostile files are refused with the reason
// and store nothing.
func TestAdminRunImportThroughPage(t *testing.T) {
	env, admin, _ := chatEnv(t)
	ann := env.user(admin, "ann")
	annRun := env.chatRun(ann, "ann", "ann asks", "imported-reply-marker")
	file := ann.get("/runs/" + annRun + "/export")
	wantStatus(t, file, http.StatusOK)

	r := admin.postRunImport([]byte(file.body))
	wantStatus(t, r, http.StatusSeeOther)
	newID, ok := strings.CutPrefix(r.Header.Get("Location"), "/settings/runs/")
	if !ok || newID == annRun {
		t.Fatalf("import redirected to %q", r.Header.Get("Location"))
	}
	page := admin.get("/settings/runs/" + newID)
	if !strings.Contains(page.body, "imported-reply-marker") || !strings.Contains(page.body, `data-testid="admin-run-imported"`) ||
		!strings.Contains(page.body, "Run of admin") {
		t.Errorf("the imported run's page: %.3000s", page.body)
	}
	ri, err := env.db.RunByID(context.Background(), newID)
	if err != nil || ri.OwnerID != env.userID("admin") || ri.SessionID != "" {
		t.Errorf("imported run row: %+v, %v", ri, err)
	}
	if n := len(env.auditAbout("admin")) + len(env.auditAbout("ann")); n != 0 {
		t.Errorf("an import of a file wrote %d audit entries", n)
	}

	before := testRunCount(t, env)
	for name, tc := range map[string]struct {
		file   []byte
		status int
		want   string
	}{
		"bad JSON": {[]byte(`{"format": "atrium-run", "version": 1, "run": `), http.StatusBadRequest, "line 1, column"},
		"no file":  {nil, http.StatusBadRequest, "Choose a run export file"},
		"wrong kind": {[]byte(strings.Replace(file.body, `"kind": "final"`, `"kind": "exec"`, 1)), http.StatusBadRequest,
			`kind "exec" is not a span kind`},
		"duplicate seq": {[]byte(strings.Replace(file.body, `"seq": 2,`, `"seq": 1,`, 1)), http.StatusBadRequest, "seq 1 appears twice"},
		"huge":          {bytes.Repeat([]byte(" "), trace.MaxRunImportBytes+1), http.StatusRequestEntityTooLarge, "larger than 16 MB"},
		"over the body": {bytes.Repeat([]byte(" "), trace.MaxRunImportBytes+128<<10), http.StatusRequestEntityTooLarge, "too large"},
	} {
		r := admin.postRunImport(tc.file)
		if r.StatusCode != tc.status || !strings.Contains(html.UnescapeString(r.body), tc.want) {
			t.Errorf("%s: %d, want %d with %q: %.600s", name, r.StatusCode, tc.status, tc.want, r.body)
		}
	}
	if n := testRunCount(t, env); n != before {
		t.Errorf("refused imports stored %d runs", n-before)
	}
}

func testRunCount(t *testing.T, env *testEnv) int {
	t.Helper()
	list, _, err := env.db.AllRuns(context.Background(), store.RunFilter{}, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}
