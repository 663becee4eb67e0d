package memory

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"atrium/internal/errs"
	"atrium/internal/tools"
)

// Tool names, for the model.
const (
	ToolSave   = "memory_save"
	ToolSearch = "memory_search"
	ToolForget = "memory_forget"
)

// RegisterTools adds memory_save, memory_search and memory_forget to reg. They act
// for the calling chat's owner only; a refused text (a secret, an empty one) and an
// unknown id come back to the model as structured errors it can act on.
func RegisterTools(reg *tools.Registry, svc *Service) error {
	// The agent offers these tools only where memory is on; a call anyway (a model
	// naming a tool it was not offered) is refused here too.
	guard := func(exec func(context.Context, tools.Call) (string, error)) func(context.Context, tools.Call) (string, error) {
		return func(ctx context.Context, c tools.Call) (string, error) {
			if err := svc.usable(ctx, c.OwnerID, c.SessionID); err != nil {
				return "", err
			}
			return exec(ctx, c)
		}
	}
	for _, t := range []tools.Tool{
		{
			Name: ToolSave,
			Description: "When to use: the user states a lasting preference, fact about themselves or standing instruction " +
				"worth remembering in later chats, or asks you to remember something. Never for secrets, passwords or " +
				"one-off details. What it does: saves one short memory for this user. Parameters: text (one fact, in the " +
				"user's words), kind (preference, fact or instruction).",
			Schema: json.RawMessage(`{"type":"object","properties":{
				"text":{"type":"string","minLength":1,"maxLength":2000},
				"kind":{"type":"string","enum":["preference","fact","instruction"]}},
				"required":["text","kind"],"additionalProperties":false}`),
			Execute: guard(func(ctx context.Context, c tools.Call) (string, error) {
				var a struct{ Text, Kind string }
				if err := json.Unmarshal(c.Args, &a); err != nil {
					return "", err
				}
				m, err := svc.Save(ctx, c.OwnerID, a.Kind, a.Text, Source{Kind: SourceTool, SessionID: c.SessionID}, 0.8)
				if err != nil {
					return "", toolError(err)
				}
				return toJSON(map[string]any{"saved": m.ID, "kind": m.Kind})
			}),
		},
		{
			Name: ToolSearch,
			Description: "When to use: you need something the user told you in an earlier chat that is not in this " +
				"conversation. What it does: searches this user's memories. Parameters: query (what you are looking for), " +
				"limit (1–10, default 5).",
			Schema: json.RawMessage(`{"type":"object","properties":{
				"query":{"type":"string","minLength":1,"maxLength":500},
				"limit":{"type":"integer","minimum":1,"maximum":10}},
				"required":["query"],"additionalProperties":false}`),
			Execute: guard(func(ctx context.Context, c tools.Call) (string, error) {
				var a struct {
					Query string
					Limit int
				}
				if err := json.Unmarshal(c.Args, &a); err != nil {
					return "", err
				}
				if a.Limit == 0 {
					a.Limit = 5
				}
				res, err := svc.Search(ctx, c.OwnerID, a.Query, a.Limit)
				if err != nil {
					return "", toolError(err)
				}
				type hit struct {
					ID      string `json:"id"`
					Kind    string `json:"kind"`
					Text    string `json:"text"`
					Updated string `json:"updated"`
				}
				hits := make([]hit, 0, len(res.Hits))
				for _, h := range res.Hits {
					hits = append(hits, hit{h.ID, h.Kind, h.Text, h.UpdatedAt.UTC().Format(time.DateOnly)})
				}
				return toJSON(map[string]any{"memories": hits})
			}),
		},
		{
			Name: ToolForget,
			Description: "When to use: the user asks you to forget something, or a memory you found is wrong. What it " +
				"does: deletes one memory for good. Parameters: id (from memory_search).",
			Schema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":64}},
				"required":["id"],"additionalProperties":false}`),
			Execute: guard(func(ctx context.Context, c tools.Call) (string, error) {
				var a struct{ ID string }
				if err := json.Unmarshal(c.Args, &a); err != nil {
					return "", err
				}
				if err := svc.Forget(ctx, c.OwnerID, a.ID); err != nil {
					return "", toolError(err)
				}
				return toJSON(map[string]any{"forgotten": a.ID})
			}),
		},
	} {
		if err := reg.Register(t); err != nil {
			return err
		}
	}
	return nil
}

// usable refuses memory in a temporary chat, for a user who turned it off and
// everywhere when an admin turned it off.
func (s *Service) usable(ctx context.Context, owner int64, sessionID string) error {
	st, err := s.Settings(ctx, owner)
	if err != nil {
		return err
	}
	if st.InstanceOff {
		return &tools.Error{Detail: "memory is turned off for this instance by an admin"}
	}
	if !st.Enabled {
		return &tools.Error{Detail: "memory is turned off for this user"}
	}
	if sessionID != "" {
		sess, err := s.db.SessionForOwner(ctx, sessionID, owner)
		if err != nil {
			return err
		}
		if sess.Temporary {
			return &tools.Error{Detail: "this is a temporary chat: memory is neither read nor written"}
		}
	}
	return nil
}

// toolError turns the service's user-facing errors into details for the model;
// anything else stays an internal failure (logged, not shown).
func toolError(err error) error {
	var e *errs.Error
	if errors.As(err, &e) && e.Code != errs.Internal {
		return &tools.Error{Detail: errs.Message(err)}
	}
	return err
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
