package agent

import (
	"context"

	"atrium/internal/llm"
)

// memoryModel is the provider and model that memory extraction asks: the instance's
// memory model when an admin chose one (Settings → Memories), else the chat's. A
// choice that no longer resolves (its provider was removed) falls back to the chat's
// model, with a warning: extraction goes on, and the admin page says what is wrong.
func (t *turn) memoryModel(ctx context.Context) (llm.Provider, string) {
	st, err := t.a.Memory.Settings(ctx, t.s.OwnerID)
	if err != nil || st.Model == "" {
		return t.provider, t.model
	}
	p, m, err := t.a.Resolve(ctx, st.Model)
	if err != nil {
		t.a.Log.Warn("agent: the memory model does not resolve; extraction asks the chat's model", "session", t.s.ID, "err", err)
		return t.provider, t.model
	}
	return p, m
}
