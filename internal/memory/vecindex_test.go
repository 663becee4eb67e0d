package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/testkit"
)

// insertBench stores n synthetic memories for owner in batches, through the
// same indexing as Save, and returns their texts.
func insertBench(tb testing.TB, f *fixture, owner int64, v *benchVocab, n int) []string {
	tb.Helper()
	ctx := context.Background()
	k := must(f.svc.ownerKeys(ctx, owner))
	var texts []string
	var recs []*store.Memory
	var ixs []store.MemoryIndex
	for i := range n {
		text := v.text()
		ix, terms := must2(f.svc.index(ctx, k, text))
		id := fmt.Sprintf("mem_t%d_%07d", owner, i)
		recs = append(recs, &store.Memory{ID: id, OwnerID: owner, Kind: KindFact, TermCount: terms, SourceKind: SourceImport,
			Confidence: 0.8, Sealed: must(f.svc.keys.Seal(ctx, owner, []byte(text), sealAD(id, owner)))})
		ixs = append(ixs, ix)
		texts = append(texts, text)
		if len(recs) == 500 || i == n-1 {
			ok(tb, f.db.InsertMemories(ctx, recs, ixs))
			recs, ixs = nil, nil
		}
	}
	return texts
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

// The fast path's top 5 (Hamming, then the query's floats against the sign bits,
// then float16 rescoring of 100) against the exact scan of the same owner:
// recall must be at least 0.95. The vec0 Hamming prefilter of 50 it replaces
// reached 0.88 at 10k memories and 0.80 at 100k.
func TestPrefilterRecall(t *testing.T) {
	if testing.Short() {
		testkit.Skip(t, "builds 8,000 memories; skipped with -short")
	}
	for _, dim := range []int{HashDim} { // 1536-d: BenchmarkMemoryRecall (slow to build here)
		t.Run(fmt.Sprint(dim), func(t *testing.T) {
			f := newFixture(t)
			f.emb.HashEmbedder = HashEmbedder{Dim: dim}
			ctx := context.Background()
			v := newBenchVocab(5)
			n := 8000
			texts := insertBench(t, f, f.ann, v, n)
			k := must(f.svc.ownerKeys(ctx, f.ann))
			var found, want int
			for range 100 {
				q := must(k.apply(must(f.emb.Embed(ctx, []string{v.paraphrase(texts[v.r.IntN(len(texts))])}))[0]))
				exact := must(f.db.ExactKNNMemoryCandidates(ctx, f.ann, q, 5))
				fast := must(f.svc.prefilterKNN(ctx, f.ann, q, rescoreCount(5), 5))
				in := map[string]bool{}
				for _, h := range fast {
					in[h.ID] = true
				}
				for _, h := range exact {
					if in[h.ID] {
						found++
					}
				}
				want += len(exact)
			}
			r := float64(found) / float64(want)
			t.Logf("%d-d, %d memories: recall@5 %.3f", dim, n, r)
			if r < 0.95 {
				t.Errorf("recall@5 %.3f, want ≥ 0.95", r)
			}
		})
	}
}

// The cached bits follow every change: Saves, Updates and Forgets through the
// Service (patched in place), and changes that bypass it (straight to the
// store, a user's deletion, another process), which the version catches.
func TestBitCacheFollowsWrites(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	insertBench(t, f, f.ann, newBenchVocab(2), exactBelow+50)
	knnIDs := func(text string) []string {
		t.Helper()
		k := must(f.svc.ownerKeys(ctx, f.ann))
		q := must(k.apply(must(f.emb.Embed(ctx, []string{text}))[0]))
		var out []string
		for _, h := range must(f.svc.knn(ctx, f.ann, q, 3)) {
			out = append(out, h.ID)
		}
		return out
	}
	first := func(text string) string {
		if l := knnIDs(text); len(l) > 0 {
			return l[0]
		}
		return ""
	}
	knnIDs("warm the cache")
	if f.svc.bits.get(f.ann) == nil {
		t.Fatal("the owner's bits were not cached: the test would not test the cache")
	}

	dog := f.save(t, f.ann, "My dog is called Biscuit")
	o := f.svc.bits.get(f.ann)
	if v := must(f.db.MemoryVectorVersion(ctx, f.ann)); o.version != v || o.index(must(f.db.MemoryByID(ctx, f.ann, dog.ID)).Seq) < 0 {
		t.Errorf("Save did not patch the cache (version %d, database %d): every search after a save would read it again", o.version, v)
	}
	if got := first("my dog Biscuit"); got != dog.ID {
		t.Errorf("a memory saved after caching: nearest %q, want %q", got, dog.ID)
	}

	must(f.svc.Update(ctx, f.ann, dog.ID, "Our parrot is called Kiwi"))
	if got := first("parrot Kiwi"); got != dog.ID {
		t.Errorf("after an update: nearest %q, want %q", got, dog.ID)
	}
	ok(t, f.svc.Forget(ctx, f.ann, dog.ID))
	for _, id := range knnIDs("parrot Kiwi") {
		if id == dog.ID {
			t.Errorf("a forgotten memory was found")
		}
	}

	// Behind the Service's back: a memory inserted through the store, and one
	// deleted straight in SQL.
	cat := f.save(t, f.ann, "placeholder") // gets a seq and keys; its vector is replaced below
	k := must(f.svc.ownerKeys(ctx, f.ann))
	ix, n := must2(f.svc.index(ctx, k, "The cat sleeps on the red sofa"))
	ok(t, f.db.ReindexMemory(ctx, f.ann, cat.ID, n, ix))
	if got := first("cat red sofa"); got != cat.ID {
		t.Errorf("a vector changed behind the Service: nearest %q, want %q", got, cat.ID)
	}
	var catSeq int64
	ok(t, storetest.Pool(t, f.db).QueryRow(`SELECT seq FROM memories WHERE id = ?`, cat.ID).Scan(&catSeq))
	if _, err := storetest.Pool(t, f.db).Exec(`DELETE FROM memories WHERE id = ?`, cat.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range knnIDs("cat red sofa") {
		if id == cat.ID {
			t.Errorf("a memory deleted behind the Service was found")
		}
	}
	if o := f.svc.bits.get(f.ann); o.index(catSeq) >= 0 {
		t.Errorf("the deleted memory's bits are still cached")
	}
}

// Embedders wider than 512 dimensions are used at their own width: 768-d and
// 1536-d vectors are stored padded to 1,024 and 2,048 and found again, and a
// width above MaxDims is refused with a clear error, nothing saved.
func TestWideEmbedders(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ dim, stored int }{{768, 1024}, {1536, 2048}, {3000, 4096}} {
		f := newFixture(t)
		f.emb.HashEmbedder = HashEmbedder{Dim: c.dim}
		m := f.save(t, f.ann, "My dog is called Biscuit")
		f.save(t, f.ann, "I drink oolong tea")
		var n int
		ok(t, storetest.Pool(t, f.db).QueryRow(`SELECT length(embedding) FROM memory_embeddings e JOIN memories m ON m.seq = e.seq WHERE m.id = ?`, m.ID).Scan(&n))
		if n != 2*c.stored {
			t.Errorf("%d-d: stored %d bytes of float16, want %d", c.dim, n, 2*c.stored)
		}
		res := must(f.svc.Search(ctx, f.ann, "what is my dog called", 5))
		if res.LexicalOnly || len(res.Hits) == 0 || res.Hits[0].ID != m.ID || res.Hits[0].Similarity <= 0 {
			t.Errorf("%d-d: search %+v (vector error %v)", c.dim, hitTexts(res.Hits), res.VectorErr)
		}
	}
	f := newFixture(t)
	f.emb.HashEmbedder = HashEmbedder{Dim: MaxDims + 1}
	_, err := f.svc.Save(ctx, f.ann, KindFact, "My dog is called Biscuit", manual, 0.9)
	wantCode(t, err, errs.Invalid)
	if n := len(must(f.svc.List(ctx, f.ann))); n != 0 {
		t.Errorf("%d memories saved with a too-wide embedder", n)
	}
	res := must(f.svc.Search(ctx, f.ann, "dog", 5))
	if !res.LexicalOnly || res.VectorErr == nil {
		t.Errorf("a too-wide query vector: %+v", res)
	}
}

// countingEmbedder is HashEmbedder at dim that fails once failAfter texts were
// embedded (0: never).
type countingEmbedder struct {
	dim       int
	failAfter int64
	n         atomic.Int64
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if c.failAfter > 0 && c.n.Add(int64(len(texts))) > c.failAfter {
		return nil, errors.New("embeddings endpoint down")
	}
	return HashEmbedder{Dim: c.dim}.Embed(ctx, texts)
}

// A new embedder of another width (384 → 1536) rebuilds every vector at the new
// width in Reindex. When the reindex fails half way, search keeps working:
// lexically for all, by vector for what was redone; a rerun finishes the job.
func TestReindexChangesWidth(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	v := newBenchVocab(4)
	insertBench(t, f, f.ann, v, exactBelow+20)
	dog := f.save(t, f.ann, "My dog is called Biscuit")
	ok(t, f.db.SetSetting(ctx, indexSetting, IndexVersion+"|hash"))
	widths := func() map[int]int {
		out := map[int]int{}
		rows := must(storetest.Pool(t, f.db).Query(`SELECT length(embedding) / 2, COUNT(*) FROM memory_embeddings GROUP BY 1`))
		defer rows.Close()
		for rows.Next() {
			var w, n int
			ok(t, rows.Scan(&w, &n))
			out[w] = n
		}
		return out
	}

	wide := &countingEmbedder{dim: 1536, failAfter: 100}
	svc := NewService(f.db, f.svc.keys, wide)
	svc.Now = f.svc.Now
	if _, err := svc.Reindex(ctx, "hash1536"); err == nil {
		t.Fatal("a reindex whose embedder fails half way reported success")
	}
	if w := widths(); w[512] == 0 || w[2048] == 0 {
		t.Fatalf("after a failed reindex widths %v: want both old and new rows", w)
	}
	wide.failAfter = 0
	res := must(svc.Search(ctx, f.ann, "what is my dog called", 5))
	if len(res.Hits) == 0 || res.Hits[0].ID != dog.ID {
		t.Errorf("search during a half-done reindex: %v (vector error %v)", hitTexts(res.Hits), res.VectorErr)
	}

	n := must(svc.Reindex(ctx, "hash1536"))
	if n != exactBelow+21 {
		t.Errorf("reindexed %d, want %d", n, exactBelow+21)
	}
	if w := widths(); len(w) != 1 || w[2048] != exactBelow+21 {
		t.Errorf("after the reindex widths %v, want all %d at 2048", w, exactBelow+21)
	}
	k := must(svc.ownerKeys(ctx, f.ann))
	q := must(k.apply(must(wide.Embed(ctx, []string{"my dog Biscuit"}))[0]))
	hits := must(svc.knn(ctx, f.ann, q, 3))
	if len(hits) == 0 || hits[0].ID != dog.ID {
		t.Errorf("2048-d vector search after the reindex: %+v", hits)
	}
	if n := must(svc.Reindex(ctx, "hash1536")); n != 0 {
		t.Errorf("a second reindex with the same embedder redid %d memories", n)
	}
}

// Concurrent Saves and Searches of one large owner, with vectors rewritten
// behind the Service's back meanwhile (so that searches read the bits again while
// Saves patch them; run it with -race), leave cached bits that, when they claim
// the stored version, are exactly the stored ones. Before the versions came from
// inside the write, a Save read the version after its commit, and a cache read
// meanwhile at another writer's version took the Save's patch and was labelled
// current without that writer's change (seen once in 40 runs under load: a
// forgotten memory still cached).
func TestBitCacheConcurrent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	insertBench(t, f, f.ann, newBenchVocab(6), exactBelow+10)
	all := must(f.svc.List(ctx, f.ann))
	k := must(f.svc.ownerKeys(ctx, f.ann))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				m, err := f.svc.Save(ctx, f.ann, KindFact, fmt.Sprintf("worker %d keeps parcel %d", g, i), manual, 0.5)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := f.svc.Search(ctx, f.ann, "keeps parcel", 5); err != nil {
					t.Error(err)
				}
				if i%3 == 0 {
					if err := f.svc.Forget(ctx, f.ann, m.ID); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 10 {
			m := all[i]
			ix, n := must2(f.svc.index(ctx, k, m.Text+" again"))
			if err := f.db.ReindexMemory(ctx, f.ann, m.ID, n, ix); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	// Saves only (and the searches that read the now stale bits again): at the end
	// the cache is usually current, and then it must be exact.
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				if _, err := f.svc.Save(ctx, f.ann, KindFact, fmt.Sprintf("worker %d stores crate %d", g, i), manual, 0.5); err != nil {
					t.Error(err)
					return
				}
				if _, err := f.svc.Search(ctx, f.ann, "stores crate", 5); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// The entry as the patches left it (not read again): when it claims the
	// stored version, it must hold exactly the stored bits.
	o := f.svc.bits.get(f.ann)
	version, seqs, bits, err := f.db.MemoryBits(ctx, f.ann, 512)
	ok(t, err)
	if o == nil || o.version != version {
		testkit.Skip(t, "the cache was left stale (a search will read it again); nothing to compare")
	}
	want := map[int64]uint64{}
	for i, s := range seqs {
		want[s] = packWords(bits[i*64 : i*64+64])[0]
	}
	got := map[int64]uint64{}
	for i, s := range o.seqs {
		got[s] = o.bits[i*o.words]
	}
	if !maps.Equal(got, want) {
		t.Errorf("cached bits of %d memories differ from the %d stored", len(got), len(want))
	}
}
