package memory

import (
	"context"
	"errors"
	"fmt"

	"atrium/internal/errs"
)

// IndexVersion names how texts are turned into index terms. Bump it when
// normalisation or stemming changes, so that Reindex rebuilds what was indexed the
// old way.
const IndexVersion = "terms-2"

const indexSetting = "memory.index"

// errEmbedderChanged ends a reindex whose embedder was replaced meanwhile: the
// next run starts over with the new one.
var errEmbedderChanged = errors.New("memory: the embedder changed during the reindex")

// Reindex rebuilds every memory's terms and vectors when the embedder (named by
// embedder, e.g. "hash" or the endpoint and model) or IndexVersion differs from the
// ones the stored index was built with; otherwise it does nothing. Texts and dates
// are kept. It returns how many memories were reindexed. A failure (the embeddings
// endpoint down) leaves the old index for the next try; memories done so far stay
// done, and lexical search works throughout (vector search resumes when the index is
// the current embedder's again). ReindexStatus reports the progress.
//
// A new embedder may give vectors of another width (384 → 1536): each memory's
// vectors are rewritten at the new width in its own transaction, and searches
// compare only vectors of their query's width, so nothing half-written is ever
// compared.
func (s *Service) Reindex(ctx context.Context, embedder string) (n int, err error) {
	want := IndexVersion + "|" + embedder
	have, err := s.db.Setting(ctx, indexSetting)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return 0, fmt.Errorf("memory: reindex: %w", err)
	}
	s.inst.mu.Lock()
	gen, current := s.inst.gen, s.inst.name
	s.inst.mu.Unlock()
	if current != "" && current != embedder {
		return 0, nil // replaced already: the run for the new one follows (ReindexRequests)
	}
	if have == want {
		s.reindexed(gen, embedder, nil)
		return 0, nil
	}
	stats, err := s.db.MemoryStatsByOwner(ctx)
	if err != nil {
		return 0, fmt.Errorf("memory: reindex: %w", err)
	}
	total := 0
	for _, st := range stats {
		total += st.Count
	}
	s.inst.mu.Lock()
	s.inst.progress = ReindexStatus{Running: true, Total: total}
	s.inst.mu.Unlock()
	defer func() {
		if err != nil && errors.Is(err, errEmbedderChanged) {
			err = nil // not a failure: the next run follows
		}
		s.reindexed(gen, embedder, err)
	}()

	owners, err := s.db.MemoryOwners(ctx)
	if err != nil {
		return 0, fmt.Errorf("memory: reindex: %w", err)
	}
	for _, owner := range owners {
		k, err := s.ownerKeys(ctx, owner)
		if err != nil {
			return n, fmt.Errorf("memory: reindex: %w", err)
		}
		list, err := s.List(ctx, owner)
		if err != nil {
			return n, fmt.Errorf("memory: reindex: %w", err)
		}
		for _, m := range list {
			if _, g := s.embedder(); g != gen {
				return n, errEmbedderChanged
			}
			ix, terms, err := s.index(ctx, k, m.Text)
			if err != nil {
				return n, fmt.Errorf("memory: reindex: %w", err)
			}
			switch err := s.db.ReindexMemory(ctx, owner, m.ID, terms, ix); {
			case errs.Is(err, errs.NotFound):
				continue // forgotten meanwhile
			case err != nil:
				return n, fmt.Errorf("memory: reindex: %w", err)
			}
			n++
			s.inst.mu.Lock()
			s.inst.progress.Done = n
			s.inst.mu.Unlock()
		}
	}
	if _, g := s.embedder(); g != gen {
		return n, errEmbedderChanged
	}
	if err := s.db.SetSetting(ctx, indexSetting, want); err != nil {
		return n, fmt.Errorf("memory: reindex: %w", err)
	}
	return n, nil
}

// reindexed ends a reindex run of generation gen: when it succeeded for the embedder
// in force, the vectors are current and search uses them again.
func (s *Service) reindexed(gen uint64, embedder string, err error) {
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	p := &s.inst.progress
	p.Running, p.Err = false, ""
	if err != nil {
		p.Err = reindexError(err)
		return
	}
	if gen == s.inst.gen && (embedder == s.inst.name || s.inst.name == "") {
		s.inst.stale = false
	}
}

// reindexError is what the admin page says of a failed reindex: no memory text
// (the errors of the embedder carry none) and no internal detail beyond the cause.
func reindexError(err error) string {
	var se *StatusError
	if errors.As(err, &se) {
		return "the embeddings endpoint answered " + se.Status
	}
	if errs.Code(err) != errs.Internal {
		var e *errs.Error
		if errors.As(err, &e) && e.Err != nil {
			return e.Err.Error()
		}
		return errs.Message(err)
	}
	return err.Error()
}
