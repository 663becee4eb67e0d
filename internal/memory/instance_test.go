package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store/storetest"
)

func validInstance() InstanceInput {
	return InstanceInput{Instance: DefaultInstance}
}

// TestInstanceValidation: every bad value is refused with a message naming its field,
// and changes nothing: neither the settings in force nor the stored row.
func TestInstanceValidation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	good := validInstance()
	good.HalfLifeDays, good.ForgetUnusedDays = 30, 400
	ok(t, f.svc.SetInstance(ctx, good))
	row := storetest.Int(t, f.db, `SELECT updated_at FROM settings WHERE key = 'memory.instance'`)

	for name, c := range map[string]struct {
		edit func(*InstanceInput)
		want string
	}{
		"ftp URL":    {func(in *InstanceInput) { in.EmbeddingsURL, in.EmbeddingsModel = "ftp://x/v1", "m" }, "Embeddings endpoint"},
		"no scheme":  {func(in *InstanceInput) { in.EmbeddingsURL, in.EmbeddingsModel = "localhost:11434/v1", "m" }, "Embeddings endpoint"},
		"javascript": {func(in *InstanceInput) { in.EmbeddingsURL, in.EmbeddingsModel = "javascript:alert(1)", "m" }, "Embeddings endpoint"},
		"URL too long": {func(in *InstanceInput) {
			in.EmbeddingsURL, in.EmbeddingsModel = "http://h/"+strings.Repeat("a", 2000), "m"
		}, "at most 2000"},
		"no host":           {func(in *InstanceInput) { in.EmbeddingsURL, in.EmbeddingsModel = "http:///v1", "m" }, "has no host"},
		"password in URL":   {func(in *InstanceInput) { in.EmbeddingsURL, in.EmbeddingsModel = "https://u:pw@h/v1", "m" }, "no user name or password"},
		"URL without model": {func(in *InstanceInput) { in.EmbeddingsURL = "http://localhost:11434/v1" }, "Embeddings model"},
		"blank model":       {func(in *InstanceInput) { in.EmbeddingsURL, in.EmbeddingsModel = "http://h/v1", "   " }, "Embeddings model"},
		"model without URL": {func(in *InstanceInput) { in.EmbeddingsModel = "m" }, "Embeddings model"},
		"dimensions > 4096": {func(in *InstanceInput) {
			in.EmbeddingsURL, in.EmbeddingsModel, in.EmbeddingsDimensions = "http://h/v1", "m", MaxDims+1
		}, "Dimensions"},
		"dimensions < 0": {func(in *InstanceInput) {
			in.EmbeddingsURL, in.EmbeddingsModel, in.EmbeddingsDimensions = "http://h/v1", "m", -1
		}, "Dimensions"},
		"half-life 0":      {func(in *InstanceInput) { in.HalfLifeDays = 0 }, "Half-life"},
		"half-life huge":   {func(in *InstanceInput) { in.HalfLifeDays = MaxHalfLifeDays + 1 }, "Half-life"},
		"forget < 0":       {func(in *InstanceInput) { in.ForgetUnusedDays = -1 }, "Forget unused"},
		"forget huge":      {func(in *InstanceInput) { in.ForgetUnusedDays = MaxForgetUnusedDays + 1 }, "Forget unused"},
		"key with newline": {func(in *InstanceInput) { in.APIKey = "sk-1\r\nX-Evil: 1" }, "API key"},
		"model control":    {func(in *InstanceInput) { in.Model = "1:m\x00" }, "Memory model"},
	} {
		in := validInstance()
		c.edit(&in)
		err := f.svc.SetInstance(ctx, in)
		if !errs.Is(err, errs.Invalid) || !strings.Contains(errs.Message(err), c.want) {
			t.Errorf("%s: error %v, want Invalid naming %q", name, err, c.want)
		}
		if _, err := f.svc.TestEmbeddings(ctx, in); !errs.Is(err, errs.Invalid) {
			t.Errorf("%s: Test accepted it: %v", name, err)
		}
	}
	if got := f.svc.Instance(); got.HalfLifeDays != 30 || got.ForgetUnusedDays != 400 || got.EmbeddingsURL != "" || f.svc.EmbedderName() != "hash" {
		t.Errorf("a refused value changed the settings in force: %+v", got)
	}
	if after := storetest.Int(t, f.db, `SELECT updated_at FROM settings WHERE key = 'memory.instance'`); after != row {
		t.Error("a refused value rewrote the stored settings")
	}
}

