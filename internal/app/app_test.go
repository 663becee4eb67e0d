package app_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/llm/llmtest"
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

	// 1,536 wide, as text-embedding-3-small: wider than the offline embedder's 384, so
	// switching to it rebuilds the vectors at another width (2,048 padded).
	emb := llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{Width: 1536})
	cfg.EmbeddingsURL, cfg.EmbeddingsModel = emb.URL(), "concepts"
	a = start(t, cfg)
	testkit.Eventually(t, 5*time.Second, "the memories to be reindexed", func() bool { return emb.Calls() >= 2 })
	var res memory.Result
	testkit.Eventually(t, 5*time.Second, "a synonym to find the memory", func() bool {
		res, _ = a.Memory.Search(ctx, u.ID, "which automobile do I drive?", 5)
		return len(res.Hits) > 0 && res.Hits[0].Text == "My car is a red Fiat"
	})
	stop(t, a)

	before := emb.Calls()
	a = start(t, cfg)
	defer stop(t, a)
	if _, err := a.Memory.Search(ctx, u.ID, "pasta", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // give a needless reindex the chance to show
	if n := emb.Calls() - before; n != 1 {
		t.Errorf("%d embedding calls after a restart with the same endpoint, want 1 (the search): the index was rebuilt again", n)
	}
}

// TestSavedMemorySettingsWinOverEnv: the flags and environment give the instance
// memory settings until an admin saves them; after that, a restart with the same
// environment keeps what was saved.
func TestSavedMemorySettingsWinOverEnv(t *testing.T) {
	ctx := context.Background()
	cfg := config.Config{DataDir: t.TempDir(), EmbeddingsURL: llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{}).URL(), EmbeddingsModel: "concepts", EmbeddingsKey: "sk-env-key"}
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

// TestStartReleasesDeadInstancesLeases: what a kill -9 leaves (its instance file, no
// longer locked, and its leases) is cleaned up when Atrium starts: the leases go at
// once, a chat left with no reply gets an interrupted one, a partial reply already
// saved stays as it is; a live instance's lease and file are left alone.
func TestStartReleasesDeadInstancesLeases(t *testing.T) {
	ctx := context.Background()
	cfg := config.Config{DataDir: t.TempDir()}
	live := start(t, cfg) // another process on the same data directory, alive throughout
	defer stop(t, live)
	db := live.Store
	u := &store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	const dead = "0b5e55ed-dead-4ead-8ead-000000000001"
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "instances", dead+".lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	seed := func(id, holder string, msgs ...store.Message) {
		t.Helper()
		if err := db.CreateSession(ctx, &store.Session{ID: id, OwnerID: u.ID}); err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			m.SessionID = id
			if err := db.AppendMessage(ctx, &m); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := db.AcquireLease(ctx, id, holder, time.Minute); err != nil || !ok {
			t.Fatalf("lease %s: %v %v", id, ok, err)
		}
	}
	user := store.Message{Role: store.RoleUser, Content: "hello"}
	seed("partial", dead+"/r1", user,
		store.Message{Role: store.RoleAssistant, Content: "half a", Status: store.StatusStopped, Error: store.ReplyInterrupted})
	seed("no-reply", dead+"/r2", user)
	seed("other-live", live.Agent.Instance()+"/r3", user)

	b := start(t, cfg)
	defer stop(t, b)

	var left []string
	leases, err := db.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		left = append(left, l.SessionID)
	}
	if strings.Join(left, ",") != "other-live" {
		t.Errorf("leases left after start: %v; want only the live instance's", left)
	}
	shape := func(id string) string {
		msgs, _, err := db.LatestMessages(ctx, id, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			s := m.Role + ":" + m.Content
			if m.Error == store.ReplyInterrupted {
				s += "(interrupted)"
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	for id, want := range map[string]string{
		"partial":    "user:hello assistant:half a(interrupted)",
		"no-reply":   "user:hello assistant:(interrupted)",
		"other-live": "user:hello",
	} {
		if got := shape(id); got != want {
			t.Errorf("%s: %q, want %q", id, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "instances", dead+".lock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead instance's file is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "instances", live.Agent.Instance()+".lock")); err != nil {
		t.Errorf("the live instance's file: %v", err)
	}
}

// TestRunRetentionAndSealingAtStart: at start Atrium prunes runs past
// ATRIUM_RUNS_KEEP_DAYS (keeping a pinned one) and seals span data an older
// version stored in the clear.
func TestRunRetentionAndSealingAtStart(t *testing.T) {
	ctx := context.Background()
	cfg := config.Config{DataDir: t.TempDir()} // no retention yet: nothing is pruned while the runs are made
	a := start(t, cfg)
	u := &store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
	if err := a.Store.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id  string
		age time.Duration
	}{{"old", 40 * 24 * time.Hour}, {"old-pinned", 40 * 24 * time.Hour}, {"new", time.Hour}} {
		run := store.RunStart{ID: r.id, OwnerID: u.ID, StartedAt: time.Now().Add(-r.age)}
		if _, err := a.Store.InsertSpan(ctx, &run, store.SpanRow{RunID: r.id, Seq: 1, Kind: "tool_call",
			StartedAt: run.StartedAt, EndedAt: run.StartedAt, Data: []byte(`{"result":"plain-marker"}`)}); err != nil {
			t.Fatal(err)
		}
		if err := a.Store.EndRun(ctx, nil, store.RunEnd{ID: r.id, Status: "complete", EndedAt: run.StartedAt}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Store.SetRunPinned(ctx, u.ID, "old-pinned", true); err != nil {
		t.Fatal(err)
	}
	stop(t, a)

	cfg.RunsKeepDays = 30
	a = start(t, cfg)
	defer stop(t, a)
	testkit.Eventually(t, 10*time.Second, "the old run pruned and the others sealed", func() bool {
		return strings.Join(storetest.Strings(t, a.Store, `SELECT id FROM runs ORDER BY id`), ",") == "new,old-pinned" &&
			storetest.Int(t, a.Store, `SELECT COUNT(*) FROM spans WHERE instr(data, 'plain-marker') > 0`) == 0
	})
	_, spans, err := a.Recorder.Run(ctx, u.ID, "new")
	if err != nil || len(spans) != 1 || !strings.Contains(string(spans[0].Data), "plain-marker") {
		t.Errorf("the sealed span does not open: %v %+v", err, spans)
	}
}

// An upload no message used for a day is deleted by the background purge (at start
// and hourly), though nobody uploads again; a newer one stays.
func TestUnsentUploadsExpireWithoutUploads(t *testing.T) {
	ctx := context.Background()
	cfg := config.Config{DataDir: t.TempDir()}
	a := start(t, cfg)
	u := &store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
	if err := a.Store.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	s := &store.Session{ID: "s1", OwnerID: u.ID, Title: "t"}
	if err := a.Store.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old", "new"} {
		f := store.Attachment{ID: id, OwnerID: u.ID, SessionID: s.ID, Name: id + ".txt", Kind: store.AttachText, MIME: "text/plain", Data: []byte(id)}
		if err := a.Store.CreateAttachment(ctx, &f, 0); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Exec(t, a.Store, `UPDATE attachments SET created_at = ? WHERE id = 'old'`,
		time.Now().Add(-store.UnsentAttachmentTTL-time.Minute).UnixMilli())
	stop(t, a)

	a = start(t, cfg)
	defer stop(t, a)
	testkit.Eventually(t, 5*time.Second, "the day-old upload to be pruned", func() bool {
		return strings.Join(storetest.Strings(t, a.Store, `SELECT id FROM attachments`), ",") == "new"
	})
}
