package providers_test

import (
	"context"
	"maps"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/llm/llmtest"
	"atrium/internal/providers"
	"atrium/internal/store"
)

// Windows typed with the models are kept per model; the endpoint's reported ones fill
// in the rest; a refresh never overwrites what an admin typed; the edit form shows
// them all, and saving it unchanged keeps which came from where.
func TestModelWindows(t *testing.T) {
	ctx := context.Background()
	cat, db := newCatalog(t)
	srv := llmtest.NewServer(t)
	srv.SetModels("vllm-a", "vllm-b", "plain")
	srv.SetWindows(map[string]int{"vllm-a": 32768, "vllm-b": 8192})

	// Listed from the endpoint: its windows, marked reported.
	p, _, err := cat.Save(ctx, providers.Input{Name: "vLLM", Kind: store.KindOpenAI, BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]store.ModelWindow{"vllm-a": {Tokens: 32768, Reported: true}, "vllm-b": {Tokens: 8192, Reported: true}}
	if !maps.Equal(p.Windows, want) {
		t.Fatalf("listed windows %v, want %v", p.Windows, want)
	}
	if got := cat.Window(ctx, providers.Value(p.ID, "vllm-b")); got != 8192 {
		t.Errorf("Window(vllm-b) = %d", got)
	}
	if got := cat.Window(ctx, providers.Value(p.ID, "plain")); got != 0 {
		t.Errorf("Window(plain) = %d, want 0 (the instance's)", got)
	}

	// The edit form as shown, with vllm-b's window changed by the admin and plain given one.
	lines := providers.ModelLines(p)
	if lines != "vllm-a window=32768\nvllm-b window=8192\nplain" {
		t.Fatalf("form lines %q", lines)
	}
	p, _, err = cat.Save(ctx, providers.Input{ID: p.ID, Name: "vLLM", Kind: store.KindOpenAI, BaseURL: srv.URL(),
		Models: []string{"vllm-a window=32768", "vllm-b   window=16k", "plain WINDOW=4096"}})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]store.ModelWindow{"vllm-a": {Tokens: 32768, Reported: true}, "vllm-b": {Tokens: 16384}, "plain": {Tokens: 4096}}
	if !maps.Equal(p.Windows, want) {
		t.Fatalf("edited windows %v, want %v", p.Windows, want)
	}

	// The endpoint now reports other windows: the reported one follows, typed ones stay.
	srv.SetWindows(map[string]int{"vllm-a": 65536, "vllm-b": 8192, "plain": 2048})
	p, _, err = cat.RefreshModels(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]store.ModelWindow{"vllm-a": {Tokens: 65536, Reported: true}, "vllm-b": {Tokens: 16384}, "plain": {Tokens: 4096}}
	if !maps.Equal(p.Windows, want) {
		t.Fatalf("refreshed windows %v, want %v", p.Windows, want)
	}
	stored, err := db.ProviderByID(ctx, p.ID)
	if err != nil || !maps.Equal(stored.Windows, want) {
		t.Fatalf("stored windows %v, %v", stored.Windows, err)
	}

	// A model removed from the list takes its window along.
	p, _, err = cat.Save(ctx, providers.Input{ID: p.ID, Name: "vLLM", Kind: store.KindOpenAI, BaseURL: srv.URL(),
		Models: []string{"vllm-a"}})
	if err != nil {
		t.Fatal(err)
	}
	stored, _ = db.ProviderByID(ctx, p.ID)
	if len(stored.Windows) != 0 {
		t.Errorf("windows after removing models and the typed window: %v", stored.Windows)
	}
}

// A malformed window is refused with a message that says how to write one, and
// nothing is saved.
func TestModelWindowInvalid(t *testing.T) {
	ctx := context.Background()
	cat, db := newCatalog(t)
	for _, entry := range []string{"m window=", "m window=abc", "m window=100", "m window=3000000",
		"m window=-4096", "m ctx=4096", "m 4096", "m window=9999999999999999999k", "m window=0x1000"} {
		_, _, err := cat.Save(ctx, providers.Input{Name: "x", Kind: store.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1",
			Models: []string{"ok", entry}})
		wantCode(t, err, errs.Invalid)
	}
	if ps, _ := db.ListProviders(ctx); len(ps) != 0 {
		t.Errorf("a refused provider was saved: %+v", ps)
	}
}

// "vision" after a model's name marks it as taking images: kept with or without a
// window, shown back in the edit form, kept by a refresh of the endpoint's list; every
// Anthropic model takes images.
func TestModelVisionFlag(t *testing.T) {
	ctx := context.Background()
	cat, _ := newCatalog(t)
	srv := llmtest.NewServer(t)
	srv.SetModels("gpt-4o", "llava", "text-only")
	srv.SetWindows(map[string]int{"llava": 8192})
	p, _, err := cat.Save(ctx, providers.Input{Name: "Local", Kind: store.KindOpenAI, BaseURL: srv.URL(),
		Models: []string{"gpt-4o vision", "llava VISION window=8k", "text-only"}})
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]bool{"gpt-4o": true, "llava": true, "text-only": false, "unknown": false} {
		if got := cat.Vision(ctx, providers.Value(p.ID, model)); got != want {
			t.Errorf("Vision(%s) = %v, want %v", model, got, want)
		}
	}
	if lines := providers.ModelLines(p); lines != "gpt-4o vision\nllava window=8192 vision\ntext-only" {
		t.Errorf("form lines %q", lines)
	}
	p, _, err = cat.RefreshModels(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !cat.Vision(ctx, providers.Value(p.ID, "gpt-4o")) || !cat.Vision(ctx, providers.Value(p.ID, "llava")) {
		t.Errorf("a refresh lost the vision flag: %v", p.Windows)
	}
	if _, _, err := cat.Save(ctx, providers.Input{Name: "Bad", Kind: store.KindOpenAI, BaseURL: srv.URL(),
		Models: []string{"m visoin"}}); errs.Code(err) != errs.Invalid {
		t.Errorf("a misspelt option: %v, want Invalid", err)
	}
	a, _, err := cat.Save(ctx, providers.Input{Name: "Claude", Kind: store.KindAnthropic, BaseURL: srv.URL(), Models: []string{"claude-x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !cat.Vision(ctx, providers.Value(a.ID, "claude-x")) {
		t.Error("an Anthropic model is not vision-capable")
	}
}
