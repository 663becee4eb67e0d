package agent

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"atrium/internal/errs"
	"atrium/internal/memory"
)

// Memory is what the agent needs of long-term memory (memory.Service has it).
type Memory interface {
	Search(ctx context.Context, owner int64, query string, k int) (memory.Result, error)
	MarkUsed(ctx context.Context, owner int64, ids []string) error
	Save(ctx context.Context, owner int64, kind, text string, source memory.Source, confidence float64) (memory.Memory, error)
	Forget(ctx context.Context, owner int64, id string) error
}

// Memory lookup bounds: at most maxRecalled memories go into the pinned zone, and a
// lookup that takes longer than recallTimeout is given up (the reply goes on).
const (
	maxRecalled   = 5
	recallTimeout = 2 * time.Second
	maxForgotten  = 3 // memories one "forget …" may remove
)

// recall looks up the user's long-term memories for the message, once per run, and
// keeps the best for every step's pinned zone: preferences as preferences, the rest as
// memories, each with the date it was last updated. A failed lookup never fails the
// run; it is in the EventMemory.
func (t *turn) recall(ctx context.Context) {
	a := t.a
	if a.Memory == nil {
		return
	}
	started := a.Now()
	rctx, cancel := context.WithTimeout(ctx, recallTimeout)
	res, err := a.Memory.Search(rctx, t.s.OwnerID, t.query, maxRecalled)
	cancel()
	rec := &MemoryRecall{LexicalOnly: res.LexicalOnly, VectorErr: res.VectorErr, Err: err}
	for _, h := range res.Hits {
		line := fmt.Sprintf("%s (%s)", h.Text, h.UpdatedAt.Format(time.DateOnly))
		if h.Kind == memory.KindPreference {
			t.preferences = append(t.preferences, line)
		} else {
			t.memories = append(t.memories, line)
		}
		t.recalled = append(t.recalled, h.ID)
		rec.Hits = append(rec.Hits, MemoryHit{ID: h.ID, Kind: h.Kind, Score: h.Score, Similarity: h.Similarity, Lexical: h.Lexical})
	}
	if err != nil {
		a.Log.Warn("agent: memory lookup failed; answering without memories", "session", t.s.ID, "err", err)
	}
	t.emit(Event{Kind: EventMemory, Memory: rec, Duration: a.Now().Sub(started)})
}

// Explicit memory requests at the start of a message, in English and Chinese. They
// are acted on without a model call; the model still answers the message.
var (
	rememberRE = regexp.MustCompile(`(?is)^\s*(?:please\s+|pls\s+)?(?:remember|note down|keep in mind)\s*(?:that\s+)?[:,]?\s*(.+)$|^\s*(?:请)?(?:帮我)?(?:记住|记一下|记下)[：:，,\s]*(.+)$`)
	forgetRE   = regexp.MustCompile(`(?is)^\s*(?:please\s+|pls\s+)?(?:forget|stop remembering)\s+(?:that\s+|about\s+)?[:,]?\s*(.+)$|^\s*(?:请)?(?:忘掉|忘记|别记)[：:，,\s]*(.+)$`)
	// Not requests: questions ("remember when we…?") and bare pronouns ("forget it").
	notRequestRE = regexp.MustCompile(`(?i)^(?:when|what|how|why|who|where|if|whether|the time)\b|[?？]\s*$|^(?:it|this|that|about it|everything)[.!。！]?\s*$`)
	preferRE     = regexp.MustCompile(`(?i)\b(prefer|like|love|hate|dislike|always|never|rather)\b|喜欢|偏好|讨厌|更爱|总是|从不`)
)

// memoryCommand saves or forgets what the message asks, when it starts with an
// explicit request ("remember that …", "记住…", "forget …", "忘掉…"), and tells the
// user with a notice. A refused text (a secret) is not saved, and the notice says why.
func (t *turn) memoryCommand(ctx context.Context) {
	a := t.a
	if a.Memory == nil {
		return
	}
	started := a.Now()
	if m := rememberRE.FindStringSubmatch(t.query); m != nil && !notRequestRE.MatchString(strings.TrimSpace(m[1]+m[2])) {
		text := strings.TrimSpace(m[1] + m[2])
		kind := memory.KindFact
		if preferRE.MatchString(text) {
			kind = memory.KindPreference
		}
		seq := t.user.Seq
		saved, err := a.Memory.Save(ctx, t.s.OwnerID, kind, text,
			memory.Source{Kind: memory.SourceChat, SessionID: t.s.ID, MessageSeq: &seq}, 0.9)
		w := &MemoryWrite{Op: "save", Err: err}
		note := "Saved to memory."
		if err != nil {
			note = "Not saved to memory: " + errs.Message(err)
		} else {
			w.IDs = []string{saved.ID}
		}
		t.emit(Event{Kind: EventMemory, MemoryWrite: w, Duration: a.Now().Sub(started)})
		a.publish(Event{Kind: EventNotice, SessionID: t.s.ID, OwnerID: t.s.OwnerID, Text: note})
		return
	}
	m := forgetRE.FindStringSubmatch(t.query)
	if m == nil || notRequestRE.MatchString(strings.TrimSpace(m[1]+m[2])) {
		return
	}
	res, err := a.Memory.Search(ctx, t.s.OwnerID, strings.TrimSpace(m[1]+m[2]), maxForgotten)
	w := &MemoryWrite{Op: "forget", Err: err}
	for _, h := range res.Hits {
		// Only memories that share words with the request: a vector neighbour alone
		// is too weak a reason to delete something for good.
		if h.Lexical <= 0 {
			continue
		}
		if err := a.Memory.Forget(ctx, t.s.OwnerID, h.ID); err != nil {
			w.Err = err
			continue
		}
		w.IDs = append(w.IDs, h.ID)
	}
	t.emit(Event{Kind: EventMemory, MemoryWrite: w, Duration: a.Now().Sub(started)})
	note := "Nothing in memory matched, so nothing was forgotten."
	switch n := len(w.IDs); {
	case n == 1:
		note = "Forgot 1 memory."
	case n > 1:
		note = fmt.Sprintf("Forgot %d memories.", n)
	}
	a.publish(Event{Kind: EventNotice, SessionID: t.s.ID, OwnerID: t.s.OwnerID, Text: note})
}