// TestInstanceKeyIsSealed: the embeddings API key is stored sealed (not in the
// database files), used by the embedder after a restart, kept when the form leaves
// it empty and removed when cleared.
func TestInstanceKeyIsSealed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const key = "sk-embedsentinel-9f8e7d6c5b4a"
	cs := llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{Key: key})
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	in := validInstance()
	in.EmbeddingsURL, in.EmbeddingsModel, in.APIKey = cs.URL(), "concepts", key
	ok(t, f.svc.SetInstance(ctx, in))
	if !f.svc.Instance().KeySet {
		t.Fatal("the key is not reported as stored")
	}
	ok(t, f.db.Checkpoint(ctx))
	for file, data := range f.dbFiles(t) {
		if bytes.Contains(data, []byte(key)) || bytes.Contains(data, []byte("embedsentinel")) {
			t.Errorf("%s holds the API key in the clear", file)
		}
	}

	// A new process: the saved settings win over the defaults, and the key opens.
	svc := NewService(f.db, f.svc.keys, HashEmbedder{})
	def := DefaultInstance
	def.EmbeddingsURL, def.EmbeddingsModel = "http://ignored.invalid/v1", "ignored"
	ok(t, svc.LoadInstance(ctx, def, "env-key"))
	if got := svc.Instance(); got.EmbeddingsURL != cs.URL() || !got.KeySet {
		t.Fatalf("after a restart: %+v", got)
	}
	if w, err := svc.TestEmbeddings(ctx, InstanceInput{Instance: svc.Instance()}); err != nil || w != 8 {
		t.Fatalf("the stored key was not used: width %d, %v", w, err)
	}

	// The stored key goes to the endpoint it was entered for only: a Test or a save
	// that points elsewhere must have it typed again.
	other := llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{})
	elsewhere := InstanceInput{Instance: svc.Instance()}
	elsewhere.EmbeddingsURL = other.URL()
	if _, err := svc.TestEmbeddings(ctx, elsewhere); !errs.Is(err, errs.Invalid) || !strings.Contains(errs.Message(err), "API key") {
		t.Errorf("Test against another host with the stored key: %v", err)
	}
	if err := svc.SetInstance(ctx, elsewhere); !errs.Is(err, errs.Invalid) {
		t.Errorf("saving another host with the stored key: %v", err)
	}
	if len(other.Keys()) != 0 || svc.Instance().EmbeddingsURL != cs.URL() {
		t.Fatalf("the other host was called (%d) or the settings changed: %+v", len(other.Keys()), svc.Instance())
	}

	// Saving without typing a key keeps it; clearing removes it.
	in.APIKey = ""
	ok(t, svc.SetInstance(ctx, in))
	if _, err := svc.TestEmbeddings(ctx, in); err != nil {
		t.Fatalf("an empty key field dropped the stored key: %v", err)
	}
	in.ClearKey = true
	ok(t, svc.SetInstance(ctx, in))
	if svc.Instance().KeySet {
		t.Error("the cleared key is still reported")
	}
	in.ClearKey = false
	_, err := svc.TestEmbeddings(ctx, in)
	if !errs.Is(err, errs.Unavailable) || !strings.Contains(errs.Message(err), "401") {
		t.Fatalf("Test without a key: %v", err)
	}
	// The error answer's body is for the admin's page (the embedder's own error,
	// which reaches logs, leaves it out), but never with the key in it.
	if !strings.Contains(errs.Message(err), "bad key") {
		t.Errorf("Test error without the endpoint's answer: %q", errs.Message(err))
	}
	in.APIKey = "sk-wrongsentinel-1234567"
	ok(t, svc.SetInstance(ctx, in))
	in.APIKey = ""
	if _, err := svc.TestEmbeddings(ctx, in); err == nil || strings.Contains(err.Error(), "wrongsentinel") || !strings.Contains(err.Error(), "bad key") {
		t.Errorf("Test with a stored key that the endpoint echoes: %v", err)
	}
	var se *StatusError
	if _, err := (&OpenAIEmbedder{BaseURL: cs.URL(), Model: "m"}).Embed(ctx, []string{"my secret diary"}); err == nil ||
		strings.Contains(err.Error(), "bad key") || !errorAs(err, &se) || !strings.Contains(se.Body, "bad key") {
		t.Errorf("the embedder's error %v echoes the body, or keeps none for the page", err)
	}
}

