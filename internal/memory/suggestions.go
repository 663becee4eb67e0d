package memory

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/store"
)

// SuggestionTTL is how long a suggestion waits to be accepted or rejected.
const SuggestionTTL = 30 * 24 * time.Hour

// DuplicateSimilarity: a new text this close (cosine) to an existing memory says
// the same thing and is merged into it (not added again).
const DuplicateSimilarity = 0.92

// Suggestion ops.
const (
	OpAdd    = "add"
	OpUpdate = "update"
)

// Suggestion is a memory write proposed by extraction for a user who asked to be
// asked first ("ask before saving"): an add, or an update of TargetID's text.
type Suggestion struct {
	ID        string
	OwnerID   int64
	Op        string
	Kind      string
	TargetID  string
	Text      string
	Source    Source // the chat message it came from
	ReplySeq  *int64 // the reply whose chip shows it
	CreatedAt time.Time
	ExpiresAt time.Time
}

func suggestionAD(id string, owner int64) []byte {
	return crypto.AD("memory-suggestion", id, strconv.FormatInt(owner, 10))
}

// Suggest keeps a proposed write as a suggestion instead of writing it. The text
// passes the checks a save makes (no secret, no prompt injection) before it is
// stored, sealed with the owner's data key.
func (s *Service) Suggest(ctx context.Context, owner int64, op, kind, targetID, text string, src Source, replySeq *int64) (Suggestion, error) {
	if op != OpAdd && op != OpUpdate {
		return Suggestion{}, errs.E(errs.Invalid, "Unknown suggestion op %q.", op)
	}
	if !validKind(kind) {
		return Suggestion{}, errs.E(errs.Invalid, "Unknown memory kind %q.", kind)
	}
	if op == OpUpdate && targetID == "" {
		return Suggestion{}, errs.E(errs.Invalid, "An update names the memory it replaces.")
	}
	text, err := cleanText(text)
	if err != nil {
		return Suggestion{}, err
	}
	id := "sug_" + strings.ToLower(rand.Text())
	sealed, err := s.keys.Seal(ctx, owner, []byte(text), suggestionAD(id, owner))
	if err != nil {
		return Suggestion{}, fmt.Errorf("memory: suggest: %w", err)
	}
	now := s.now()
	rec := &store.MemorySuggestion{ID: id, OwnerID: owner, Op: op, Kind: kind, TargetID: targetID, Sealed: sealed,
		SessionID: src.SessionID, SourceSeq: src.MessageSeq, ReplySeq: replySeq, CreatedAt: now, ExpiresAt: now.Add(SuggestionTTL)}
	if err := s.db.InsertMemorySuggestion(ctx, rec); err != nil {
		return Suggestion{}, fmt.Errorf("memory: suggest: %w", err)
	}
	return suggestionFrom(*rec, text), nil
}

