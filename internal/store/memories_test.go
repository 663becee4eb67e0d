package store_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// testIndex makes a random 512-d unit vector (and its sign bits) and one term per tag.
func testIndex(r *rand.Rand, tags ...string) (store.MemoryIndex, []float32) {
	return testIndexDims(r, 512, tags...)
}

func testIndexDims(r *rand.Rand, dims int, tags ...string) (store.MemoryIndex, []float32) {
	v := make([]float32, dims)
	var n float64
	for i := range v {
		v[i] = float32(r.NormFloat64())
		n += float64(v[i]) * float64(v[i])
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	ix := store.MemoryIndex{Bits: signBits(v), Embedding: store.HalfBlob(v)}
	for _, t := range tags {
		ix.Terms = append(ix.Terms, store.MemoryTerm{Tag: []byte(t), TF: 1})
	}
	return ix, v
}

func signBits(v []float32) []byte {
	b := make([]byte, len(v)/8)
	for i, x := range v {
		if x > 0 {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return b
}

func insertMem(t *testing.T, db *store.DB, owner int64, id string, ix store.MemoryIndex) *store.Memory {
	t.Helper()
	m := &store.Memory{ID: id, OwnerID: owner, Kind: "fact", Sealed: []byte("sealed-" + id), TermCount: len(ix.Terms),
		SourceKind: "manual", Confidence: 0.8}
	mustNil(t, db.InsertMemories(context.Background(), []*store.Memory{m}, []store.MemoryIndex{ix}))
	return m
}

func countRows(t *testing.T, db *store.DB, q string, args ...any) int {
	t.Helper()
	var n int
	mustNil(t, db.SQLForTest().QueryRow(q, args...).Scan(&n))
	return n
}

func TestMemoriesStore(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	r := rand.New(rand.NewPCG(1, 2))

	ixA, vA := testIndex(r, "coffee", "black")
	a := insertMem(t, db, ann.ID, "m-a", ixA)
	ixB, _ := testIndex(r, "tea", "green")
	insertMem(t, db, ann.ID, "m-b", ixB)
	ixC, _ := testIndex(r, "coffee")
	insertMem(t, db, bob.ID, "m-c", ixC)

	got, err := db.MemoryByID(ctx, ann.ID, "m-a")
	mustNil(t, err)
	if got.ID != "m-a" || string(got.Sealed) != "sealed-m-a" || got.Seq != a.Seq || got.Confidence != 0.8 || got.CreatedAt.IsZero() {
		t.Errorf("memory = %+v", got)
	}
	_, err = db.MemoryByID(ctx, bob.ID, "m-a")
	wantCode(t, err, errs.NotFound)

	list, err := db.ListMemories(ctx, ann.ID)
	mustNil(t, err)
	if len(list) != 2 || list[0].ID != "m-b" {
		t.Errorf("list = %v", list)
	}

	hits, err := db.LexicalMemoryCandidates(ctx, ann.ID, [][]byte{[]byte("coffee")}, 10)
	mustNil(t, err)
	if len(hits) != 1 || hits[0].ID != "m-a" || hits[0].Score <= 0 {
		t.Errorf("lexical = %+v", hits)
	}

	version, seqs, bits, err := db.MemoryBits(ctx, ann.ID, 512)
	mustNil(t, err)
	if version != 2 || len(seqs) != 2 || len(bits) != 128 || string(bits[:64]) != string(ixA.Bits) {
		t.Errorf("ann's bits: version %d, seqs %v, %d bytes", version, seqs, len(bits))
	}
	hits, err = db.RescoreMemories(ctx, ann.ID, seqs, vA, 5)
	mustNil(t, err)
	if len(hits) != 2 || hits[0].ID != "m-a" || hits[0].Distance > 1e-3 {
		t.Errorf("rescore = %+v", hits)
	}
	// Seqs of another owner are not rescored for ann.
	_, bobSeqs, _, _ := db.MemoryBits(ctx, bob.ID, 512)
	if hits, _ := db.RescoreMemories(ctx, ann.ID, bobSeqs, vA, 5); len(hits) != 0 {
		t.Errorf("ann rescored bob's memory: %+v", hits)
	}
	hits, err = db.ExactKNNMemoryCandidates(ctx, bob.ID, vA, 5)
	mustNil(t, err)
	if len(hits) != 1 || hits[0].ID != "m-c" {
		t.Errorf("bob's knn = %+v", hits)
	}

	// Update replaces terms and vector in place; bob cannot update ann's.
	ixA2, vA2 := testIndex(r, "espresso")
	_, err = db.UpdateMemory(ctx, bob.ID, "m-a", []byte("x"), 1, ixA2)
	wantCode(t, err, errs.NotFound)
	up, err := db.UpdateMemory(ctx, ann.ID, "m-a", []byte("sealed-2"), 1, ixA2)
	mustNil(t, err)
	if string(up.Sealed) != "sealed-2" || up.Seq != a.Seq {
		t.Errorf("updated = %+v", up)
	}
	hits, _ = db.LexicalMemoryCandidates(ctx, ann.ID, [][]byte{[]byte("coffee")}, 10)
	if len(hits) != 0 {
		t.Errorf("old term still found: %+v", hits)
	}
	hits, _ = db.ExactKNNMemoryCandidates(ctx, ann.ID, vA2, 1)
	if len(hits) != 1 || hits[0].ID != "m-a" || hits[0].Distance > 1e-3 {
		t.Errorf("knn after update = %+v", hits)
	}
	// The update replaced a row of bits: two changes.
	if v, _ := db.MemoryVectorVersion(ctx, ann.ID); v != 4 {
		t.Errorf("version after update %d, want 4", v)
	}

	mustNil(t, db.MarkMemoriesUsed(ctx, ann.ID, []string{"m-a", "m-c"}))
	got, _ = db.MemoryByID(ctx, ann.ID, "m-a")
	c, _ := db.MemoryByID(ctx, bob.ID, "m-c")
	if got.UseCount != 1 || got.LastUsedAt == nil || c.UseCount != 0 {
		t.Errorf("use counts %d %d", got.UseCount, c.UseCount)
	}

	wantCode(t, db.DeleteMemory(ctx, bob.ID, "m-a"), errs.NotFound)
	mustNil(t, db.DeleteMemory(ctx, ann.ID, "m-a"))
	wantCode(t, db.DeleteMemory(ctx, ann.ID, "m-a"), errs.NotFound)
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_bits WHERE seq = ?`, a.Seq); n != 0 {
		t.Errorf("vector left behind")
	}
	if v, _ := db.MemoryVectorVersion(ctx, ann.ID); v != 5 {
		t.Errorf("version after delete %d, want 5", v)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_embeddings WHERE seq = ?`, a.Seq); n != 0 {
		t.Errorf("float vector left behind")
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_terms WHERE memory_seq = ?`, a.Seq); n != 0 {
		t.Errorf("terms left behind")
	}
	n, err := db.DeleteOwnerMemories(ctx, ann.ID)
	mustNil(t, err)
	if n != 1 {
		t.Errorf("deleted %d", n)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_bits`); n != 1 {
		t.Errorf("%d vectors left, want bob's 1", n)
	}
}

func TestMemoriesGoWithTheirUser(t *testing.T) {
	db := mustOpen(t)
	ann := mustUser(t, db, "ann", store.RoleUser)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 3 {
		ix, _ := testIndex(r, "w")
		insertMem(t, db, ann.ID, fmt.Sprint("m", i), ix)
	}
	_, err := db.SQLForTest().Exec(`DELETE FROM users WHERE id = ?`, ann.ID)
	mustNil(t, err)
	for _, q := range []string{`SELECT COUNT(*) FROM memories`, `SELECT COUNT(*) FROM memory_terms`,
		`SELECT COUNT(*) FROM memory_bits`, `SELECT COUNT(*) FROM memory_embeddings`} {
		if n := countRows(t, db, q); n != 0 {
			t.Errorf("%s = %d after the user's deletion", q, n)
		}
	}
}

func TestInsertMemoryUnknownOwner(t *testing.T) {
	db := mustOpen(t)
	ix, _ := testIndex(rand.New(rand.NewPCG(5, 6)))
	m := &store.Memory{ID: "x", OwnerID: 99, Kind: "fact", Sealed: []byte("s"), SourceKind: "manual", Confidence: 1}
	wantCode(t, db.InsertMemories(context.Background(), []*store.Memory{m}, []store.MemoryIndex{ix}), errs.NotFound)
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_bits`); n != 0 {
		t.Errorf("a failed insert left %d vectors", n)
	}
}

// Vectors of several widths live side by side (during a reindex for a new
// embedder); each search compares only rows of its query's width.
func TestMemoryVectorWidths(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	r := rand.New(rand.NewPCG(7, 8))
	ix512, v512 := testIndexDims(r, 512)
	insertMem(t, db, ann.ID, "m-512", ix512)
	ix2048, v2048 := testIndexDims(r, 2048)
	insertMem(t, db, ann.ID, "m-2048", ix2048)
	ix4096, _ := testIndexDims(r, 4096)
	insertMem(t, db, ann.ID, "m-4096", ix4096)

	for _, c := range []struct {
		q    []float32
		want string
	}{{v512, "m-512"}, {v2048, "m-2048"}} {
		hits, err := db.ExactKNNMemoryCandidates(ctx, ann.ID, c.q, 5)
		mustNil(t, err)
		if len(hits) != 1 || hits[0].ID != c.want || hits[0].Distance > 1e-3 {
			t.Errorf("%d-d exact knn = %+v, want only %s", len(c.q), hits, c.want)
		}
		_, seqs, bits, err := db.MemoryBits(ctx, ann.ID, len(c.q))
		mustNil(t, err)
		if len(seqs) != 1 || len(bits) != len(c.q)/8 {
			t.Errorf("%d-d bits: %d seqs, %d bytes", len(c.q), len(seqs), len(bits))
		}
		all := []int64{1, 2, 3}
		hits, err = db.RescoreMemories(ctx, ann.ID, all, c.q, 5)
		mustNil(t, err)
		if len(hits) != 1 || hits[0].ID != c.want {
			t.Errorf("%d-d rescore = %+v, want only %s", len(c.q), hits, c.want)
		}
	}

	// Widths that are not a power of two from 64 to 4,096, or bits and float16 of
	// different widths, are refused and write nothing.
	ix384, _ := testIndexDims(r, 384)
	ix8192, _ := testIndexDims(r, 8192)
	ix32, _ := testIndexDims(r, 32)
	mixed := store.MemoryIndex{Bits: ix512.Bits, Embedding: ix2048.Embedding}
	for i, ix := range []store.MemoryIndex{ix384, ix8192, ix32, mixed} {
		m := &store.Memory{ID: fmt.Sprint("bad", i), OwnerID: ann.ID, Kind: "fact", Sealed: []byte("s"), SourceKind: "manual", Confidence: 1}
		wantCode(t, db.InsertMemories(ctx, []*store.Memory{m}, []store.MemoryIndex{ix}), errs.Invalid)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM memories`); n != 3 {
		t.Errorf("%d memories after refused inserts, want 3", n)
	}
}

// The version moves on every change of an owner's vectors, whatever the path:
// a user's deletion cascading through memories to memory_bits counts too.
func TestMemoryVectorVersion(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	r := rand.New(rand.NewPCG(9, 10))
	version := func(owner int64) int64 {
		t.Helper()
		v, err := db.MemoryVectorVersion(ctx, owner)
		mustNil(t, err)
		return v
	}
	if v := version(ann.ID); v != 0 {
		t.Fatalf("version %d before any memory", v)
	}
	ix, _ := testIndex(r)
	insertMem(t, db, ann.ID, "a1", ix)
	ix, _ = testIndex(r)
	insertMem(t, db, bob.ID, "b1", ix)
	v1 := version(ann.ID)
	ix, _ = testIndex(r)
	mustNil(t, db.ReindexMemory(ctx, ann.ID, "a1", 0, ix))
	v2 := version(ann.ID)
	if v2 <= v1 {
		t.Errorf("reindex: version %d -> %d", v1, v2)
	}
	_, err := db.SQLForTest().Exec(`DELETE FROM users WHERE id = ?`, ann.ID)
	mustNil(t, err)
	if v3 := version(ann.ID); v3 <= v2 {
		t.Errorf("user deleted: version %d -> %d", v2, v3)
	}
	if v := version(bob.ID); v != 1 {
		t.Errorf("bob's version %d, want 1 (untouched)", v)
	}
}

func TestHalfBlob(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {1e6, 0x7c00}, {5.960464477539063e-08, 0x0001}, {1e-9, 0}} {
		b := store.HalfBlob([]float32{c.in})
		if got := uint16(b[0]) | uint16(b[1])<<8; got != c.want {
			t.Errorf("half(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	// Cosine distances through float16 stay within 1e-3 of float32's.
	db := mustOpen(t)
	ann := mustUser(t, db, "ann", store.RoleUser)
	r := rand.New(rand.NewPCG(7, 8))
	ix, v := testIndex(r)
	insertMem(t, db, ann.ID, "m", ix)
	for range 20 {
		_, q := testIndex(r)
		var dot float64
		for i := range q {
			dot += float64(q[i]) * float64(v[i])
		}
		hits, err := db.ExactKNNMemoryCandidates(context.Background(), ann.ID, q, 1)
		mustNil(t, err)
		if len(hits) != 1 || math.Abs(hits[0].Distance-(1-dot)) > 1e-3 {
			t.Fatalf("distance %v, want %v", hits, 1-dot)
		}
	}
}
