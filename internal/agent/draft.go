package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	"atrium/internal/llm"
	"atrium/internal/store"
)

// draft keeps a streaming reply in the database while it is written, so that a process
// killed mid-stream (kill -9, power loss) loses at most DraftInterval of text. The row is
// inserted before the model call, marked interrupted (store.ReplyInterrupted), and its
// text is rewritten at most once per interval, from a goroutine of its own, so that the
// stream never waits for the disk: one small update per second per streaming reply, not
// one per token. Finishing the reply (commitStep, commitFinal) overwrites the mark.
type draft struct {
	t    *turn
	id   int64
	quit chan struct{}
	done chan struct{}

	mu              sync.Mutex
	text, reasoning strings.Builder
	dirty           bool
	saves           int // writes after the insert, for tests and logs
}

// startDraft stores t.final as a draft, unless it is stored already, and starts saving
// what streams into it. If the insert fails the reply is only saved when it ends, as
// before drafts existed.
func (t *turn) startDraft() *draft {
	d := &draft{t: t, quit: make(chan struct{}), done: make(chan struct{})}
	if t.final.ID == 0 {
		m := *t.final
		m.Status, m.Error = store.StatusStopped, store.ReplyInterrupted
		if err := t.save(&m); err != nil {
			t.a.Log.Warn("agent: store the reply draft", "session", t.s.ID, "err", err)
			close(d.done)
			return d
		}
		t.final.ID, t.final.Seq, t.final.CreatedAt = m.ID, m.Seq, m.CreatedAt
	}
	d.id = t.final.ID
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
	d.saves++
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := d.t.a.Store.SaveDraft(ctx, d.id, text, reasoning)
	if err != nil {
		d.t.a.Log.Warn("agent: save the reply draft", "session", d.t.s.ID, "err", err)
		return true // try again at the next tick
	}
	return ok
}

// stop ends the saving and waits for a write in progress, so that the reply's final
// write comes after every draft write.
func (d *draft) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	close(d.quit)
	<-d.done
	d.t.a.Log.Debug("agent: reply draft saved", "session", d.t.s.ID, "writes", d.saves)
}
