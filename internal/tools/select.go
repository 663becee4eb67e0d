package tools

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"
)

// DefaultSelectLimit is how many tools a turn is offered by similarity.
const DefaultSelectLimit = 20

// Selection reasons.
const (
	ReasonAll        = "all"        // every enabled tool was offered
	ReasonSimilarity = "similarity" // the most similar tools plus the recently used ones
)

// Selection records which tools a turn was offered and why, for the trace.
type Selection struct {
	Offered []string           // sorted by name
	Reason  string             // ReasonAll or ReasonSimilarity
	Scores  map[string]float64 // cosine similarity to the query, for the tools ranked (similarity only)
}

// maxK is sqlite-vec's upper bound for k in a KNN query.
const maxK = 4096

// Select chooses the tools to offer for one turn. With at most limit enabled
// tools (limit <= 0 means DefaultSelectLimit), or without a database or
// embedder, it returns every enabled tool (Reason "all"). Otherwise it returns
// the limit tools whose descriptions are most similar to query (the recent
// user message), plus the enabled tools named in recent (tools the session used
// lately): at most limit+len(recent), deduplicated, sorted by name.
//
// Tool descriptions are embedded lazily here, once per content: a tool whose
// embedder, name and description are unchanged since it was last stored (even
// by an earlier process) is not embedded again. Errors are database errors;
// a caller may fall back to Enabled().
func (r *Registry) Select(ctx context.Context, query string, recent []string, limit int) ([]Tool, Selection, error) {
	if limit <= 0 {
		limit = DefaultSelectLimit
	}
	enabled := r.Enabled()
	if len(enabled) <= limit || r.db == nil || r.emb == nil {
		return enabled, Selection{Offered: toolNames(enabled), Reason: ReasonAll}, nil
	}
	if err := r.syncVectors(ctx); err != nil {
		return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
	}

	byName := make(map[string]Tool, len(enabled))
	for _, t := range enabled {
		byName[t.Name] = t
	}
	var stored int
	if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tool_embeddings`).Scan(&stored); err != nil {
		return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
	}
	// Rows of disabled or unregistered tools may rank above enabled ones; ask
	// for enough neighbours that limit enabled tools remain after filtering.
	k := min(limit+max(0, stored-len(enabled)), stored, maxK)
	rows, err := r.db.QueryContext(ctx, `SELECT e.name, v.distance
		FROM (SELECT rowid, distance FROM tool_vectors WHERE embedding MATCH ? AND k = ?) v
		JOIN tool_embeddings e ON e.id = v.rowid
		ORDER BY v.distance, e.name`, vectorBlob(r.emb.Embed(query)), k)
	if err != nil {
		return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
	}
	defer rows.Close()

	sel := Selection{Reason: ReasonSimilarity, Scores: map[string]float64{}}
	picked := map[string]bool{}
	top := 0
	for rows.Next() {
		var name string
		var dist float64
		if err := rows.Scan(&name, &dist); err != nil {
			return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
		}
		if _, ok := byName[name]; !ok || picked[name] || top == limit {
			continue
		}
		picked[name] = true
		top++
		sel.Scores[name] = 1 - dist*dist/2 // unit vectors: L2 distance -> cosine similarity
	}
	if err := rows.Err(); err != nil {
		return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
	}
	for _, name := range recent {
		if _, ok := byName[name]; ok {
			picked[name] = true
		}
	}
	var out []Tool
	for _, t := range enabled { // sorted by name
		if picked[t.Name] {
			out = append(out, t)
		}
	}
	sel.Offered = toolNames(out)
	return out, sel, nil
}

func toolNames(ts []Tool) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return names
}

// embedText is what represents a tool in the vector space: its name split into
// words, then its description.
func embedText(t Tool) string {
	return strings.NewReplacer("_", " ", "-", " ").Replace(t.Name) + "\n" + t.Description
}

// contentHash identifies the vector embedText(t) gives with r's embedder.
func (r *Registry) contentHash(t Tool) string {
	h := sha256.New()
	if r.emb != nil {
		fmt.Fprintf(h, "%T/%d\x00", r.emb, r.emb.Dim())
	}
	h.Write([]byte(embedText(t)))
	return hex.EncodeToString(h.Sum(nil))
}

// syncVectors stores the vector of every enabled tool whose content changed
// since it was last stored. One sync at a time; Dispatch is never blocked.
func (r *Registry) syncVectors(ctx context.Context) error {
	r.vecMu.Lock()
	defer r.vecMu.Unlock()

	type job struct {
		name, text, hash string
		vec              []float32
		id               int64 // existing row, 0 if none
	}
	var jobs []*job
	r.mu.RLock()
	for name, e := range r.tools {
		if e.enabled && r.synced[name] != e.hash {
			jobs = append(jobs, &job{name: name, text: embedText(e.tool), hash: e.hash})
		}
	}
	r.mu.RUnlock()
	if len(jobs) == 0 {
		return nil
	}

	stored := map[string]struct {
		id   int64
		hash string
	}{}
	rows, err := r.db.QueryContext(ctx, `SELECT id, name, hash FROM tool_embeddings`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var name, hash string
		if err := rows.Scan(&id, &name, &hash); err != nil {
			rows.Close()
			return err
		}
		stored[name] = struct {
			id   int64
			hash string
		}{id, hash}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	var todo []*job
	for _, j := range jobs {
		s, ok := stored[j.name]
		if ok && s.hash == j.hash {
			continue // stored by an earlier run: no need to embed
		}
		j.id = s.id
		j.vec = r.emb.Embed(j.text)
		todo = append(todo, j)
	}
	if len(todo) > 0 {
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		now := time.Now().UnixMilli()
		for _, j := range todo {
			if err := storeVector(ctx, tx, j.id, j.name, j.hash, j.vec, now); err != nil {
				tx.Rollback()
				return fmt.Errorf("store vector of %s: %w", j.name, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}

	r.mu.Lock()
	for _, j := range jobs {
		r.synced[j.name] = j.hash
	}
	r.mu.Unlock()
	return nil
}

func storeVector(ctx context.Context, tx *sql.Tx, id int64, name, hash string, vec []float32, now int64) error {
	if id == 0 {
		res, err := tx.ExecContext(ctx, `INSERT INTO tool_embeddings (name, hash, updated_at) VALUES (?, ?, ?)`, name, hash, now)
		if err != nil {
			return err
		}
		if id, err = res.LastInsertId(); err != nil {
			return err
		}
	} else {
		if _, err := tx.ExecContext(ctx, `UPDATE tool_embeddings SET hash = ?, updated_at = ? WHERE id = ?`, hash, now, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM tool_vectors WHERE rowid = ?`, id); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO tool_vectors (rowid, embedding) VALUES (?, ?)`, id, vectorBlob(vec))
	return err
}

// vectorBlob encodes v as sqlite-vec's float32 blob (little-endian).
func vectorBlob(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