func errorAs(err error, se **StatusError) bool {
	e, ok := err.(*StatusError)
	*se = e
	return ok
}

// TestEmbedderSwapReindexes: a new endpoint takes effect without a restart. Until the
// vectors are rebuilt, search is lexical only (and says why); the reindex reports its
// progress; after it the endpoint's vectors find a synonym.
func TestEmbedderSwapReindexes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	must(f.svc.Reindex(ctx, f.svc.EmbedderName()))
	car := f.save(t, f.ann, "My car is a red Fiat")
	f.save(t, f.ann, "I love pasta")
	f.save(t, f.bob, "Bob's car is blue")
	if res := must(f.svc.Search(ctx, f.ann, "which automobile do I drive?", 5)); len(res.Hits) > 0 || res.LexicalOnly {
		t.Fatalf("before the swap: %+v", res)
	}
	select {
	case <-f.svc.ReindexRequests():
	default:
	}

	cs := llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{})
	in := validInstance()
	in.EmbeddingsURL, in.EmbeddingsModel = cs.URL(), "concepts"
	ok(t, f.svc.SetInstance(ctx, in))
	select {
	case <-f.svc.ReindexRequests():
	default:
		t.Fatal("a new embedder asked for no reindex")
	}
	if st := f.svc.ReindexStatus(); !st.Stale || st.Running {
		t.Errorf("status after the swap: %+v", st)
	}
	res := must(f.svc.Search(ctx, f.ann, "my red Fiat", 5))
	if !res.LexicalOnly || res.VectorErr != ErrReindexing || len(res.Hits) == 0 || res.Hits[0].ID != car.ID {
		t.Fatalf("search while the vectors are stale: %+v", res)
	}

	n := must(f.svc.Reindex(ctx, f.svc.EmbedderName()))
	if st := f.svc.ReindexStatus(); n != 3 || st.Stale || st.Running || st.Done != 3 || st.Total != 3 || st.Err != "" {
		t.Fatalf("after the reindex of %d: %+v", n, st)
	}
	res = must(f.svc.Search(ctx, f.ann, "which automobile do I drive?", 5))
	if res.LexicalOnly || len(res.Hits) == 0 || res.Hits[0].ID != car.ID {
		t.Fatalf("the new vectors do not find a synonym: %+v", res)
	}
	// The same endpoint again: a key or decay change alone needs no reindex.
	in.HalfLifeDays = 10
	ok(t, f.svc.SetInstance(ctx, in))
	select {
	case <-f.svc.ReindexRequests():
		t.Error("a change that keeps the vectors asked for a reindex")
	default:
	}
	if f.svc.ReindexStatus().Stale {
		t.Error("a change that keeps the vectors made them stale")
	}
}

