package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/memory"
)

// Memory is what the agent needs of long-term memory (memory.Service has it).
type Memory interface {
	Search(ctx context.Context, owner int64, query string, k int) (memory.Result, error)
	MarkUsed(ctx context.Context, owner int64, ids []string) error
	Save(ctx context.Context, owner int64, kind, text string, source memory.Source, confidence float64) (memory.Memory, error)
	Forget(ctx context.Context, owner int64, id string) error
	Update(ctx context.Context, owner int64, id, text string) (memory.Memory, error)
	Settings(ctx context.Context, owner int64) (memory.Settings, error)
}

// memorySettings decides once per run whether it reads and writes memory: not in a
// temporary chat, not for a user who turned memory off, not while an admin turned it
// off for the instance, and not when the user's
// choice cannot be read (memory stays off rather than against their wish).
func (t *turn) memorySettings(ctx context.Context) {
	a := t.a
	if a.Memory == nil || t.s.Temporary {
		return
	}
	st, err := a.Memory.Settings(ctx, t.s.OwnerID)
	if err != nil {
		a.Log.Warn("agent: memory settings unreadable; memory off for this reply", "session", t.s.ID, "err", err)
		return
	}
	t.memoryOn = st.Active()
	t.extractOn = st.Active() && st.Extract && a.cfg.ExtractMemories
}

// Memory lookup bounds: at most maxRecalled memories go into the pinned zone, and a
// lookup that takes longer than recallTimeout is given up (the reply goes on).
const (
	maxRecalled   = 5
	recallTimeout = 2 * time.Second
	maxForgotten  = 3   // memories one "forget …" may remove
	forgetMatch   = 0.6 // ... each matching its words at least this share of the best match's score
)

