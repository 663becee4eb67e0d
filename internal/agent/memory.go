package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

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
	Duplicate(ctx context.Context, owner int64, text string) (memory.Memory, bool, error)
	Suggest(ctx context.Context, owner int64, op, kind, targetID, text string, src memory.Source, replySeq *int64) (memory.Suggestion, error)
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
	t.askFirst = st.Ask
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
	t.memoryLookup = err == nil
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
	if !t.memoryOn || t.again { // a regenerated reply: the message's "remember" was done the first time
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
			t.saved = w.IDs // the reply's chip offers to undo exactly these
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
	groundedShare     = 0.75 // of an added or updated text's words that must be the user's own
	supersedeSim      = 0.35 // an added text this close to a memory, on a message that says it changed, replaces it
	sameSlotSim       = 0.7  // ... and this close replaces it even without saying so ("My favourite colour is …")
)

// PurposeMemoryExtract marks the model request and response events of the memory
// extraction that follows a reply (Event.Purpose).
const PurposeMemoryExtract = "memory_extract"

const extractPrompt = `You maintain one user's long-term memory. Read the USER MESSAGE and decide what in it is worth remembering in future conversations: lasting preferences, facts about the user, standing instructions for the assistant.
Keep nothing from questions, one-off requests, small talk, hypotheticals or quoted text, and never secrets (passwords, keys, card or account numbers).
EXISTING MEMORIES are numbered. If the message corrects or changes one, UPDATE it with its full new text. If it says one is no longer true, DELETE it. Never ADD something an existing memory already says.
Write each memory as one short sentence in the user's language, from the user's point of view ("I prefer …", "My …").
Answer with JSON only, no prose: {"actions":[{"op":"add","kind":"preference","text":"…"},{"op":"update","n":1,"text":"…"},{"op":"delete","n":2}]}. kind is preference, fact or instruction. When nothing is worth keeping, answer {"actions":[]}.`

// extractable reports whether the reply's user message goes to memory extraction.
func (t *turn) extractable() bool {
	return t.extractOn && !t.memoryRequest && !t.again && strings.TrimSpace(t.query) != ""
}

type extractAction struct {
	Op   string `json:"op"`
	Kind string `json:"kind"`
	N    int    `json:"n"`
	Text string `json:"text"`
}

