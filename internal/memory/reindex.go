package memory

import (
	"context"
	"fmt"

	"atrium/internal/errs"
)

// IndexVersion names how texts are turned into index terms. Bump it when
// normalisation or stemming changes, so that Reindex rebuilds what was indexed the
// old way.
const IndexVersion = "terms-2"

const indexSetting = "memory.index"

// Reindex rebuilds every memory's terms and vectors when the embedder (named by
// embedder, e.g. "hash" or the endpoint and model) or IndexVersion differs from the
// ones the stored index was built with; otherwise it does nothing. Texts and dates
// are kept. It returns how many memories were reindexed. A failure (the embeddings
// endpoint down) leaves the old index for the next try; memories done so far stay
// done, and lexical search works throughout.
func (s *Service) Reindex(ctx context.Context, embedder string) (int, error) {
	want := IndexVersion + "|" + embedder
	have, err := s.db.Setting(ctx, indexSetting)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return 0, fmt.Errorf("memory: reindex: %w", err)
	}
	if have == want {
		return 0, nil
	}
	owners, err := s.db.MemoryOwners(ctx)
	if err != nil {
		return 0, fmt.Errorf("memory: reindex: %w", err)
	}
	n := 0
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
		}
	}
	if err := s.db.SetSetting(ctx, indexSetting, want); err != nil {
		return n, fmt.Errorf("memory: reindex: %w", err)
	}
	return n, nil
}