func suggestionFrom(r store.MemorySuggestion, text string) Suggestion {
	src := Source{Kind: SourceChat, SessionID: r.SessionID, MessageSeq: r.SourceSeq}
	if r.SessionID == "" {
		src.Kind = SourceManual
	}
	return Suggestion{ID: r.ID, OwnerID: r.OwnerID, Op: r.Op, Kind: r.Kind, TargetID: r.TargetID, Text: text,
		Source: src, ReplySeq: r.ReplySeq, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}

func (s *Service) openSuggestion(ctx context.Context, r store.MemorySuggestion) (Suggestion, error) {
	pt, err := s.keys.Open(ctx, r.OwnerID, r.Sealed, suggestionAD(r.ID, r.OwnerID))
	if err != nil {
		return Suggestion{}, fmt.Errorf("memory: open suggestion %s: %w", r.ID, err)
	}
	return suggestionFrom(r, string(pt)), nil
}

// Suggestions returns owner's pending suggestions, oldest first: all of them, or
// those made in sessionID when it is not "".
func (s *Service) Suggestions(ctx context.Context, owner int64, sessionID string) ([]Suggestion, error) {
	recs, err := s.db.ListMemorySuggestions(ctx, owner, sessionID)
	if err != nil {
		return nil, fmt.Errorf("memory: suggestions: %w", err)
	}
	out := make([]Suggestion, 0, len(recs))
	for _, r := range recs {
		sg, err := s.openSuggestion(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, sg)
	}
	return out, nil
}

// Suggestion returns owner's pending suggestion id; another owner's, an expired
// or a handled one is errs.NotFound.
func (s *Service) Suggestion(ctx context.Context, owner int64, id string) (Suggestion, error) {
	r, err := s.db.MemorySuggestionByID(ctx, owner, id)
	if err != nil {
		return Suggestion{}, fmt.Errorf("memory: suggestion: %w", err)
	}
	return s.openSuggestion(ctx, r)
}

// RejectSuggestion deletes owner's suggestion id; nothing is saved.
func (s *Service) RejectSuggestion(ctx context.Context, owner int64, id string) error {
	if err := s.db.DeleteMemorySuggestion(ctx, owner, id); err != nil {
		return fmt.Errorf("memory: reject suggestion: %w", err)
	}
	return nil
}

// Accept outcomes.
const (
	Added   = "added"   // a new memory
	Updated = "updated" // the target's text replaced in place
	Merged  = "merged"  // a near-duplicate exists already; nothing added
)

// AcceptSuggestion writes owner's suggestion id as a save would and deletes it. The
// same checks run as for any write: a secret or injection text is refused
// (errs.Invalid; the suggestion is deleted, since it can never be accepted), an add
// that an existing memory already says is merged into it (so is an update to what
// another memory says: the updated one is forgotten), and an update whose target
// was forgotten meanwhile becomes an add (the user accepted the new text; it is not
// lost because the old one went first). It returns the memory and the outcome.
func (s *Service) AcceptSuggestion(ctx context.Context, owner int64, id string) (Memory, string, error) {
	sg, err := s.Suggestion(ctx, owner, id)
	if err != nil {
		return Memory{}, "", err
	}
	m, outcome, err := s.acceptText(ctx, owner, sg)
	if err != nil && errs.Code(err) != errs.Invalid {
		return Memory{}, "", err
	}
	if derr := s.RejectSuggestion(ctx, owner, id); derr != nil && !errs.Is(derr, errs.NotFound) {
		return Memory{}, "", derr
	}
	return m, outcome, err
}

func (s *Service) acceptText(ctx context.Context, owner int64, sg Suggestion) (Memory, string, error) {
	if _, err := cleanText(sg.Text); err != nil {
		return Memory{}, "", err
	}
	if sg.Op == OpUpdate {
		if dup, ok, err := s.Duplicate(ctx, owner, sg.Text); err != nil {
			return Memory{}, "", err
		} else if ok && dup.ID != sg.TargetID {
			// Another memory says the new text already: merge, the outdated one goes.
			if err := s.Forget(ctx, owner, sg.TargetID); err != nil && !errs.Is(err, errs.NotFound) {
				return Memory{}, "", err
			}
			return dup, Merged, nil
		}
		m, err := s.Update(ctx, owner, sg.TargetID, sg.Text)
		if err == nil {
			return m, Updated, nil
		}
		if !errs.Is(err, errs.NotFound) {
			return Memory{}, "", err
		}
	}
	if dup, ok, err := s.Duplicate(ctx, owner, sg.Text); err != nil || ok {
		return dup, Merged, err
	}
	m, err := s.Save(ctx, owner, sg.Kind, sg.Text, sg.Source, 0.7)
	return m, Added, err
}

// Duplicate returns owner's memory that already says text, if there is one: one
// at least DuplicateSimilarity close (cosine), or one that holds every index term
// of text (a re-worded copy such as "User prefers metric units" of "I prefer metric
// units" says nothing new).
func (s *Service) Duplicate(ctx context.Context, owner int64, text string) (Memory, bool, error) {
	res, err := s.Search(ctx, owner, text, 3)
	if err != nil {
		return Memory{}, false, err
	}
	terms := map[string]bool{}
	for _, t := range Terms(text) {
		if !narratorTerms[t] {
			terms[t] = true
		}
	}
	for _, h := range res.Hits {
		if h.Similarity >= DuplicateSimilarity || len(terms) > 0 && coversTerms(h.Text, terms) {
			return h.Memory, true, nil
		}
	}
	return Memory{}, false, nil
}

// narratorTerms are how a model re-words the user's point of view ("User prefers",
// "The user's"); they say nothing about the fact itself.
var narratorTerms = map[string]bool{"user": true, "users": true, "用户": true}

// coversTerms reports whether text holds every term of terms.
func coversTerms(text string, terms map[string]bool) bool {
	have := map[string]bool{}
	for _, t := range Terms(text) {
		have[t] = true
	}
	for t := range terms {
		if !have[t] {
			return false
		}
	}
	return true
}

// Undo outcomes.
const (
	UndoDone   = "undone" // the memory was forgotten
	UndoGone   = "gone"   // it was already forgotten; nothing to do
	UndoEdited = "edited" // it was edited after it was saved, so it was kept
)

// UndoSave takes back the save that created owner's memory id: the memory is
// forgotten (physically, as Forget) unless its text was changed since (an edit on
// the Memories page, an extraction update), which Undo must not throw away. A memory
// already forgotten is not an error: there is nothing left to undo.
func (s *Service) UndoSave(ctx context.Context, owner int64, id string) (string, error) {
	m, err := s.Get(ctx, owner, id)
	if errs.Is(err, errs.NotFound) {
		return UndoGone, nil
	}
	if err != nil {
		return "", err
	}
	if m.UpdatedAt.After(m.CreatedAt) {
		return UndoEdited, nil
	}
	if err := s.Forget(ctx, owner, id); err != nil {
		if errs.Is(err, errs.NotFound) {
			return UndoGone, nil
		}
		return "", err
	}
	return UndoDone, nil
}
