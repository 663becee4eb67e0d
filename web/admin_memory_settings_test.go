package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/app"
	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
	"atrium/internal/testkit"
)

// syncBuffer is a log sink the app's goroutines may write to while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func logTo(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// instanceForm is a valid instance settings form; edits change it.
func instanceForm(edits ...string) url.Values {
	v := url.Values{"enabled": {"on"}, "model": {""}, "embeddings_url": {""}, "embeddings_model": {""},
		"embeddings_dimensions": {"0"}, "half_life_days": {"90"}, "forget_unused_days": {"0"}, "embeddings_key": {""}}
	for i := 0; i+1 < len(edits); i += 2 {
		v.Set(edits[i], edits[i+1])
	}
	return v
}

// embeddingsEndpoint is a stand-in embeddings endpoint that knows a synonym (car =
// automobile). While gate is closed it holds every request; want, when set, is the
// bearer key it requires (answering 401 with a body that echoes the input).
func embeddingsEndpoint(t *testing.T, want string, gate chan struct{}) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gate != nil {
			select {
			case <-gate:
			case <-time.After(5 * time.Second): // a test that never opens it fails, not hangs
			case <-r.Context().Done():
				return
			}
		}
		var req struct{ Input []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if want != "" && r.Header.Get("Authorization") != "Bearer "+want {
			http.Error(w, "unknown key; input was "+strings.Join(req.Input, " "), http.StatusUnauthorized)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []item `json:"data"`
		}
		for i, text := range req.Input {
			v := make([]float32, 6)
			if low := strings.ToLower(text); strings.Contains(low, "car") || strings.Contains(low, "automobile") {
				v[0] = 1
			} else {
				v[5] = 1
			}
			out.Data = append(out.Data, item{i, v})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestAdminMemorySettings: the instance settings form shows the defaults, refuses
// every bad value with a clear error and changes nothing, saves a good one, keeps the
// API key sealed and never shows it, and is a 404 to users.
func TestAdminMemorySettings(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	admin.addProvider("Fake", env.llm.URL(), "chat-m\nmem-m", "")
	ctx := context.Background()

	page := admin.get("/settings/memories").body
	for _, want := range []string{`data-testid="memory-instance-form"`, `checked data-testid="memory-instance-enabled"`,
		`value="90"`, "No key stored.", `data-testid="memory-reindex-done"`, "Fake / mem-m", "Each chat’s own model"} {
		if !strings.Contains(page, want) {
			t.Errorf("the settings form lacks %s", want)
		}
	}

	missing := bob.get("/no-such-page").body
	for _, r := range []response{bob.post("/settings/memories/instance", instanceForm("enabled", "")),
		bob.post("/settings/memories/instance/test", instanceForm()), bob.get("/settings/memories/reindex")} {
		wantStatus(t, r, http.StatusNotFound)
		if r.body != missing {
			t.Errorf("%s: the 404 differs from a missing page's", r.Request.URL.Path)
		}
	}
	if !env.app.Memory.Instance().Enabled {
		t.Fatal("a user turned memory off for the instance")
	}

	before := env.app.Memory.Instance()
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{instanceForm("embeddings_url", "ftp://example.com/v1", "embeddings_model", "m"), "is not an http:// or https:// URL"},
		{instanceForm("embeddings_url", "http://localhost:11434/v1"), "Embeddings model: name the model"},
		{instanceForm("embeddings_url", "http://h/v1", "embeddings_model", "m", "embeddings_dimensions", "5000"), "Dimensions: 5000 is out of range"},
		{instanceForm("half_life_days", "abc"), "Half-life: &#34;abc&#34; is not a whole number."},
		{instanceForm("half_life_days", "0"), "Half-life: 0 days is out of range"},
		{instanceForm("half_life_days", ""), "Half-life"},
		{instanceForm("forget_unused_days", "-5"), "Forget unused memories: -5 days is out of range"},
		{instanceForm("model", "999:nope"), "Memory model: pick one of the configured models"},
		{instanceForm("enabled", "", "embeddings_key", "sk-a\nb"), "API key"},
	} {
		r := admin.post("/settings/memories/instance", c.form)
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, c.want) {
			t.Errorf("%v: the page does not say %q", c.form, c.want)
		}
		if c.form.Get("half_life_days") == "abc" && !strings.Contains(r.body, `value="abc"`) {
			t.Error("the refused value is not shown back as typed")
		}
	}
	if got := env.app.Memory.Instance(); got != before {
		t.Fatalf("refused forms changed the settings: %+v → %+v", before, got)
	}

	choices, err := env.app.Providers.Choices(ctx)
	if err != nil || len(choices) != 2 {
		t.Fatal(choices, err)
	}
	const key = "sk-pagesentinel-42424242"
	endpoint := embeddingsEndpoint(t, key, nil)
	r := admin.post("/settings/memories/instance", instanceForm("model", choices[1].Value, "embeddings_url", endpoint+"/",
		"embeddings_model", "concepts", "embeddings_key", key, "half_life_days", "30", "forget_unused_days", "365"))
	wantStatus(t, r, http.StatusSeeOther)
	if loc := r.Header.Get("Location"); !strings.Contains(loc, "notice=") || !strings.Contains(loc, "indexed+again") {
		t.Errorf("saved with a new embedder, redirected to %q", loc)
	}
	got := env.app.Memory.Instance()
	if !got.Enabled || got.Model != choices[1].Value || got.EmbeddingsURL != endpoint || got.EmbeddingsModel != "concepts" ||
		!got.KeySet || got.HalfLifeDays != 30 || got.ForgetUnusedDays != 365 {
		t.Fatalf("saved %+v", got)
	}
	page = admin.get("/settings/memories").body
	if strings.Contains(page, key) || strings.Contains(page, "42424242") || strings.Contains(page, "4242") {
		t.Error("the page shows the API key or a part of it")
	}
	for _, want := range []string{"A key is stored", `value="` + html.EscapeString(endpoint) + `"`, `value="concepts"`, `value="365"`,
		`selected>Fake / mem-m`, `data-testid="memory-instance-clear-key"`} {
		if !strings.Contains(page, want) {
			t.Errorf("after saving, the form lacks %s", want)
		}
	}
	// The key is sealed: not in the database files.
	env.scanFor("after saving the embeddings key", "pagesentinel")

	// Saving again without typing the key keeps it; the Test button proves it is used.
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts",
		"half_life_days", "30")), http.StatusSeeOther)
	r = admin.post("/settings/memories/instance/test", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts", "half_life_days", "30"))
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, "vectors of 6 dimensions") {
		t.Errorf("Test with the kept key does not show the width: %s", testResult(r.body))
	}
	// Remove the key: the endpoint refuses, and the Test says so.
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts",
		"half_life_days", "30", "clear_key", "on")), http.StatusSeeOther)
	if env.app.Memory.Instance().KeySet || !strings.Contains(admin.get("/settings/memories").body, "No key stored.") {
		t.Error("the key was not removed")
	}
	if got := env.app.Memory.Instance().Model; got != "" {
		t.Errorf("a form with the chat's model kept the memory model %q", got)
	}
}