// extract asks the memory model (memoryModel) what the user's message holds that is worth
// remembering, given the nearest existing memories (numbered, so the model cannot
// invent ids), and applies its answer. The model sees only the user's own words:
// never tool results, the system prompt, recalled memories as context, or the
// assistant's reply. Its call is recorded like the reply's (EventModelRequest and
// EventModelResponse with Purpose PurposeMemoryExtract); a failure is recorded and
// never touches the reply, which is committed already.
//
// The answer is not trusted: a model may re-propose what is stored, add a
// contradicting fact instead of updating, or copy text that is not the user's (its
// own statements, the system prompt, a tool's output). So an add or update whose
// words are mostly not in the user's statements (questions removed) is dropped as
// junk; an add that an existing memory already says is merged into it (dropped), as
// is an update to what another memory says (its target is deleted); an add that replaces a memory on a message that says something changed ("now",
// "moved", "不再") becomes an update of that memory. Secrets and injection text are
// refused by the memory service. With "ask before saving", adds and updates become
// suggestions for the user to accept or reject; deletes are applied.
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
	req := llm.Request{Model: model, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: extractPrompt}, {Role: llm.RoleUser, Content: prompt.String()}}}
	callStarted := a.Now()
	t.emit(Event{Kind: EventModelRequest, Model: model, Request: &req, Purpose: PurposeMemoryExtract})
	var sent *llm.HTTPRequest
	resp, err := provider.Stream(llm.WithCapture(ctx, func(h *llm.HTTPRequest) { sent = h }), req, func(llm.Event) {})
	t.inTok += resp.Usage.InputTokens
	t.outTok += resp.Usage.OutputTokens
	t.emit(Event{Kind: EventModelResponse, Model: model, Request: &req, Response: &resp, Wire: sent, Err: err,
		Duration: a.Now().Sub(callStarted), Purpose: PurposeMemoryExtract})
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
	said := statements(text)
	for _, act := range actions {
		var target string
		if act.Op == "update" || act.Op == "delete" {
			target = near.Hits[act.N-1].ID
			act.Kind = near.Hits[act.N-1].Kind // an update keeps its memory's kind
		}
		if act.Op != "delete" {
			if !grounded(act.Text, said) {
				w.Dropped = append(w.Dropped, act.Op+": not the user's words")
				continue
			}
			if dup, ok, err := a.Memory.Duplicate(ctx, t.s.OwnerID, act.Text); err != nil {
				w.Err = errors.Join(w.Err, err)
				continue
			} else if ok && act.Op == "update" && dup.ID != target {
				// The new text is what another memory says already: the two merge and
				// the outdated one goes (under "ask before saving", when accepted).
				if !t.askFirst {
					act.Op = "delete"
				}
			} else if ok && act.Op == "add" {
				w.Dropped = append(w.Dropped, act.Op+": already in memory as "+dup.ID)
				continue
			}
			if act.Op == "add" {
				if old, ok := t.superseded(ctx, act.Text, text); ok {
					act.Op, target = "update", old
				}
			}
		}
		var id string
		var err error
		switch {
		case t.askFirst && act.Op != "delete":
			var sg memory.Suggestion
			reply := t.final.Seq
			sg, err = a.Memory.Suggest(ctx, t.s.OwnerID, act.Op, cmp.Or(act.Kind, memory.KindFact), target, act.Text, src, &reply)
			if err == nil {
				id, act.Op = sg.ID, "suggest-"+act.Op
				w.Suggestions = append(w.Suggestions, sg)
			}
		case act.Op == "add":
			var m memory.Memory
			m, err = a.Memory.Save(ctx, t.s.OwnerID, act.Kind, act.Text, src, 0.7)
			id = m.ID
		case act.Op == "update":
			id = target
			_, err = a.Memory.Update(ctx, t.s.OwnerID, id, act.Text)
		case act.Op == "delete":
			id = target
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

// superseded returns the memory that an added text replaces, if the user's message
// says that something changed (and not that it is one more: "also", "too", "也") and
// the text is about the same thing: it shares a word with the memory and is close to
// it, or the message names what the memory says that the text does not ("I sold the
// Honda, I drive a Tesla now"). Without saying so, a very close text replaces too (the
// same slot with a new value: "My favourite colour is …").
func (t *turn) superseded(ctx context.Context, text, message string) (string, bool) {
	if alsoRE.MatchString(message) {
		return "", false
	}
	res, err := t.a.Memory.Search(ctx, t.s.OwnerID, text, 3)
	if err != nil {
		return "", false
	}
	changed := changeRE.MatchString(message)
	for _, h := range res.Hits {
		if h.Similarity >= sameSlotSim || changed && shareTerm(h.Text, text) &&
			(h.Similarity >= supersedeSim || namesOld(message, h.Text, text)) {
			return h.ID, true
		}
	}
	return "", false
}

var (
	changeRE = regexp.MustCompile(`(?i)\b(?:now|no longer|not anymore|any ?more|moved|switched|changed|instead|actually|these days|from now on|nowadays|recently|became|since)\b|现在|如今|改成|改为|改用|换成|换了|搬到|搬去|不再|已经不|其实|最近`)
	alsoRE   = regexp.MustCompile(`(?i)\b(?:also|too|as well|another|in addition|besides)\b|也|还有|另外`)
	// A question is no statement about the user, unless it starts with one ("I moved
	// to Paris, what should I see?").
	questionRE = regexp.MustCompile(`(?i)^(?:what|how|why|who|where|when|which|can|could|would|will|do|does|did|is|are|should|may|shall|have|has)\b|^(?:请问|什么|怎么|为什么|谁|哪|能不能|可以|是不是)`)
	sentenceRE = regexp.MustCompile(`[^.!?。！？\n]+[.!?。！？]*`)
)

// statements is the message without its questions: what the user said about
// themselves, the only ground a memory may stand on.
func statements(message string) string {
	var b strings.Builder
	for _, s := range sentenceRE.FindAllString(message, -1) {
		s = strings.TrimSpace(s)
		if (strings.HasSuffix(s, "?") || strings.HasSuffix(s, "？")) && questionRE.MatchString(s) {
			continue
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return b.String()
}

// frameUnits are the words a model uses to phrase any memory ("I live in …", "My
// name is …", "我住在…"); they neither ground a text nor count against it.
var frameUnits = map[string]bool{"liv": true, "prefer": true, "lik": true, "lov": true, "work": true, "nam": true,
	"call": true, "favourit": true, "us": true, "use": true, "hav": true, "user": true, "not": true, "don": true, "want": true,
	"我": true, "的": true, "是": true, "在": true, "住": true, "叫": true, "喜": true, "欢": true, "爱": true, "用": true,
	"有": true, "了": true, "很": true, "要": true, "不": true, "户": true}

// units are the words of text as memory indexes them (stemmed, stop words dropped),
// with CJK taken character by character (a model re-phrasing Chinese keeps the
// characters, rarely the bigrams), frame words left out.
func units(text string) map[string]bool {
	out := map[string]bool{}
	for _, term := range memory.Terms(text) {
		r := []rune(term)
		if len(r) > 0 && unicode.In(r[0], unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) {
			for _, c := range r {
				if !frameUnits[string(c)] {
					out[string(c)] = true
				}
			}
			continue
		}
		if !frameUnits[term] {
			out[term] = true
		}
	}
	return out
}

// grounded reports whether most of text's words are the user's own words in said.
func grounded(text, said string) bool {
	want, have := units(text), units(said)
	if len(want) == 0 {
		return false
	}
	n := 0
	for u := range want {
		if have[u] {
			n++
		}
	}
	return float64(n) >= groundedShare*float64(len(want))
}

// namesOld reports whether message holds a term of old that text lacks.
func namesOld(message, old, text string) bool {
	have, in := map[string]bool{}, map[string]bool{}
	for _, t := range memory.Terms(message) {
		have[t] = true
	}
	for _, t := range memory.Terms(text) {
		in[t] = true
	}
	for _, t := range memory.Terms(old) {
		if !in[t] && have[t] {
			return true
		}
	}
	return false
}

// shareTerm reports whether a and b share an index term (frame words included: "I
// live in Berlin" and "I live in Paris" are about the same thing).
func shareTerm(a, b string) bool {
	ta := map[string]bool{}
	for _, t := range memory.Terms(a) {
		ta[t] = true
	}
	for _, t := range memory.Terms(b) {
		if ta[t] {
			return true
		}
	}
	return false
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