// TestReindexFollowsTheLatestEmbedder: an embedder replaced while a reindex runs
// ends that run unmarked, so the next run builds the latest one's vectors; a failing
// endpoint leaves the vectors stale and says why.
func TestReindexFollowsTheLatestEmbedder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	for _, s := range []string{"My car is a red Fiat", "I love pasta", "I live in Porto"} {
		f.save(t, f.ann, s)
	}
	cs := llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{})
	in := validInstance()
	in.EmbeddingsURL, in.EmbeddingsModel = cs.URL(), "concepts"
	ok(t, f.svc.SetInstance(ctx, in))
	first := f.svc.EmbedderName()
	in.EmbeddingsDimensions = 8 // another vector space
	ok(t, f.svc.SetInstance(ctx, in))
	if _, err := f.svc.Reindex(ctx, first); err != nil {
		t.Fatal(err)
	}
	if !f.svc.ReindexStatus().Stale {
		t.Fatal("a reindex for a replaced embedder marked the vectors current")
	}
	if have, _ := f.db.Setting(ctx, indexSetting); strings.Contains(have, "concepts|0") {
		t.Fatalf("the stored index names the replaced embedder: %s", have)
	}
	must(f.svc.Reindex(ctx, f.svc.EmbedderName()))
	if f.svc.ReindexStatus().Stale {
		t.Fatal("the latest embedder's reindex left the vectors stale")
	}

	// Replaced in the middle of a run: the run stops, and the next one starts over.
	var swapped atomic.Bool
	swapper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !swapped.Swap(true) {
			next := in
			next.EmbeddingsDimensions = 4
			ok(t, f.svc.SetInstance(context.Background(), next))
		}
		w.Write([]byte(`{"data":[{"index":0,"embedding":[1,0,0,0]}]}`))
	}))
	defer swapper.Close()
	in.EmbeddingsURL = swapper.URL
	ok(t, f.svc.SetInstance(ctx, in))
	if n, err := f.svc.Reindex(ctx, f.svc.EmbedderName()); err != nil || n >= 3 || !f.svc.ReindexStatus().Stale {
		t.Fatalf("a run whose embedder was replaced: %d, %v, %+v", n, err, f.svc.ReindexStatus())
	}
	if have, _ := f.db.Setting(ctx, indexSetting); strings.Contains(have, swapper.URL) {
		t.Fatalf("a run whose embedder was replaced marked the index done: %s", have)
	}
	if n := must(f.svc.Reindex(ctx, f.svc.EmbedderName())); n != 3 || f.svc.ReindexStatus().Stale {
		t.Fatalf("the next run: %d, %+v", n, f.svc.ReindexStatus())
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded: I Live In Porto", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	in.EmbeddingsURL = down.URL
	ok(t, f.svc.SetInstance(ctx, in))
	_, err := f.svc.Reindex(ctx, f.svc.EmbedderName())
	st := f.svc.ReindexStatus()
	if err == nil || !st.Stale || st.Running || !strings.Contains(st.Err, "503") || strings.Contains(st.Err, "Porto") || strings.Contains(err.Error(), "Porto") {
		t.Fatalf("a failed reindex: %v, %+v", err, st)
	}
	if res := must(f.svc.Search(ctx, f.ann, "Porto", 5)); !res.LexicalOnly || len(res.Hits) != 1 {
		t.Errorf("search after a failed reindex: %+v", res)
	}
}

// TestDecaySettings: the half-life weighs an old memory down, and memories unused
// for ForgetUnusedDays are forgotten by the purge while used ones stay.
func TestDecaySettings(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Add(1000)) }
	f.db.Now, f.svc.Now = clock, clock
	old := f.save(t, f.ann, "I keep bees on the roof")
	used := f.save(t, f.ann, "I keep a kayak in the garage")
	now.Add((100 * 24 * time.Hour).Milliseconds())
	ok(t, f.svc.MarkUsed(ctx, f.ann, []string{used.ID}))
	fresh := f.save(t, f.bob, "I keep notes in a paper diary")

	score := func(days int) float64 {
		in := validInstance()
		in.HalfLifeDays = days
		ok(t, f.svc.SetInstance(ctx, in))
		res := must(f.svc.Search(ctx, f.ann, "bees roof", 1))
		if len(res.Hits) != 1 || res.Hits[0].ID != old.ID {
			t.Fatalf("search: %+v", res)
		}
		return res.Hits[0].Score
	}
	// Recency is a fifth of the score: a 1-day half-life leaves ~0.8 of the 3650-day one.
	if long, short := score(3650), score(1); short > 0.85*long {
		t.Errorf("a 100-day-old memory scores %.4f with a 1-day half-life and %.4f with 3650 days", short, long)
	}

	in := validInstance()
	in.ForgetUnusedDays = 30
	ok(t, f.svc.SetInstance(ctx, in))
	if n := must(f.svc.PurgeExpired(ctx)); n != 1 {
		t.Errorf("purged %d, want 1 (the 100-day-old unused memory)", n)
	}
	if _, err := f.svc.Get(ctx, f.ann, old.ID); !errs.Is(err, errs.NotFound) {
		t.Errorf("the unused memory is still there: %v", err)
	}
	for _, m := range []Memory{used, fresh} {
		if _, err := f.svc.Get(ctx, m.OwnerID, m.ID); err != nil {
			t.Errorf("%q was forgotten: %v", m.Text, err)
		}
	}
	in.ForgetUnusedDays = 0
	ok(t, f.svc.SetInstance(ctx, in))
	now.Add((1000 * 24 * time.Hour).Milliseconds())
	if n := must(f.svc.PurgeExpired(ctx)); n != 0 {
		t.Errorf("with forgetting off, %d memories were purged", n)
	}
}

