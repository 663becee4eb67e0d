package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// draft keeps a streaming reply in the database while it is written, so that a process
// killed mid-stream (kill -9, power loss) loses at most about DraftInterval of text. Once
// per interval, from a goroutine of its own so that the stream never waits for the disk,
// the text so far is written: the first time as a new row marked interrupted
// (store.ReplyInterrupted), then rewritten in place. That is one small write per second
// per streaming reply, not one per token, and none at all for a reply that ends within
// the first interval. Finishing the reply (commitStep, commitFinal) overwrites the mark;
// a run that dies before its first draft write is closed by the next process
// (Agent.closeDeadRun).
type draft struct {
	t    *turn
	msg  store.Message // the row, once inserted (ID != 0); only loop touches it until done
	quit chan struct{}
	done chan struct{}

	mu              sync.Mutex
	text, reasoning strings.Builder
	dirty           bool
	writes          int // for the debug log
}

// startDraft starts saving what streams into t.final.
func (t *turn) startDraft() *draft {
	d := &draft{t: t, msg: *t.final, quit: make(chan struct{}), done: make(chan struct{})}
	d.msg.Status, d.msg.Error = store.StatusStopped, store.ReplyInterrupted
	go d.loop()
	return d
}

// add records a streamed delta.
func (d *draft) add(ev llm.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch ev.Kind {
	case llm.EventText:
		d.text.WriteString(ev.Text)
	case llm.EventReasoning:
		d.reasoning.WriteString(ev.Text)
	default:
		return
	}
	d.dirty = true
}

func (d *draft) loop() {
	defer close(d.done)
	tick := time.NewTicker(d.t.a.cfg.DraftInterval)
	defer tick.Stop()
	for {
		select {
		case <-d.quit:
			return
		case <-tick.C:
			if !d.flush() {
				return
			}
		}
	}
}

// flush writes the text so far if it changed; false means the row is no longer a draft.
func (d *draft) flush() bool {
	d.mu.Lock()
	if !d.dirty {
		d.mu.Unlock()
		return true
	}
	d.dirty = false
	text, reasoning := d.text.String(), d.reasoning.String() // the builders only grow: no copy needed
	d.writes++
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a := d.t.a
	if d.msg.ID == 0 {
		m := d.msg
		m.Content, m.Reasoning = text, reasoning
		if err := a.Store.AppendMessage(ctx, &m); err != nil {
			a.Log.Warn("agent: store the reply draft", "session", d.t.s.ID, "err", err)
			return !errs.Is(err, errs.NotFound) // the chat was deleted; else try again at the next tick
		}
		d.msg = m
		return true
	}
	ok, err := a.Store.SaveDraft(ctx, d.msg.ID, text, reasoning)
	if err != nil {
		a.Log.Warn("agent: save the reply draft", "session", d.t.s.ID, "err", err)
		return true
	}
	return ok
}

// stop ends the saving, waits for a write in progress (so that the reply's final write
// comes after every draft write) and points t.final at the draft's row, if any, so that
// finishing the reply rewrites it.
func (d *draft) stop() {
	close(d.quit)
	<-d.done
	if d.msg.ID != 0 {
		d.t.final.ID, d.t.final.Seq, d.t.final.CreatedAt = d.msg.ID, d.msg.Seq, d.msg.CreatedAt
	}
	d.t.a.Log.Debug("agent: reply draft saved", "session", d.t.s.ID, "writes", d.writes)
}