func testResult(body string) string {
	for _, id := range []string{`data-testid="memory-instance-test-result"`, `data-testid="memory-instance-test-error"`} {
		if i := strings.Index(body, id); i >= 0 {
			return body[i:min(len(body), i+400)]
		}
	}
	return "(no test result on the page)"
}

// TestAdminMemoryEmbeddingsTestButton: Test embeds a sample with the form's values
// and shows the width or the endpoint's error on the page; nothing is saved, and the
// endpoint's error body (which may echo what it was sent) is never logged.
func TestAdminMemoryEmbeddingsTestButton(t *testing.T) {
	var logs syncBuffer
	env := newTestEnvWith(t, app.Options{Log: logTo(&logs)})
	admin := env.setup()
	endpoint := embeddingsEndpoint(t, "sk-right", nil)

	r := admin.post("/settings/memories/instance/test", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts", "embeddings_key", "sk-right"))
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-testid="memory-instance-test-result">It works: vectors of 6 dimensions.`) {
		t.Errorf("a working endpoint: %s", testResult(r.body))
	}
	if strings.Contains(r.body, "sk-right") {
		t.Error("the page shows the typed key back")
	}
	if !strings.Contains(r.body, `value="`+html.EscapeString(endpoint)+`"`) {
		t.Error("the tested values are not kept in the form")
	}
	if got := env.app.Memory.Instance(); got.EmbeddingsURL != "" || got.KeySet {
		t.Fatalf("Test saved the settings: %+v", got)
	}

	r = admin.post("/settings/memories/instance/test", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts", "embeddings_key", "sk-wrong"))
	wantStatus(t, r, http.StatusOK)
	res := testResult(r.body)
	if !strings.Contains(res, "401 Unauthorized") || !strings.Contains(res, "unknown key; input was Atrium embeddings test") {
		t.Errorf("a refused key: %s", res)
	}

	// Offline: the built-in embedder's width.
	r = admin.post("/settings/memories/instance/test", instanceForm())
	if !strings.Contains(r.body, "vectors of 384 dimensions") {
		t.Errorf("the offline embedder: %s", testResult(r.body))
	}
	// A closed port: the error says so.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	r = admin.post("/settings/memories/instance/test", instanceForm("embeddings_url", deadURL, "embeddings_model", "m"))
	if res := testResult(r.body); !strings.Contains(res, "The endpoint failed") || !strings.Contains(res, "connection refused") {
		t.Errorf("an unreachable endpoint: %s", res)
	}

	// Saved with the wrong key, the background reindex fails: the page says why,
	// and the endpoint's body reaches neither the log nor the page's reindex status.
	ann := env.user(admin, "ann")
	ann.addMemory(memory.KindFact, "Ann's zebrafinch sings at dawn")
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts",
		"embeddings_key", "sk-wrong")), http.StatusSeeOther)
	// The page's status is set as Reindex returns, the log line just after: wait for both.
	testkit.Eventually(t, 5*time.Second, "the failed reindex to show and be logged", func() bool {
		return strings.Contains(admin.get("/settings/memories/reindex").body, "401 Unauthorized") &&
			strings.Contains(logs.String(), "reindex failed")
	})
	if page := admin.get("/settings/memories").body; strings.Contains(page, "zebrafinch") {
		t.Error("the reindex error on the page carries a memory's text")
	}
	for _, leak := range []string{"unknown key", "input was", "zebrafinch", "sk-wrong", "sk-right"} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("the log holds %q:\n%s", leak, logs.String())
		}
	}
}

// TestAdminEmbeddingsChangeTakesEffectWithoutRestart: saving a new embeddings endpoint
// swaps the embedder at once; while the background reindex runs, the admin page shows
// it and a user's search still finds exact words; afterwards the endpoint's vectors
// find a memory by a synonym.
func TestAdminEmbeddingsChangeTakesEffectWithoutRestart(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	car := ann.addMemory(memory.KindFact, "My car is a red Fiat")
	ann.addMemory(memory.KindFact, "I grow tomatoes on the balcony")
	if body := ann.get("/memories?q=" + url.QueryEscape("which automobile do I drive")).body; strings.Contains(body, car) {
		t.Fatal("the offline embedder found the synonym: the test would prove nothing")
	}
	gate := make(chan struct{})
	endpoint := embeddingsEndpoint(t, "", gate)

	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("embeddings_url", endpoint, "embeddings_model", "concepts")), http.StatusSeeOther)
	testkit.Eventually(t, 5*time.Second, "the reindex to be under way", func() bool {
		return strings.Contains(admin.get("/settings/memories/reindex").body, "Reindexing: 0 of 2 memories")
	})
	page := admin.get("/settings/memories").body
	if !strings.Contains(page, `data-testid="memory-reindex"`) || !strings.Contains(page, `hx-get="/settings/memories/reindex"`) {
		t.Error("the admin page does not show the reindex, or does not follow it")
	}
	body := ann.get("/memories?q=" + url.QueryEscape("red Fiat")).body
	if !strings.Contains(body, car) || !strings.Contains(body, "being indexed for a new embedding model") {
		t.Errorf("search during the reindex: %.2000s", body)
	}

	close(gate)
	testkit.Eventually(t, 5*time.Second, "the reindex to finish", func() bool {
		return strings.Contains(admin.get("/settings/memories/reindex").body, `data-testid="memory-reindex-done"`)
	})
	body = ann.get("/memories?q=" + url.QueryEscape("which automobile do I drive")).body
	if !strings.Contains(body, car) || strings.Contains(body, `data-testid="memory-lexical-only"`) {
		t.Errorf("after the reindex the synonym is not found: %.2000s", body)
	}
}

// TestInstanceMemoryOff: with memory off for the instance, "remember …" saves
// nothing, no memory reaches the model, the memory tools are not offered, and the
// user's Memories page says why while still listing and deleting.
func TestInstanceMemoryOff(t *testing.T) {
	env, admin, id := chatEnv(t)
	kept := admin.addMemory(memory.KindFact, "My cat is called Pixel")
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("enabled", "")), http.StatusSeeOther)
	ws := admin.dial(id)

	ws.send("remember that I prefer metric units")
	all := strings.Join(ws.until(finalMarker), "\n")
	if strings.Contains(all, "Saved to memory") {
		t.Error("an explicit request was acted on with memory off")
	}
	ws.send("what is my cat called?")
	ws.until(finalMarker)
	req := env.llm.LastRequest().Chat
	if strings.Contains(req.Messages[0].Content, "Pixel") {
		t.Errorf("a memory reached the model with memory off:\n%s", req.Messages[0].Content)
	}
	for _, tl := range req.Tools {
		if strings.HasPrefix(tl.Name, "memory_") {
			t.Errorf("the tool %s was offered with memory off", tl.Name)
		}
	}
	if ms := env.memories("admin"); len(ms) != 1 || ms[0].ID != kept {
		t.Errorf("memories with memory off: %+v", ms)
	}
	page := admin.get("/memories").body
	if !strings.Contains(page, `data-testid="memory-instance-off"`) || !strings.Contains(page, kept) {
		t.Error("the Memories page does not say memory is off, or does not list the memories")
	}
	wantStatus(t, admin.post("/memories/"+kept+"/delete", nil), http.StatusSeeOther)
	if len(env.memories("admin")) != 0 {
		t.Error("a memory could not be deleted with memory off")
	}

	// On again: the same request is acted on.
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm()), http.StatusSeeOther)
	ws.send("remember that I prefer metric units")
	if all := strings.Join(ws.until(finalMarker), "\n"); !strings.Contains(all, "Saved to memory") {
		t.Error("memory back on, the request was not acted on")
	}
	if strings.Contains(admin.get("/memories").body, `data-testid="memory-instance-off"`) {
		t.Error("the page still says memory is off")
	}
}

// TestMemoryModelSetting: extraction asks the memory model the admin chose, the
// reply still comes from the chat's model; "each chat's own model" goes back to it.
func TestMemoryModelSetting(t *testing.T) {
	env := newTestEnvWith(t, app.Options{Agent: agent.Config{ExtractMemories: true}})
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "chat-m", "")
	admin.addProvider("Mem", env.llm.URL(), "mem-m", "")
	extractions := make(chan string, 10)
	env.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if len(req.Messages) > 0 && strings.Contains(req.Messages[0].Content, "long-term memory") {
			extractions <- req.Model
			return llmtest.Reply{Text: []string{`{"actions":[]}`}}
		}
		return llmtest.Reply{Text: []string{"ok"}}
	})
	choices, err := env.app.Providers.Choices(context.Background())
	if err != nil || len(choices) != 2 || !strings.HasSuffix(choices[1].Value, ":mem-m") || !strings.HasSuffix(choices[0].Value, ":chat-m") {
		t.Fatal(choices, err)
	}
	id := admin.newSession()
	ws := admin.dial(id)
	next := func() string {
		select {
		case m := <-extractions:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no extraction call")
			return ""
		}
	}

	ws.send("I live in Porto")
	ws.until(finalMarker)
	if m := next(); m != "chat-m" {
		t.Errorf("by default extraction asked %q, want the chat's model", m)
	}
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("model", choices[1].Value)), http.StatusSeeOther)
	ws.send("I work as a carpenter")
	ws.until(finalMarker)
	if m := next(); m != "mem-m" {
		t.Errorf("with a memory model set, extraction asked %q", m)
	}
	if m := env.llm.Requests(); len(m) == 0 {
		t.Fatal("no requests")
	}
	for _, rec := range env.llm.Requests() {
		if rec.Chat.Model == "mem-m" && !strings.Contains(rec.Chat.Messages[0].Content, "long-term memory") {
			t.Error("a reply was asked of the memory model")
		}
	}

	// Its provider removed, the page says so and extraction asks the chat's model.
	pid, _, _ := strings.Cut(choices[1].Value, ":")
	wantStatus(t, admin.post("/settings/providers/"+pid+"/delete", nil), http.StatusSeeOther)
	if !strings.Contains(admin.get("/settings/memories").body, `data-testid="memory-instance-model-missing"`) {
		t.Error("the admin page does not say the memory model is gone")
	}
	ws.send("I have two cats")
	ws.until(finalMarker)
	if m := next(); m != "chat-m" {
		t.Errorf("with the memory model's provider removed, extraction asked %q", m)
	}

	// Memory off for the instance: no extraction at all.
	wantStatus(t, admin.post("/settings/memories/instance", instanceForm("enabled", "")), http.StatusSeeOther)
	ws.send("I play the cello")
	ws.until(finalMarker)
	select {
	case m := <-extractions:
		t.Errorf("with memory off, extraction asked %q", m)
	case <-time.After(300 * time.Millisecond):
	}
}
