package store

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A database written before migration 0011 (vec0 bit table, fixed 512-d float16)
// keeps its vectors: the bits move to memory_bits with a version, the float16
// rows stay, and the exact and prefilter reads find them.
func TestMigrationKeepsMemoryVectors(t *testing.T) {
	ctx := context.Background()
	path, raw, exec := databaseBefore(t, 11)
	exec(`INSERT INTO users (username, password_hash, role, created_at, updated_at) VALUES ('ann', 'h', 'user', 0, 0)`)
	v := make([]float32, 512)
	for i := range v {
		v[i] = float32(i%5) - 2
	}
	bits := make([]byte, 64)
	for i, x := range v {
		if x > 0 {
			bits[i/8] |= 1 << (i % 8)
		}
	}
	exec(`INSERT INTO memories (seq, id, owner_id, kind, sealed, source_kind, confidence, created_at, updated_at)
		VALUES (7, 'm1', 1, 'fact', x'00', 'manual', 1, 0, 0)`)
	exec(`INSERT INTO memory_vectors (rowid, owner_id, bits) VALUES (7, 1, vec_bit(?))`, bits)
	exec(`INSERT INTO memory_embeddings (seq, embedding) VALUES (7, ?)`, HalfBlob(v))
	raw.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	version, seqs, got, err := db.MemoryBits(ctx, 1, 512)
	if err != nil {
		t.Fatal(err)
	}
	if version != 1 || len(seqs) != 1 || seqs[0] != 7 || !bytes.Equal(got, bits) {
		t.Fatalf("migrated bits: version %d, seqs %v, bits equal %v", version, seqs, bytes.Equal(got, bits))
	}
	hits, err := db.ExactKNNMemoryCandidates(ctx, 1, v, 5)
	if err != nil || len(hits) != 1 || hits[0].ID != "m1" || hits[0].Distance > 1e-3 {
		t.Fatalf("exact knn after migration: %+v, %v", hits, err)
	}
	// Deleting goes through the new trigger and moves the version.
	if err := db.DeleteMemory(ctx, 1, "m1"); err != nil {
		t.Fatal(err)
	}
	if _, seqs, _, _ := db.MemoryBits(ctx, 1, 512); len(seqs) != 0 {
		t.Errorf("bits left after delete: %v", seqs)
	}
	if v, _ := db.MemoryVectorVersion(ctx, 1); v != 2 {
		t.Errorf("version %d after delete, want 2", v)
	}
}

// Rescoring looks its candidates up by seq however many there are: with 50 or
// more the planner chose to scan all of the owner's rows by memories_owner
// (41 ms instead of ~5 for 100 candidates among 100k in BenchmarkMemoryRecall).
func TestRescoreLooksUpBySeq(t *testing.T) {
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, n := range []int{1, 50, 100, 500} {
		seqs := make([]any, n)
		for i := range seqs {
			seqs[i] = i
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{{rescoreVectorsQuery(n), append([]any{1024}, seqs...)}, {rescoreOwnerQuery(n), append([]any{1, 0}, seqs...)}} {
			rows, err := db.pool.Query(`EXPLAIN QUERY PLAN `+q.sql, q.args...)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(detail, "INTEGER PRIMARY KEY") {
					t.Errorf("%d seqs: plan step %q is not a lookup by seq", n, detail)
				}
			}
			rows.Close()
		}
	}
}
