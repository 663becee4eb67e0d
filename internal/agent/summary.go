package agent

import (
	"context"
	"errors"
	"time"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// foldBatch bounds how many old messages one summary update reads.
const foldBatch = 200

// foldLater does a reply's background work after it is committed and the session is
// free again, so the next message never waits for a model call: it gives a chat with
// a provisional title the model's (see GenerateTitles), folds the turns that left the
// verbatim window into the rolling summary, then extracts memories from the user's
// message. One fold per session at a time (a turn that ends while one
// runs leaves its fold to the next turn); every reply gets its extraction. Shutdown
// cancels them. The trace run is closed when the job is done.
func (a *Agent) foldLater(t *turn) {
	// Read before the lock: it asks the database.
	wantTitle := t.provider != nil && t.final.Status == store.StatusComplete && t.wantsTitle(a.base)
	a.mu.Lock()
	ok := !a.closed && t.provider != nil && t.final.Status == store.StatusComplete
	fold := ok && len(t.unsummarised) > 0 && !a.folding[t.s.ID]
	extract := ok && t.extractable()
	title := ok && wantTitle
	start := fold || extract || title
	if fold {
		a.folding[t.s.ID] = true
	}
	if start {
		a.background[t.s.ID]++
		a.wg.Add(1)
	}
	a.mu.Unlock()
	if !start {
		t.end()
		return
	}
	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			if a.background[t.s.ID]--; a.background[t.s.ID] == 0 {
				delete(a.background, t.s.ID)
			}
			a.mu.Unlock()
		}()
		if title {
			t.title(a.base) // first: it shows at once in the chat list
		}
		if fold {
			t.fold(a.base)
			a.mu.Lock()
			delete(a.folding, t.s.ID)
			a.mu.Unlock()
		}
		if extract {
			t.extract(a.base)
		}
		t.end()
	}()
}

// fold advances the rolling summary over the turns that left the verbatim window. The
// watermark moves only when the model's summary succeeded (and only forward); a failure
// is recorded and returned, and the turns stay in the context verbatim as the budget
// allows or are reported dropped.
func (t *turn) fold(base context.Context) error {
	a := t.a
	if !t.foldDue() {
		return errFoldBackoff
	}
	turns := t.unsummarised
	ctx, cancel := context.WithTimeout(base, 90*time.Second)
	defer cancel()
	if turns[0].Seq > t.summarySeq+1 {
		// Older messages may have been beyond the context loader's bound: fold them
		// first, in whole turns, so the watermark never skips a message. (Seqs have gaps
		// where other versions are, so the gap alone does not tell.)
		older, err := a.Store.MessagesFrom(ctx, t.s.ID, t.summarySeq, foldBatch)
		if err != nil {
			a.Log.Warn("agent: summary: load", "session", t.s.ID, "err", err)
			return err
		}
		if w := wholeTurns(older, turns[0].Seq); len(w) > 0 {
			turns = w
		}
	}
	if len(turns) == 0 {
		return errors.New("agent: summary: nothing to fold")
	}
	turns = contextwin.FoldBatch(turns, t.budgets, a.Tokens) // a backlog is folded in several batches
	started := a.Now()
	summarize := func(ctx context.Context, msgs []llm.Message) (string, error) {
		resp, err := t.provider.Stream(ctx, llm.Request{Model: t.model, Messages: msgs}, func(llm.Event) {})
		t.inTok += resp.Usage.InputTokens
		t.outTok += resp.Usage.OutputTokens
		return resp.Content, err
	}
	summary, err := contextwin.Fold(ctx, summarize, t.summary, turns, t.budgets, a.Tokens)
	last := turns[len(turns)-1].Seq
	if err == nil {
		_, err = a.Store.AdvanceSessionSummary(ctx, t.s.ID, t.s.OwnerID, summary, last)
	}
	t.foldResult(err)
	if err != nil {
		a.Log.Warn("agent: summary not updated; older turns stay verbatim", "session", t.s.ID, "err", err)
	}
	t.emit(Event{Kind: EventSummary, Err: err, Duration: a.Now().Sub(started), Summary: &SummaryUpdate{
		FromSeq: turns[0].Seq, ToSeq: last, PreviousWatermark: t.summarySeq, Summary: summary, Tokens: a.Tokens.Count(summary)}})
	return err
}

// errFoldBackoff: folds of this session failed lately, so this turn does not try.
var errFoldBackoff = errors.New("agent: summary: backing off after failed folds")

// foldDue reports whether this turn may try a fold. After k failed folds in a row the
// next 2^k-1 turns (at most 15) do not try, so a broken summarizer costs a model call
// now and then, not one per turn. Decided once per turn (its steps and its after-reply
// fold share the answer).
func (t *turn) foldDue() bool {
	if t.foldDecided {
		return t.foldOK
	}
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	t.foldDecided, t.foldOK = true, a.foldWait[t.s.ID] == 0
	if !t.foldOK {
		a.foldWait[t.s.ID]--
	}
	return t.foldOK
}

// foldResult records a fold's outcome for the backoff.
func (t *turn) foldResult(err error) {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		delete(a.foldFails, t.s.ID)
		delete(a.foldWait, t.s.ID)
		return
	}
	t.foldOK = false // not again in this turn
	a.foldFails[t.s.ID]++
	a.foldWait[t.s.ID] = min(1<<min(a.foldFails[t.s.ID], 4)-1, 15)
}

// wholeTurns returns the messages of msgs before seq limit, ending before the last user
// message that starts a turn not wholly inside msgs.
func wholeTurns(msgs []store.Message, limit int64) []store.Message {
	end := 0
	for i, m := range msgs {
		if m.Seq >= limit {
			return msgs[:i]
		}
		if m.Role == store.RoleUser {
			end = i
		}
	}
	if len(msgs) < foldBatch {
		return msgs
	}
	return msgs[:end]
}
