package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/memory"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/testkit"
)

func start(t *testing.T, cfg config.Config) *app.App {
	t.Helper()
	a, err := app.New(context.Background(), cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func stop(t *testing.T, a *app.App) {
	t.Helper()
	if err := a.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if err := a.Close(); err != nil {
		t.Error(err)
	}
}

// TestExpiredMemoriesArePurged: an expired memory is deleted from the file when Atrium
// starts (and hourly after), not only hidden from lists.
func TestExpiredMemoriesArePurged(t *testing.T) {
	ctx := context.Background()
	cfg := config.Config{DataDir: t.TempDir()}
	a := start(t, cfg)
	u := &store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
	if err := a.Store.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"I live in Lisbon", "I am in Rome this week"} {
		m, err := a.Memory.Save(ctx, u.ID, memory.KindFact, text, memory.Source{Kind: memory.SourceManual}, 0.9)
		if err != nil {
			t.Fatal(err)
		}
		if text == "I am in Rome this week" {
			past := time.Now().Add(-time.Hour)
			if err := a.Memory.SetExpiry(ctx, u.ID, m.ID, &past); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop(t, a)

	a = start(t, cfg)
	defer stop(t, a)
	testkit.Eventually(t, 5*time.Second, "the expired memory to be purged", func() bool {
		return storetest.Int(t, a.Store, `SELECT COUNT(*) FROM memories`) == 1
	})
}

// conceptEmbedder is a stand-in embeddings endpoint that knows synonyms: texts about
// cars point one way, texts about food another. The offline embedder cannot match
// "automobile" to "car"; an endpoint can.
func conceptEmbedder(t *testing.T, calls *atomic.Int32) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Input []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/embeddings" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []item `json:"data"`
		}
		for i, text := range req.Input {
			v := make([]float32, 8)
			switch low := strings.ToLower(text); {
			case strings.Contains(low, "car") || strings.Contains(low, "automobile"):
				v[0] = 1
			case strings.Contains(low, "pasta") || strings.Contains(low, "food"):
				v[1] = 1
			default:
				v[7] = 1
			}
			out.Data = append(out.Data, item{i, v})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestEmbeddingsEndpointReindexes: memories saved with the offline embedder are
// indexed again when an embeddings endpoint is configured (once: not at every start),
// and then a question that shares no word with a memory finds it.
func TestEmbeddingsEndpointReindexes(t *testing.T) {
	ctx := context.Background()
	cfg := config.Config{DataDir: t.TempDir()}
	a := start(t, cfg)
	u := &store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
	if err := a.Store.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"My car is a red Fiat", "I love pasta"} {
		if _, err := a.Memory.Save(ctx, u.ID, memory.KindFact, text, memory.Source{Kind: memory.SourceManual}, 0.9); err != nil {
			t.Fatal(err)
		}
	}
	if res, _ := a.Memory.Search(ctx, u.ID, "which automobile do I drive?", 5); len(res.Hits) > 0 {
		t.Fatalf("the offline embedder matched a synonym (the test would prove nothing): %+v", res.Hits)
	}
	stop(t, a)

	var calls atomic.Int32
	cfg.EmbeddingsURL, cfg.EmbeddingsModel = conceptEmbedder(t, &calls), "concepts"
	a = start(t, cfg)
	testkit.Eventually(t, 5*time.Second, "the memories to be reindexed", func() bool { return calls.Load() >= 2 })
	var res memory.Result
	testkit.Eventually(t, 5*time.Second, "a synonym to find the memory", func() bool {
		res, _ = a.Memory.Search(ctx, u.ID, "which automobile do I drive?", 5)
		return len(res.Hits) > 0 && res.Hits[0].Text == "My car is a red Fiat"
	})
	stop(t, a)

	before := calls.Load()
	a = start(t, cfg)
	defer stop(t, a)
	if _, err := a.Memory.Search(ctx, u.ID, "pasta", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // give a needless reindex the chance to show
	if n := calls.Load() - before; n != 1 {
		t.Errorf("%d embedding calls after a restart with the same endpoint, want 1 (the search): the index was rebuilt again", n)
	}
}

// TestSavedMemorySettingsWinOverEnv: the flags and environment give the instance
// memory settings until an admin saves them; after that, a restart with the same
// environment keeps what was saved.
func TestSavedMemorySettingsWinOverEnv(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int32
	cfg := config.Config{DataDir: t.TempDir(), EmbeddingsURL: conceptEmbedder(t, &calls), EmbeddingsModel: "concepts", EmbeddingsKey: "sk-env-key"}
	a := start(t, cfg)
	if in := a.Memory.Instance(); in.EmbeddingsURL != cfg.EmbeddingsURL || !in.KeySet || !in.Enabled {
		t.Fatalf("the environment's settings are not in force: %+v", in)
	}
	in := memory.InstanceInput{Instance: memory.DefaultInstance}
	in.HalfLifeDays = 7
	if err := a.Memory.SetInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	stop(t, a)

	a = start(t, cfg)
	defer stop(t, a)
	if in := a.Memory.Instance(); in.EmbeddingsURL != "" || in.HalfLifeDays != 7 || a.Memory.EmbedderName() != "hash" {
		t.Errorf("after a restart the environment won over the saved settings: %+v, %s", in, a.Memory.EmbedderName())
	}
}