// recall looks up the user's long-term memories for the message, once per run, and
// keeps the best for every step's pinned zone: preferences as preferences, the rest as
// memories, each with the date it was last updated. A failed lookup never fails the
// run; it is in the EventMemory.
func (t *turn) recall(ctx context.Context) {
	a := t.a
	if !t.memoryOn {
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
	if !t.memoryOn {
		return
	}
	started := a.Now()
	if m := rememberRE.FindStringSubmatch(t.query); m != nil && !notRequestRE.MatchString(strings.TrimSpace(m[1]+m[2])) {
		t.memoryRequest = true
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
	t.memoryRequest = true
	res, err := a.Memory.Search(ctx, t.s.OwnerID, strings.TrimSpace(m[1]+m[2]), maxForgotten)
	w := &MemoryWrite{Op: "forget", Err: err}
	best := 0.0
	for _, h := range res.Hits {
		best = max(best, h.Lexical)
	}
	for _, h := range res.Hits {
		// Only memories that share words with the request about as well as the best
		// match: a vector neighbour, or a memory sharing one common word ("prefer"),
		// is too weak a reason to delete something for good.
		if h.Lexical <= 0 || h.Lexical < forgetMatch*best {
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

// Extraction bounds.
const (
	extractTimeout    = 60 * time.Second
	extractNeighbours = 10   // existing memories the model may update or delete
	extractMaxInput   = 4000 // bytes of the user's message it sees
	extractMaxActions = 5
	duplicateSim      = 0.92 // an added text this close to an existing memory is a duplicate
)

const extractPrompt = `You maintain one user's long-term memory. Read the USER MESSAGE and decide what in it is worth remembering in future conversations: lasting preferences, facts about the user, standing instructions for the assistant.
Keep nothing from questions, one-off requests, small talk, hypotheticals or quoted text, and never secrets (passwords, keys, card or account numbers).
EXISTING MEMORIES are numbered. If the message corrects or changes one, UPDATE it with its full new text. If it says one is no longer true, DELETE it. Never ADD something an existing memory already says.
Write each memory as one short sentence in the user's language, from the user's point of view ("I prefer …", "My …").
Answer with JSON only, no prose: {"actions":[{"op":"add","kind":"preference","text":"…"},{"op":"update","n":1,"text":"…"},{"op":"delete","n":2}]}. kind is preference, fact or instruction. When nothing is worth keeping, answer {"actions":[]}.`

// extractable reports whether the reply's user message goes to memory extraction.
func (t *turn) extractable() bool {
	return t.extractOn && !t.memoryRequest && strings.TrimSpace(t.query) != ""
}

type extractAction struct {
	Op   string `json:"op"`
	Kind string `json:"kind"`
	N    int    `json:"n"`
	Text string `json:"text"`
}

// extract asks the memory model (memoryModel) what the user's message holds that is worth
// remembering, given the nearest existing memories (numbered, so the model cannot
// invent ids), and applies its answer: an update replaces the old text in place, a
// near-duplicate add is dropped. The model sees only the user's own words: never tool
// results, the system prompt, recalled memories as context, or the assistant's reply.
func (t *turn) extract(base context.Context) {
	a := t.a
	ctx, cancel := context.WithTimeout(base, extractTimeout)
	defer cancel()
	started := a.Now()
	w := &MemoryWrite{Op: "extract"}
	defer func() {
		t.emit(Event{Kind: EventMemory, MemoryWrite: w, Duration: a.Now().Sub(started)})
	}()
	text := t.query
	if len(text) > extractMaxInput {
		text = strings.ToValidUTF8(text[:extractMaxInput], "")
	}
	near, err := a.Memory.Search(ctx, t.s.OwnerID, text, extractNeighbours)
	if err != nil {
		w.Err = err
		return
	}
	var prompt strings.Builder
	prompt.WriteString("EXISTING MEMORIES:\n")
	if len(near.Hits) == 0 {
		prompt.WriteString("(none)\n")
	}
	for i, h := range near.Hits {
		fmt.Fprintf(&prompt, "%d. [%s] %s\n", i+1, h.Kind, h.Text)
	}
	prompt.WriteString("\nUSER MESSAGE:\n")
	prompt.WriteString(text)
	provider, model := t.memoryModel(ctx)
	resp, err := provider.Stream(ctx, llm.Request{Model: model, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: extractPrompt}, {Role: llm.RoleUser, Content: prompt.String()}}}, func(llm.Event) {})
	t.inTok += resp.Usage.InputTokens
	t.outTok += resp.Usage.OutputTokens
	if err != nil {
		w.Err = err
		return
	}
	actions, err := parseExtraction(resp.Content, len(near.Hits))
	if err != nil {
		w.Err = err
		a.Log.Warn("agent: memory extraction answer ignored", "session", t.s.ID, "err", err)
		return
	}
	seq := t.user.Seq
	src := memory.Source{Kind: memory.SourceChat, SessionID: t.s.ID, MessageSeq: &seq}
	for _, act := range actions {
		var id string
		var err error
		switch act.Op {
		case "add":
			if dup, _ := a.Memory.Search(ctx, t.s.OwnerID, act.Text, 1); len(dup.Hits) > 0 && dup.Hits[0].Similarity >= duplicateSim {
				continue
			}
			var m memory.Memory
			m, err = a.Memory.Save(ctx, t.s.OwnerID, act.Kind, act.Text, src, 0.7)
			id = m.ID
		case "update":
			id = near.Hits[act.N-1].ID
			_, err = a.Memory.Update(ctx, t.s.OwnerID, id, act.Text)
		case "delete":
			id = near.Hits[act.N-1].ID
			err = a.Memory.Forget(ctx, t.s.OwnerID, id)
		}
		if err != nil {
			// A refused text (a secret the model kept anyway) is dropped, not fatal.
			w.Err = errors.Join(w.Err, err)
			continue
		}
		w.IDs = append(w.IDs, act.Op+":"+id)
	}
}

// parseExtraction reads the model's JSON answer (a ```json fence or prose around it is
// tolerated) and checks every action against what was offered: known ops and kinds,
// numbers within the n memories shown, a text for add and update.
func parseExtraction(content string, n int) ([]extractAction, error) {
	i, j := strings.Index(content, "{"), strings.LastIndex(content, "}")
	if i < 0 || j < i {
		return nil, errors.New("no JSON object in the answer")
	}
	var ans struct {
		Actions []extractAction `json:"actions"`
	}
	if err := json.Unmarshal([]byte(content[i:j+1]), &ans); err != nil {
		return nil, fmt.Errorf("answer is not the expected JSON: %w", err)
	}
	if len(ans.Actions) > extractMaxActions {
		ans.Actions = ans.Actions[:extractMaxActions]
	}
	var out []extractAction
	for _, act := range ans.Actions {
		act.Op, act.Text = strings.ToLower(strings.TrimSpace(act.Op)), strings.TrimSpace(act.Text)
		switch act.Op {
		case "none", "":
			continue
		case "add":
			if act.Kind != memory.KindPreference && act.Kind != memory.KindFact && act.Kind != memory.KindInstruction {
				return nil, fmt.Errorf("add with unknown kind %q", act.Kind)
			}
		case "update", "delete":
			if act.N < 1 || act.N > n {
				return nil, fmt.Errorf("%s of memory %d, but %d were shown", act.Op, act.N, n)
			}
		default:
			return nil, fmt.Errorf("unknown op %q", act.Op)
		}
		if act.Op != "delete" && act.Text == "" {
			return nil, fmt.Errorf("%s without a text", act.Op)
		}
		out = append(out, act)
	}
	return out, nil
}
