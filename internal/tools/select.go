package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"atrium/internal/store"
)

// VectorStore keeps the tools' description vectors for Select; *store.DB is one.
type VectorStore interface {
	// ToolVectorHashes returns the content hash of every stored vector by tool name.
	ToolVectorHashes(ctx context.Context) (map[string]string, error)
	// PutToolVectors stores vectors in one transaction, replacing those of the same names.
	PutToolVectors(ctx context.Context, vs []store.ToolVector) error
	// CountToolVectors returns how many vectors are stored, of any tool.
	CountToolVectors(ctx context.Context) (int, error)
	// NearestToolVectors returns the k stored tools nearest to query, nearest first.
	NearestToolVectors(ctx context.Context, query []float32, k int) ([]store.ToolMatch, error)
}

var _ VectorStore = (*store.DB)(nil)

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
	stored, err := r.db.CountToolVectors(ctx)
	if err != nil {
		return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
	}
	// Rows of disabled or unregistered tools may rank above enabled ones; ask
	// for enough neighbours that limit enabled tools remain after filtering.
	// (The store caps k at sqlite-vec's bound, store.MaxToolMatches.)
	k := min(limit+max(0, stored-len(enabled)), stored)
	matches, err := r.db.NearestToolVectors(ctx, r.emb.Embed(query), k)
	if err != nil {
		return nil, Selection{}, fmt.Errorf("tools: select: %w", err)
	}

	sel := Selection{Reason: ReasonSimilarity, Scores: map[string]float64{}}
	picked := map[string]bool{}
	top := 0
	for _, m := range matches {
		if _, ok := byName[m.Name]; !ok || picked[m.Name] || top == limit {
			continue
		}
		picked[m.Name] = true
		top++
		sel.Scores[m.Name] = 1 - m.Distance*m.Distance/2 // unit vectors: L2 distance -> cosine similarity
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
	}
	var jobs []job
	r.mu.RLock()
	for name, e := range r.tools {
		if e.enabled && r.synced[name] != e.hash {
			jobs = append(jobs, job{name: name, text: embedText(e.tool), hash: e.hash})
		}
	}
	r.mu.RUnlock()
	if len(jobs) == 0 {
		return nil
	}

	stored, err := r.db.ToolVectorHashes(ctx)
	if err != nil {
		return err
	}
	var todo []store.ToolVector
	for _, j := range jobs {
		if stored[j.name] == j.hash {
			continue // stored by an earlier run: no need to embed
		}
		todo = append(todo, store.ToolVector{Name: j.name, Hash: j.hash, Vector: r.emb.Embed(j.text)})
	}
	if err := r.db.PutToolVectors(ctx, todo); err != nil {
		return err
	}

	r.mu.Lock()
	for _, j := range jobs {
		r.synced[j.name] = j.hash
	}
	r.mu.Unlock()
	return nil
}
