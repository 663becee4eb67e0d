package store_test

import (
	"context"
	"testing"
	"time"

	"atrium/internal/store"
)

func TestSessionLease(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	db.Now = func() time.Time { return now }
	u := &store.User{Username: "lease", PasswordHash: "x", Role: store.RoleUser}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	s := &store.Session{ID: "11111111-1111-4111-8111-111111111111", OwnerID: u.ID}
	if err := db.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	ttl := 5 * time.Second
	step := func(name string, got bool, err error, want bool) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s: got %v, %v; want %v", name, got, err, want)
		}
	}
	ok, err := db.AcquireLease(ctx, s.ID, "a", ttl)
	step("a acquires a free lease", ok, err, true)
	ok, err = db.AcquireLease(ctx, s.ID, "b", ttl)
	step("b cannot take a live lease", ok, err, false)
	ok, err = db.AcquireLease(ctx, s.ID, "a", ttl)
	step("a re-acquires its own lease", ok, err, true)

	now = now.Add(4 * time.Second)
	ok, err = db.RenewLease(ctx, s.ID, "a", ttl)
	step("a renews", ok, err, true)
	now = now.Add(4 * time.Second) // 8s after start, but renewed at 4s: still live
	ok, err = db.AcquireLease(ctx, s.ID, "b", ttl)
	step("b cannot take a renewed lease", ok, err, false)

	now = now.Add(2 * time.Second) // a crashed: its lease expired
	ok, err = db.AcquireLease(ctx, s.ID, "b", ttl)
	step("b takes over an expired lease", ok, err, true)
	ok, err = db.RenewLease(ctx, s.ID, "a", ttl)
	step("a learns it lost the lease", ok, err, false)

	if err := db.ReleaseLease(ctx, s.ID, "a"); err != nil {
		t.Fatal(err)
	}
	ok, err = db.AcquireLease(ctx, s.ID, "c", ttl)
	step("a's release does not free b's lease", ok, err, false)
	if err := db.ReleaseLease(ctx, s.ID, "b"); err != nil {
		t.Fatal(err)
	}
	ok, err = db.AcquireLease(ctx, s.ID, "c", ttl)
	step("c acquires after b releases", ok, err, true)
}

// TestTakeLeaseFromDeadHolder: the lease of a holder known to be dead is handed over
// before it expires, once (a second taker finds it gone), and Leases/LeaseHolder show
// who holds what.
func TestTakeLeaseFromDeadHolder(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := &store.User{Username: "take", PasswordHash: "x", Role: store.RoleUser}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	s := &store.Session{ID: "22222222-2222-4222-8222-222222222222", OwnerID: u.ID}
	if err := db.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if h, err := db.LeaseHolder(ctx, s.ID); err != nil || h != "" {
		t.Fatalf("holder of a free lease: %q %v", h, err)
	}
	if ok, err := db.AcquireLease(ctx, s.ID, "dead/run", time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	leases, err := db.Leases(ctx)
	if err != nil || len(leases) != 1 || leases[0].SessionID != s.ID || leases[0].Holder != "dead/run" {
		t.Fatalf("leases %+v %v", leases, err)
	}
	if ok, err := db.TakeLease(ctx, s.ID, "live/run", "dead/run", time.Minute); err != nil || !ok {
		t.Fatalf("take a live (unexpired) lease from its dead holder: %v %v", ok, err)
	}
	if ok, err := db.TakeLease(ctx, s.ID, "other/run", "dead/run", time.Minute); err != nil || ok {
		t.Fatalf("a second taker: %v %v, want false", ok, err)
	}
	if h, err := db.LeaseHolder(ctx, s.ID); err != nil || h != "live/run" {
		t.Fatalf("holder %q %v, want live/run", h, err)
	}
}
