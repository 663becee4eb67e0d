package store_test

import (
	"context"
	"testing"

	"atrium/internal/store"
)

// unit returns a 256-wide vector (the table's width) with 1 at index i.
func unit(i int) []float32 {
	v := make([]float32, 256)
	v[i] = 1
	return v
}

func TestToolVectors(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	mustNil(t, db.PutToolVectors(ctx, nil))
	mustNil(t, db.PutToolVectors(ctx, []store.ToolVector{
		{Name: "a", Hash: "ha", Vector: unit(0)},
		{Name: "b", Hash: "hb", Vector: unit(1)},
		{Name: "c", Hash: "hc", Vector: unit(1)},
	}))
	// Replacing a's vector moves it next to b and c.
	mustNil(t, db.PutToolVectors(ctx, []store.ToolVector{{Name: "a", Hash: "ha2", Vector: unit(1)}}))

	hashes, err := db.ToolVectorHashes(ctx)
	mustNil(t, err)
	if len(hashes) != 3 || hashes["a"] != "ha2" || hashes["b"] != "hb" {
		t.Errorf("hashes %v", hashes)
	}
	n, err := db.CountToolVectors(ctx)
	mustNil(t, err)
	if n != 3 {
		t.Errorf("%d vectors, want 3", n)
	}
	got, err := db.NearestToolVectors(ctx, unit(1), 3)
	mustNil(t, err)
	if len(got) != 3 || got[0].Name != "a" || got[1].Name != "b" || got[2].Name != "c" || got[0].Distance != 0 {
		t.Errorf("nearest = %+v, want a, b, c (ties by name) at distance 0", got)
	}
	got, err = db.NearestToolVectors(ctx, unit(0), 1)
	mustNil(t, err)
	if len(got) != 1 || got[0].Distance == 0 {
		t.Errorf("nearest to an unused direction = %+v", got)
	}
}
