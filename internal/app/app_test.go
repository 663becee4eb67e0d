package app_test

import (
	"context"
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
