package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func TestBackdateMemory(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	ix, _ := testIndex(rand.New(rand.NewPCG(9, 10)), "w")
	insertMem(t, db, ann.ID, "m1", ix)
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	mustNil(t, db.BackdateMemory(ctx, ann.ID, "m1", at))
	m, err := db.MemoryByID(ctx, ann.ID, "m1")
	mustNil(t, err)
	if !m.CreatedAt.Equal(at) || !m.UpdatedAt.Equal(at) {
		t.Errorf("dates after backdating: %v, %v", m.CreatedAt, m.UpdatedAt)
	}
	if err := db.BackdateMemory(ctx, bob.ID, "m1", time.Now()); !errs.Is(err, errs.NotFound) {
		t.Errorf("backdating another owner's memory: %v", err)
	}
}
