package trace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"atrium/internal/crypto"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/trace"
)

// sealedFixture is a fixture whose recorder seals span data with a real keyring.
func sealedFixture(t testing.TB) (*fixture, *crypto.Keyring) {
	t.Helper()
	f := newFixture(t)
	keys, err := crypto.NewKeyring(context.Background(), bytes.Repeat([]byte{7}, crypto.KeySize), f.db)
	mustNil(t, err)
	f.rec = trace.NewRecorder(f.db, f.red, keys)
	return f, keys
}

// storedData is every spans.data value in the file, as stored.
func storedData(t *testing.T, db *store.DB) []string {
	t.Helper()
	return storetest.Strings(t, db, `SELECT data FROM spans WHERE data IS NOT NULL ORDER BY id`)
}

// Every kind's payload is sealed in the file, not only model requests: a tool
// result or a reply is as private. Run and LatestSpanData give the plaintext back
// to the owner; the payload opens with the owner's key only.
func TestSpanPayloadsSealedForOwner(t *testing.T) {
	f, keys := sealedFixture(t)
	ctx := context.Background()
	run, err := f.rec.StartRun(ctx, "run-s", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	mustNil(t, run.Record(ctx, trace.KindContext, "step 1", map[string]any{"zones": "ctx-marker-zone"}, ms(1), "", nil, 10, 0))
	tc, err := run.Span(ctx, trace.KindToolCall, "clock", json.RawMessage(`{"arguments":{"tz":"tool-marker-arg"}}`))
	mustNil(t, err)
	mustNil(t, tc.End(ctx, "", nil, 0, 0, map[string]string{"result": "tool-marker-result"}))
	mustNil(t, run.Record(ctx, trace.KindModelResponse, "m", map[string]string{"content": "reply-marker"}, ms(2), "", nil, 0, 3))
	mustNil(t, run.End(ctx, "", nil, 10, 3, 1))

	for _, d := range storedData(t, f.db) {
		if strings.Contains(d, "marker") || !strings.HasPrefix(d, `{"sealed":`) {
			t.Errorf("span data stored in the clear: %s", d)
		}
	}
	// Metadata stays queryable in the clear.
	kinds := strings.Join(storetest.Strings(t, f.db, `SELECT kind || ':' || name FROM spans ORDER BY seq`), ",")
	if kinds != "context:step 1,tool_call:clock,model_response:m" {
		t.Errorf("kinds and names %q", kinds)
	}

	_, spans, err := f.rec.Run(ctx, f.ann.ID, "run-s")
	mustNil(t, err)
	if len(spans) != 3 || !strings.Contains(string(spans[1].Data), "tool-marker-arg") ||
		!strings.Contains(string(spans[1].Data), "tool-marker-result") || !strings.Contains(string(spans[2].Data), "reply-marker") {
		t.Fatalf("spans not opened: %+v", spans)
	}
	latest, err := f.rec.LatestSpanData(ctx, f.ann.ID, f.sess.ID, trace.KindContext)
	mustNil(t, err)
	if !strings.Contains(string(latest), "ctx-marker-zone") {
		t.Errorf("LatestSpanData = %s", latest)
	}

	// The sealed bytes open with ann's key and not with bob's.
	var sd struct{ Sealed []byte }
	mustNil(t, json.Unmarshal([]byte(storedData(t, f.db)[1]), &sd))
	ad := crypto.AD("span", "run-s", "2")
	if _, err := keys.Open(ctx, f.ann.ID, sd.Sealed, ad); err != nil {
		t.Errorf("owner's key: %v", err)
	}
	if _, err := keys.Open(ctx, f.bob.ID, sd.Sealed, ad); err == nil {
		t.Errorf("bob's key opened ann's span")
	}
	// Moving the run to bob (a hostile row edit) does not let bob read it.
	storetest.WriterExec(t, f.db, `UPDATE runs SET owner_id = ?, session_id = NULL WHERE id = 'run-s'`, f.bob.ID)
	if _, _, err := f.rec.Run(ctx, f.bob.ID, "run-s"); err == nil {
		t.Errorf("bob read ann's sealed run after a row edit")
	}

	// Deleting ann shreds her key: a copy of her sealed span no longer opens.
	keys.Forget(f.ann.ID)
	mustNil(t, f.db.DeleteUser(ctx, f.ann.ID))
	keys.Forget(f.ann.ID)
	if _, err := keys.Open(ctx, f.ann.ID, sd.Sealed, ad); err == nil {
		t.Errorf("a deleted user's span still opens")
	}
}

// Spans stored in the clear before sealing covered every kind are read as they
// are and sealed by SealStored, after which the file holds none of their text.
func TestSealStoredSealsPlainSpans(t *testing.T) {
	f, _ := sealedFixture(t)
	ctx := context.Background()
	plain := trace.NewRecorder(f.db, f.red, nil) // an older Atrium: nothing sealed
	run, err := plain.StartRun(ctx, "run-old", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	for i := range 3 {
		mustNil(t, run.Record(ctx, trace.KindToolCall, "clock", map[string]any{"result": "old-marker", "i": i}, ms(1), "", nil, 0, 0))
	}
	mustNil(t, run.Record(ctx, trace.KindError, "boom", nil, ms(1), "", nil, 0, 0)) // no data: nothing to seal

	_, before, err := f.rec.Run(ctx, f.ann.ID, "run-old")
	mustNil(t, err)
	n, err := f.rec.SealStored(ctx, 2) // two batches
	mustNil(t, err)
	if n != 3 {
		t.Errorf("sealed %d spans, want 3", n)
	}
	for _, d := range storedData(t, f.db) {
		if strings.Contains(d, "old-marker") {
			t.Errorf("still in the clear: %s", d)
		}
	}
	_, after, err := f.rec.Run(ctx, f.ann.ID, "run-old")
	mustNil(t, err)
	for i := range before {
		if !bytes.Equal(before[i].Data, after[i].Data) {
			t.Errorf("span %d: %s before sealing, %s after", i, before[i].Data, after[i].Data)
		}
	}
	if n, err := f.rec.SealStored(ctx, 2); err != nil || n != 0 {
		t.Errorf("second pass sealed %d (%v)", n, err)
	}
}
