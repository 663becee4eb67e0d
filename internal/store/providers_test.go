package store_test

import (
	"context"
	"slices"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func TestProviders(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	oa := store.Provider{Name: "OpenAI", Kind: store.KindOpenAI, BaseURL: "https://api.openai.com/v1",
		APIKeySealed: []byte{1, 2}, Models: []string{"gpt-4o", "gpt-4o-mini"}}
	mustNil(t, db.CreateProvider(ctx, &oa))
	an := store.Provider{Name: "anthropic", Kind: store.KindAnthropic}
	mustNil(t, db.CreateProvider(ctx, &an))
	if oa.ID == 0 || oa.CreatedAt.IsZero() {
		t.Fatalf("create did not set id/timestamps: %+v", oa)
	}

	t.Run("read back", func(t *testing.T) {
		got, err := db.ProviderByID(ctx, oa.ID)
		mustNil(t, err)
		if got.Name != oa.Name || got.BaseURL != oa.BaseURL || !slices.Equal(got.Models, oa.Models) || string(got.APIKeySealed) != string(oa.APIKeySealed) {
			t.Errorf("got %+v", got)
		}
		got, err = db.ProviderByID(ctx, an.ID)
		mustNil(t, err)
		if got.Models == nil || len(got.Models) != 0 || got.APIKeySealed != nil {
			t.Errorf("empty models/key round trip: %+v", got)
		}
	})
	t.Run("invalid and conflict", func(t *testing.T) {
		wantCode(t, db.CreateProvider(ctx, &store.Provider{Name: "x", Kind: "gemini"}), errs.Invalid)
		wantCode(t, db.CreateProvider(ctx, &store.Provider{Name: "openai", Kind: store.KindOpenAI}), errs.Conflict)
		dup := an
		dup.Name = "OpenAI"
		wantCode(t, db.UpdateProvider(ctx, dup), errs.Conflict)
	})
	t.Run("update", func(t *testing.T) {
		up := oa
		up.Models = []string{"o3"}
		up.BaseURL = "http://localhost:11434/v1"
		up.APIKeySealed = nil
		mustNil(t, db.UpdateProvider(ctx, up))
		got, err := db.ProviderByID(ctx, oa.ID)
		mustNil(t, err)
		if got.BaseURL != up.BaseURL || !slices.Equal(got.Models, up.Models) || got.APIKeySealed != nil || !got.UpdatedAt.After(oa.UpdatedAt) {
			t.Errorf("after update %+v", got)
		}
		wantCode(t, db.UpdateProvider(ctx, store.Provider{ID: 999, Name: "n", Kind: store.KindOpenAI}), errs.NotFound)
	})
	t.Run("list by name and delete", func(t *testing.T) {
		ps, err := db.ListProviders(ctx)
		mustNil(t, err)
		if len(ps) != 2 || ps[0].ID != an.ID || ps[1].ID != oa.ID {
			t.Errorf("list = %+v", ps)
		}
		mustNil(t, db.DeleteProvider(ctx, an.ID))
		wantCode(t, db.DeleteProvider(ctx, an.ID), errs.NotFound)
		_, err = db.ProviderByID(ctx, an.ID)
		wantCode(t, err, errs.NotFound)
	})
}

func TestSaveProvider(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	seal := func(id int64) ([]byte, error) { return []byte{byte(id), 9}, nil }

	p := store.Provider{Name: "local", Kind: store.KindOpenAI, Models: []string{"m1"}}
	mustNil(t, db.SaveProvider(ctx, &p, seal))
	got, err := db.ProviderByID(ctx, p.ID)
	mustNil(t, err)
	if p.ID == 0 || string(got.APIKeySealed) != string([]byte{byte(p.ID), 9}) || !slices.Equal(got.Models, []string{"m1"}) {
		t.Fatalf("created %+v, read back %+v", p, got)
	}

	// An update without a sealer keeps the given sealed key.
	p.Models = []string{"m2"}
	mustNil(t, db.SaveProvider(ctx, &p, nil))
	got, _ = db.ProviderByID(ctx, p.ID)
	if !slices.Equal(got.Models, []string{"m2"}) || len(got.APIKeySealed) != 2 {
		t.Errorf("after update %+v", got)
	}

	// A failing sealer rolls the insert back: no provider without its key.
	boom := errs.E(errs.Internal, "seal failed")
	err = db.SaveProvider(ctx, &store.Provider{Name: "other", Kind: store.KindOpenAI}, func(int64) ([]byte, error) { return nil, boom })
	wantCode(t, err, errs.Internal)
	if ps, _ := db.ListProviders(ctx); len(ps) != 1 {
		t.Errorf("a failed save left %d providers, want 1", len(ps))
	}
	wantCode(t, db.SaveProvider(ctx, &store.Provider{Name: "LOCAL", Kind: store.KindOpenAI}, seal), errs.Conflict)
}
