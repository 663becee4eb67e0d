package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
)

// ToolVector is the embedding of one tool's description (tools.Registry.Select).
// Hash identifies the content (embedder, name, description) it was computed
// from, so that an unchanged tool is not embedded again, even by a later process.
type ToolVector struct {
	Name, Hash string
	Vector     []float32 // as wide as the tool_vectors table (migration 0004: 256)
}

// ToolMatch is a stored tool's L2 distance to a query vector.
type ToolMatch struct {
	Name     string
	Distance float64
}

// MaxToolMatches is sqlite-vec's upper bound for k in a KNN query;
// NearestToolVectors asks for no more.
const MaxToolMatches = 4096

// ToolVectorHashes returns the content hash of every stored tool vector, by tool
// name.
func (db *DB) ToolVectorHashes(ctx context.Context) (map[string]string, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT name, hash FROM tool_embeddings`)
	if err != nil {
		return nil, fmt.Errorf("store: tool vector hashes: %w", err)
	}
	type pair struct{ name, hash string }
	pairs, err := scanAll(rows, func(row scanner) (p pair, err error) {
		err = row.Scan(&p.name, &p.hash)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: tool vector hashes: %w", err)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p.name] = p.hash
	}
	return out, nil
}

// PutToolVectors stores vs in one transaction, replacing the vector and hash of
// a tool already stored under the same name.
func (db *DB) PutToolVectors(ctx context.Context, vs []ToolVector) error {
	if len(vs) == 0 {
		return nil
	}
	now := ms(db.now())
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for _, v := range vs {
			var id int64
			err := tx.QueryRowContext(ctx, `INSERT INTO tool_embeddings (name, hash, updated_at) VALUES (?, ?, ?)
				ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, updated_at = excluded.updated_at
				RETURNING id`, v.Name, v.Hash, now).Scan(&id)
			if err == nil {
				// vec0 has no upsert: drop the old vector (if any) and insert the new one.
				_, err = tx.ExecContext(ctx, `DELETE FROM tool_vectors WHERE rowid = ?`, id)
			}
			if err == nil {
				_, err = tx.ExecContext(ctx, `INSERT INTO tool_vectors (rowid, embedding) VALUES (?, ?)`, id, vectorBlob(v.Vector))
			}
			if err != nil {
				return fmt.Errorf("%s: %w", v.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: put tool vectors: %w", err)
	}
	return nil
}

// CountToolVectors returns how many tool vectors are stored, including those of
// tools no longer registered.
func (db *DB) CountToolVectors(ctx context.Context) (int, error) {
	var n int
	if err := db.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM tool_embeddings`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count tool vectors: %w", err)
	}
	return n, nil
}

// NearestToolVectors returns the k stored tools nearest to query (k capped at
// MaxToolMatches), nearest first, ties by name. Which of several equally near
// tools make the k is sqlite-vec's choice.
func (db *DB) NearestToolVectors(ctx context.Context, query []float32, k int) ([]ToolMatch, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT e.name, v.distance
		FROM (SELECT rowid, distance FROM tool_vectors WHERE embedding MATCH ? AND k = ?) v
		JOIN tool_embeddings e ON e.id = v.rowid
		ORDER BY v.distance, e.name`, vectorBlob(query), min(k, MaxToolMatches))
	if err != nil {
		return nil, fmt.Errorf("store: nearest tool vectors: %w", err)
	}
	matches, err := scanAll(rows, func(row scanner) (m ToolMatch, err error) {
		err = row.Scan(&m.Name, &m.Distance)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: nearest tool vectors: %w", err)
	}
	return matches, nil
}

// vectorBlob encodes v as sqlite-vec's float32 blob (little-endian).
func vectorBlob(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
