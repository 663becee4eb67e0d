package providers_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"testing"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/llm/llmtest"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// newCatalog returns a catalog on a real SQLite file and keyring.
func newCatalog(t *testing.T) (*providers.Catalog, *store.DB) {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t)
	master := make([]byte, crypto.KeySize)
	_, _ = rand.Read(master)
	keys, err := crypto.NewKeyring(ctx, master, db)
	if err != nil {
		t.Fatal(err)
	}
	return &providers.Catalog{Store: db, Keys: keys, StartTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}, db
}

// wantCode fails unless err is an *errs.Error with code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error = %v, want an *errs.Error %q", err, code)
	}
	if e.Message == "" {
		t.Errorf("error %q has no user message", code)
	}
}

func TestSaveAndResolve(t *testing.T) {
	ctx := context.Background()
	cat, db := newCatalog(t)
	srv := llmtest.NewServer(t)
	const key = "sk-test-0123456789abcdef"
	srv.SetRequireKey(key)

	p, notice, err := cat.Save(ctx, providers.Input{Name: " Local ", Kind: store.KindOpenAI, BaseURL: srv.URL(),
		Models: []string{" m1 ", "", "m2"}, APIKey: " " + key + " "})
	if err != nil || notice != "" {
		t.Fatalf("save: %v, notice %q", err, notice)
	}
	if p.ID == 0 || p.Name != "Local" || !slices.Equal(p.Models, []string{"m1", "m2"}) {
		t.Fatalf("saved %+v", p)
	}

	t.Run("sealed key", func(t *testing.T) {
		stored, err := db.ProviderByID(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		sealed := stored.APIKeySealed
		if len(sealed) == 0 || bytes.Contains(sealed, []byte(key)) {
			t.Fatalf("stored key %q is missing or plaintext", sealed)
		}
		if hint := cat.KeyHint(ctx, p); hint == "" || bytes.Contains([]byte(hint), []byte(key)) {
			t.Errorf("key hint %q", hint)
		}
	})
	t.Run("explicit choice", func(t *testing.T) {
		client, model, err := cat.Resolve(ctx, providers.Value(p.ID, "m2"))
		if err != nil || model != "m2" {
			t.Fatalf("resolve = %q, %v", model, err)
		}
		// The fake refuses any request without the key: this proves it round-tripped.
		if _, err := client.Models(ctx); err != nil {
			t.Fatalf("the opened key was refused: %v", err)
		}
	})
	t.Run("default choice", func(t *testing.T) {
		if def, _ := cat.Default(ctx); def != providers.Value(p.ID, "m1") {
			t.Fatalf("the first provider's first model is not the default: %q", def)
		}
		_, model, err := cat.Resolve(ctx, "")
		if err != nil || model != "m1" {
			t.Fatalf("resolve default = %q, %v", model, err)
		}
	})
	t.Run("update keeps key and models", func(t *testing.T) {
		up, _, err := cat.Save(ctx, providers.Input{ID: p.ID, Name: "Local", Kind: store.KindOpenAI, BaseURL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(up.Models, p.Models) || !bytes.Equal(up.APIKeySealed, p.APIKeySealed) {
			t.Errorf("update lost models or key: %+v", up)
		}
		client, _, err := cat.Resolve(ctx, providers.Value(p.ID, "m1"))
		if err == nil {
			_, err = client.Models(ctx)
		}
		if err != nil {
			t.Errorf("key after update: %v", err)
		}
		_, _, err = cat.Save(ctx, providers.Input{ID: 9999, Name: "x", Kind: store.KindOpenAI})
		wantCode(t, err, errs.NotFound)
	})
	t.Run("bad choices", func(t *testing.T) {
		for _, choice := range []string{"nonsense", "0:m1", "x:m1", providers.Value(p.ID, "")} {
			_, _, err := cat.Resolve(ctx, choice)
			wantCode(t, err, errs.Invalid)
		}
		_, _, err := cat.Resolve(ctx, providers.Value(p.ID+100, "m1"))
		wantCode(t, err, errs.Unavailable)
		wantCode(t, cat.SetDefault(ctx, providers.Value(p.ID, "not-listed")), errs.Invalid)
	})
	t.Run("bad input", func(t *testing.T) {
		for _, in := range []providers.Input{
			{Name: "", Kind: store.KindOpenAI},
			{Name: string(make([]byte, 65)), Kind: store.KindOpenAI},
			{Name: "g", Kind: "gemini"},
			{Name: "u", Kind: store.KindAnthropic, BaseURL: "ftp://example.com"},
		} {
			_, _, err := cat.Save(ctx, in)
			wantCode(t, err, errs.Invalid)
		}
		_, _, err := cat.Save(ctx, providers.Input{Name: "LOCAL", Kind: store.KindOpenAI, Models: []string{"m"}})
		wantCode(t, err, errs.Conflict)
	})
}

func TestResolveWithoutDefault(t *testing.T) {
	cat, _ := newCatalog(t)
	_, _, err := cat.Resolve(context.Background(), "")
	wantCode(t, err, errs.Unavailable)
}

func TestSaveListsModels(t *testing.T) {
	ctx := context.Background()
	cat, _ := newCatalog(t)
	srv := llmtest.NewServer(t)
	srv.SetModels("alpha", "beta")
	srv.SetRequireKey("k1")

	p, notice, err := cat.Save(ctx, providers.Input{Name: "fake", Kind: store.KindOpenAI, BaseURL: srv.URL(), APIKey: "k1"})
	if err != nil || notice != "" {
		t.Fatalf("save: %v, notice %q", err, notice)
	}
	if !slices.Equal(p.Models, []string{"alpha", "beta"}) {
		t.Fatalf("models = %q, want the listed ones", p.Models)
	}
	if def, _ := cat.Default(ctx); def != providers.Value(p.ID, "alpha") {
		t.Errorf("default = %q", def)
	}

	srv.SetModels("gamma")
	p, notice, err = cat.RefreshModels(ctx, p.ID)
	if err != nil || !slices.Equal(p.Models, []string{"gamma"}) || notice == "" {
		t.Errorf("refresh = %q, %q, %v", p.Models, notice, err)
	}

	// A refused listing still saves the provider, with a notice to type the models.
	q, notice, err := cat.Save(ctx, providers.Input{Name: "wrong key", Kind: store.KindOpenAI, BaseURL: srv.URL(), APIKey: "bad"})
	if err != nil || notice == "" || len(q.Models) != 0 || q.ID == 0 {
		t.Errorf("save with a refused listing = %+v, %q, %v", q, notice, err)
	}
}
