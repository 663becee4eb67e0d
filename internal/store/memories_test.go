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

// testIndex makes a random unit vector (and its sign bits) and one term per tag.
func testIndex(r *rand.Rand, tags ...string) (store.MemoryIndex, []float32) {
	v := make([]float32, store.MemoryVectorDim)
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

	hits, err = db.KNNMemoryCandidates(ctx, ann.ID, signBits(vA), vA, 10, 5)
	mustNil(t, err)
	if len(hits) != 2 || hits[0].ID != "m-a" || hits[0].Distance > 1e-3 {
		t.Errorf("knn = %+v", hits)
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
	hits, _ = db.KNNMemoryCandidates(ctx, ann.ID, signBits(vA2), vA2, 10, 1)
	if len(hits) != 1 || hits[0].ID != "m-a" || hits[0].Distance > 1e-3 {
		t.Errorf("knn after update = %+v", hits)
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
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_vectors WHERE rowid = ?`, a.Seq); n != 0 {
		t.Errorf("vector left behind")
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
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_vectors`); n != 1 {
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
		`SELECT COUNT(*) FROM memory_vectors`, `SELECT COUNT(*) FROM memory_embeddings`} {
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
	if n := countRows(t, db, `SELECT COUNT(*) FROM memory_vectors`); n != 0 {
		t.Errorf("a failed insert left %d vectors", n)
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