// TestInstanceOff: with memory off for the instance the user's settings say so
// (their own switches are kept), and the memory tools refuse.
func TestInstanceOff(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	in := validInstance()
	in.Enabled, in.Model = false, "3:memory-model"
	ok(t, f.svc.SetInstance(ctx, in))
	st := must(f.svc.Settings(ctx, f.ann))
	if st.Active() || !st.InstanceOff || !st.Enabled || !st.Extract || st.Model != "3:memory-model" {
		t.Fatalf("settings with the instance off: %+v", st)
	}
	ok(t, f.svc.SetSettings(ctx, f.ann, Settings{Enabled: true}))
	if raw, _ := f.db.Setting(ctx, settingsKey(f.ann)); strings.Contains(raw, "instance") || strings.Contains(raw, "model") {
		t.Errorf("the instance's values were stored as the user's: %s", raw)
	}
	err := f.svc.usable(ctx, f.ann, "")
	if err == nil || !strings.Contains(err.Error(), "turned off for this instance") {
		t.Errorf("the tools' guard: %v", err)
	}
	in.Enabled = true
	ok(t, f.svc.SetInstance(ctx, in))
	if st := must(f.svc.Settings(ctx, f.ann)); !st.Active() {
		t.Errorf("memory back on: %+v", st)
	}
}

// TestUnreadableInstanceSettings: a saved row that cannot be read does not stop
// start-up: the defaults (or the saved settings without their key) are in force, and
// the error says what to do.
func TestUnreadableInstanceSettings(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	in := validInstance()
	in.EmbeddingsURL, in.EmbeddingsModel, in.APIKey, in.HalfLifeDays = "http://embed.example/v1", "m", "sk-k", 12
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	ok(t, f.svc.SetInstance(ctx, in))
	raw, err := f.db.Setting(ctx, instanceSetting)
	ok(t, err)
	var st storedInstance
	ok(t, json.Unmarshal([]byte(raw), &st))
	st.KeySealed[len(st.KeySealed)-1] ^= 1
	b, _ := json.Marshal(st)
	ok(t, f.db.SetSetting(ctx, instanceSetting, string(b)))
	svc := NewService(f.db, f.svc.keys, HashEmbedder{})
	err = svc.LoadInstance(ctx, DefaultInstance, "")
	if err == nil || !strings.Contains(err.Error(), "enter it again") {
		t.Errorf("an undecryptable key: %v", err)
	}
	if got := svc.Instance(); got.HalfLifeDays != 12 || got.KeySet {
		t.Errorf("with the key unreadable: %+v", got)
	}

	ok(t, f.db.SetSetting(ctx, instanceSetting, "{not json"))
	def := DefaultInstance
	def.HalfLifeDays = 33
	if err := svc.LoadInstance(ctx, def, ""); err == nil {
		t.Error("an unreadable row is no error")
	}
	if got := svc.Instance(); got.HalfLifeDays != 33 || got.EmbeddingsURL != "" {
		t.Errorf("with the row unreadable the defaults are not in force: %+v", got)
	}
}

// TestNewInstanceSearchesVectorsAtOnce: a database that never held a memory has
// nothing to reindex, so its first searches use vectors at once instead of staying
// lexical until the background Reindex gets its turn (on a loaded machine that came
// after the first saves, and extraction's near-duplicate and contradiction checks,
// which need similarities, then passed over a memory they should have replaced).
// With memories and no index, search stays lexical until Reindex has run.
func TestNewInstanceSearchesVectorsAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok(t, f.svc.LoadInstance(ctx, DefaultInstance, ""))
	_, err := f.svc.Save(ctx, f.ann, KindFact, "I live in Berlin", Source{Kind: SourceManual}, 0.9)
	ok(t, err)
	res, err := f.svc.Search(ctx, f.ann, "I live in Lisbon", 3)
	ok(t, err)
	if res.LexicalOnly || len(res.Hits) == 0 || res.Hits[0].Similarity == 0 {
		t.Fatalf("a new instance's first search: lexical only %v, hits %+v; want vector similarities", res.LexicalOnly, res.Hits)
	}

	// The same database with its index marker gone: memories exist, so it is stale.
	if _, err := storetest.Pool(t, f.db).Exec(`DELETE FROM settings WHERE key = ?`, indexSetting); err != nil {
		t.Fatal(err)
	}
	svc := NewService(f.db, f.svc.keys, HashEmbedder{})
	ok(t, svc.LoadInstance(ctx, DefaultInstance, ""))
	if res, err := svc.Search(ctx, f.ann, "I live in Lisbon", 3); err != nil || !res.LexicalOnly {
		t.Fatalf("memories without an index: lexical only %v (err %v); want lexical until Reindex", res.LexicalOnly, err)
	}
}
