package web

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/a-h/templ"

	"atrium/internal/agent"
	"atrium/internal/markdown"
	"atrium/internal/trace"
	"atrium/views"
)

// Hub relays agent events to every websocket watching a session, as HTML frames.
//
// Text deltas are coalesced: a session renders at most once per interval, and only the
// unfinished tail of the reply is re-rendered; finished markdown blocks are rendered once
// and appended. That keeps a long reply linear in its length instead of quadratic.
// All clients of a session get the same frames in the same order. A client that cannot
// keep up is disconnected; its browser reconnects and receives the persisted state.
type Hub struct {
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger

	mu    sync.Mutex
	rooms map[string]*room

	stopUnwatched func(sessionID string) bool // see HubConfig.StopUnwatched
	grace         time.Duration
}

// Clients is how many websockets are subscribed now (a chat's socket is in its
// session's room and in the MCP room: counted once).
func (h *Hub) Clients() int {
	h.mu.Lock()
	rooms := make([]*room, 0, len(h.rooms))
	for _, r := range h.rooms {
		rooms = append(rooms, r)
	}
	h.mu.Unlock()
	seen := map[*client]struct{}{}
	for _, r := range rooms {
		r.mu.Lock()
		for c := range r.clients {
			seen[c] = struct{}{}
		}
		r.mu.Unlock()
	}
	return len(seen)
}

type room struct {
	mu sync.Mutex
	// clients, each with what renders its whole view of the chat (its first frame, and
	// again after the branch on screen moved).
	clients   map[*client]func(Snapshot) []byte
	live      *liveReply // nil while the session is idle
	timer     *time.Timer
	lastFlush time.Time
	orphan    *time.Timer // running while a live reply has no viewer
}

// liveReply is the reply being streamed: the raw text, how much of it is rendered as
// finished blocks, and what the browsers currently show.
type liveReply struct {
	afterSeq int64 // seq of the user message the reply answers
	model    string
	text     []byte
	stable   int          // text[:stable] is rendered into blocks
	blocks   bytes.Buffer // HTML of the finished blocks
	tailHTML string       // HTML of text[stable:tailEnd], as last sent
	tailEnd  int
	dirty    bool // text changed since the last flush

	reasoning     []byte // reasoning streamed so far (shown collapsed, as text)
	reasoningSent int    // how much of it the browsers have

	// versions: the run writes a new version of a reply (regenerate, retry); its first
	// committed message shows the pager. nil otherwise, and once it is shown.
	versions *views.Versions
}

// client is one websocket. Frames go into send; the connection's writer drains it.
type client struct {
	send   chan []byte
	closed chan struct{}
	once   sync.Once
}

const clientBuffer = 256

func newClient() *client {
	return &client{send: make(chan []byte, clientBuffer), closed: make(chan struct{})}
}

func (c *client) close() { c.once.Do(func() { close(c.closed) }) }

// NewHub returns a hub that coalesces deltas to at most one frame per interval per session.
// HubConfig sets up a Hub. Zero values mean the defaults.
type HubConfig struct {
	Interval time.Duration // frame coalescing for streamed text (0: a frame per delta)
	// StopUnwatched, when set, is called for a session whose reply is still streaming
	// when its last viewer has been gone for Grace. A reload or a dropped connection
	// reconnects well within it.
	StopUnwatched func(sessionID string) bool
	Grace         time.Duration
	Now           func() time.Time
	Log           *slog.Logger
}

// NewHub returns a hub; Publish it the agent's events (agent.Subscribe).
func NewHub(c HubConfig) *Hub {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return &Hub{interval: c.Interval, now: c.Now, log: c.Log, stopUnwatched: c.StopUnwatched, grace: c.Grace,
		rooms: map[string]*room{}}
}

func (h *Hub) room(sessionID string) *room {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.rooms[sessionID]
	if !ok {
		r = &room{clients: map[*client]func(Snapshot) []byte{}}
		h.rooms[sessionID] = r
	}
	return r
}

// release drops a room nobody watches and nothing streams into.
func (h *Hub) release(sessionID string, r *room) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.clients) == 0 && r.live == nil && h.rooms[sessionID] == r {
		delete(h.rooms, sessionID)
	}
}

// Snapshot is what a browser should show of a session's in-flight reply.
type Snapshot struct {
	Live     *views.LiveMessage
	AfterSeq int64 // messages after this seq are part of the live reply; hide them
}

// subscribe adds c to the session and, under the same lock, calls initial with the live
// state so that the first frame c gets is a consistent snapshot and nothing is missed.
func (h *Hub) subscribe(sessionID string, c *client, initial func(Snapshot) []byte) {
	r := h.room(sessionID)
	r.mu.Lock()
	defer r.mu.Unlock()
	frame := initial(r.snapshotLocked())
	r.clients[c] = initial
	if r.orphan != nil {
		r.orphan.Stop()
		r.orphan = nil
	}
	if frame != nil {
		c.send <- frame // a fresh client's buffer has room
	}
}

func (h *Hub) unsubscribe(sessionID string, c *client) {
	h.mu.Lock()
	r := h.rooms[sessionID]
	h.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.clients, c)
	if len(r.clients) == 0 && r.live != nil && h.stopUnwatched != nil && r.orphan == nil {
		r.orphan = time.AfterFunc(h.grace, func() {
			r.mu.Lock()
			unwatched := len(r.clients) == 0 && r.live != nil
			r.orphan = nil
			r.mu.Unlock()
			if unwatched {
				h.log.Info("web: stopping a reply nobody watches", "session", sessionID)
				h.stopUnwatched(sessionID)
			}
		})
	}
	r.mu.Unlock()
	h.release(sessionID, r)
}

// Watching is how many websockets follow the session now.
func (h *Hub) Watching(sessionID string) int {
	h.mu.Lock()
	r := h.rooms[sessionID]
	h.mu.Unlock()
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.clients)
}

// Snapshot returns the session's live state (for rendering a page).
func (h *Hub) Snapshot(sessionID string) Snapshot {
	h.mu.Lock()
	r := h.rooms[sessionID]
	h.mu.Unlock()
	if r == nil {
		return Snapshot{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshotLocked()
}

func (r *room) snapshotLocked() Snapshot {
	if r.live == nil {
		return Snapshot{}
	}
	r.flushPending()
	return Snapshot{AfterSeq: r.live.afterSeq, Live: &views.LiveMessage{
		BlocksHTML: r.live.blocks.String(), TailHTML: r.live.tailHTML, Model: r.live.model,
		Reasoning: string(r.live.reasoning)}}
}

// flushPending brings blocks/tail up to date without sending (used for snapshots, whose
// receivers then get later frames relative to that state).
func (r *room) flushPending() {
	if r.live != nil && r.live.dirty {
		if frame := r.live.render(); frame != nil {
			r.broadcast(frame)
		}
	}
}

// RunLinks is the sink that fills a live reply's run-link placeholder when its run
// has ended. Give it to the trace consumer as a sink that follows the recording,
// so that the run it links to is stored whole when the link appears (the hub
// itself comes first, for latency).
func (h *Hub) RunLinks() agent.Sink { return runLinks{h} }

type runLinks struct{ h *Hub }

// Wants implements trace.EventFilter: only run ends, so that token deltas never wait
// in the recording's queue.
func (l runLinks) Wants(k agent.EventKind) bool { return k == agent.EventRunEnded }

var _ trace.EventFilter = runLinks{}

func (l runLinks) Publish(ev agent.Event) {
	if ev.Kind == agent.EventRunEnded && ev.SessionID != "" {
		l.h.broadcastTo(ev.SessionID, renderFrame(views.FrameRunLink(ev.SessionID, ev.RunID)))
	}
}

// Publish implements agent.Sink.
func (h *Hub) Publish(ev agent.Event) {
	if w := ev.MemoryWrite; ev.Kind == agent.EventMemory && w != nil && len(w.Suggestions) > 0 && w.Suggestions[0].ReplySeq != nil {
		// Extraction's suggestions arrive after the reply: chips on it, in every tab.
		m := views.Message{Seq: *w.Suggestions[0].ReplySeq}
		for _, sg := range w.Suggestions {
			m.Suggestions = append(m.Suggestions, suggestionView(sg))
		}
		h.broadcastTo(ev.SessionID, renderFrame(views.FrameMemoryChips(m)))
		return
	}
	r := h.room(ev.SessionID)
	r.mu.Lock()
	switch ev.Kind {
	case agent.EventUserMessage:
		r.live = &liveReply{afterSeq: ev.Message.Seq}
		r.broadcast(renderFrame(
			views.FrameUserMessage(messageView(*ev.Message, nil), views.LiveMessage{}),
			views.FrameRunState("streaming"),
			views.FrameNotice(""),
			// The last run's answered questions go; a new run has none open yet.
			views.ConsentRequests(nil, "outerHTML"),
		))
	case agent.EventBranch:
		// The branch on screen moved: every tab renders the chat again (from the store),
		// with the live reply of the run that answers it, if one starts.
		r.stopTimer()
		r.live = nil
		if ev.Message != nil {
			r.live = &liveReply{afterSeq: ev.Message.Seq}
			if v := ev.Versions; v != nil {
				r.live.versions = &views.Versions{Index: v.Index, Count: v.Count, Prev: v.Prev, Next: v.Next}
			}
		}
		r.resync()
		r.broadcast(renderFrame(views.FrameNotice("")))
	case agent.EventQueued:
		r.broadcast(renderFrame(views.FrameNotice("Queued: your message will be sent when this reply ends.")))
	case agent.EventNotice:
		r.broadcast(renderFrame(views.FrameNotice(ev.Text)))
	case agent.EventRunStarted:
		if r.live != nil {
			r.live.model = ev.Model
		}
	case agent.EventContext:
		r.broadcast(renderFrame(views.FrameContextMeter(*meterView(ev.Report.Zones))))
	case agent.EventText, agent.EventReasoning:
		if r.live == nil {
			break
		}
		if ev.Kind == agent.EventText {
			r.live.text = append(r.live.text, ev.Text...)
		} else {
			r.live.reasoning = append(r.live.reasoning, ev.Text...)
		}
		r.live.dirty = true
		r.scheduleLocked(h)
	case agent.EventAssistantStep:
		// The streamed text so far is committed as a step with tool calls; a new live
		// reply follows it.
		r.stopTimer()
		model := ""
		if r.live != nil {
			model = r.live.model
		}
		step := messageView(*ev.Message, nil)
		step.RunID = "" // the run's link goes on its final reply
		if r.live != nil {
			step.Versions = r.live.versions
		}
		r.live = &liveReply{afterSeq: ev.Message.Seq, model: model}
		r.broadcast(renderFrame(views.FrameAssistantStep(step, views.LiveMessage{Model: model})))
	case agent.EventToolProgress:
		p := ev.Progress
		r.broadcast(renderFrame(views.FrameToolProgress(views.ToolProgress{CallID: ev.Text, Progress: p.Progress, Total: p.Total, Message: p.Message})))
	case agent.EventToolResult:
		r.broadcast(renderFrame(views.FrameToolCard(toolCard(*ev.ToolCall, ev.Message.CallKey, ev.Message))))
	case agent.EventTitle:
		r.broadcast(renderFrame(views.FrameSessionTitle(sessionItem(*ev.Session, ev.SessionID))))
	case agent.EventTaskState:
		r.broadcast(renderFrame(views.FrameTaskPanel(taskView(ev.SessionID, ev.State, ""))))
	case agent.EventFinal:
		r.stopTimer()
		final := messageView(*ev.Message, nil)
		final.RunPending, final.TurnEnd = true, true
		if r.live != nil {
			final.Versions = r.live.versions
		}
		r.live = nil
		r.broadcast(renderFrame(views.FrameFinal(final), views.FrameRunState("idle")))
	}
	r.mu.Unlock()
	if ev.Kind == agent.EventFinal || ev.Kind == agent.EventBranch && ev.Message == nil {
		h.release(ev.SessionID, r) // a flip starts no reply: nothing keeps a room nobody watches
	}
}

func (r *room) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// scheduleLocked flushes now if the interval has passed since the last flush, else makes
// sure a timer will flush at the end of the interval. Leading edge: the first token after
// a quiet spell goes out at once.
func (r *room) scheduleLocked(h *Hub) {
	now := h.now()
	wait := h.interval - now.Sub(r.lastFlush)
	if wait <= 0 {
		r.flushLocked(now)
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(wait, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.timer = nil
			r.flushLocked(h.now())
		})
	}
}

func (r *room) flushLocked(now time.Time) {
	r.lastFlush = now
	if r.live == nil || !r.live.dirty {
		return
	}
	if frame := r.live.render(); frame != nil {
		r.broadcast(frame)
	}
}

// render renders what changed since the last call as one frame: newly finished blocks
// (appended) and the unfinished tail (morphed). Only text[stable:] is scanned.
//
// A markdown.Render costs 5µs or more however short its input, a large part of the
// budget per token when a slow stream flushes after every token. So when the new text
// only extends the tail in a way that cannot change how anything before it parses, the
// tail's HTML is extended instead of rendered again (markdown.ExtendTail). The frame is written
// directly, byte for byte what views.FrameLiveBlocks and views.FrameLiveTail render
// (TestFrameMarkup).
func (l *liveReply) render() []byte {
	l.dirty = false
	var reasoning []byte
	if len(l.reasoning) > l.reasoningSent {
		reasoning = renderFrame(views.FrameLiveReasoning(string(l.reasoning[l.reasoningSent:])))
		l.reasoningSent = len(l.reasoning)
	}
	// A block finishes only at a newline or when the first character of a line arrives
	// (markdown.SplitStable): without either since the last render, skip the scan.
	k := 0
	if add := l.text[l.tailEnd:]; len(add) > 0 &&
		(bytes.IndexByte(add, '\n') >= 0 || l.tailEnd > 0 && l.text[l.tailEnd-1] == '\n') {
		k = markdown.SplitStable(string(l.text[l.stable:]))
	}
	var blocks string
	if k > 0 {
		blocks = markdown.Render(string(l.text[l.stable : l.stable+k]))
		l.blocks.WriteString(blocks)
		l.stable += k
	}
	tail, ok := "", false
	if k == 0 && l.tailEnd > l.stable {
		tail, ok = markdown.ExtendTail(l.text[l.stable:l.tailEnd], l.text[l.tailEnd:], l.tailHTML)
	}
	if !ok {
		tail = markdown.Render(string(l.text[l.stable:]))
	}
	l.tailEnd = len(l.text)
	sendTail := k > 0 || tail != l.tailHTML
	l.tailHTML = tail
	return appendLiveFrame(reasoning, k > 0, blocks, sendTail, tail)
}

// broadcast queues a frame for every client; a client whose buffer is full is dropped.
func (r *room) broadcast(frame []byte) {
	for c := range r.clients {
		select {
		case c.send <- frame:
		default:
			delete(r.clients, c)
			c.close()
		}
	}
}

// resync sends every client its whole view of the chat again, rendered now.
func (r *room) resync() {
	snap := r.snapshotLocked()
	for c, render := range r.clients {
		frame := render(snap)
		if frame == nil {
			continue
		}
		select {
		case c.send <- frame:
		default:
			delete(r.clients, c)
			c.close()
		}
	}
}

// broadcastTo sends a frame to one session's clients (e.g. a title change).
func (h *Hub) broadcastTo(sessionID string, frame []byte) {
	h.mu.Lock()
	r := h.rooms[sessionID]
	h.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	r.broadcast(frame)
	r.mu.Unlock()
}

// renderFrame renders components into one websocket message. Rendering templ into a
// buffer cannot fail except through a component bug, which is logged by the caller's
// absence of content; an empty frame is harmless.
func renderFrame(comps ...templ.Component) []byte {
	var buf bytes.Buffer
	for _, c := range comps {
		if err := c.Render(context.Background(), &buf); err != nil {
			slog.Error("web: render frame", "err", err)
			return nil
		}
	}
	return buf.Bytes()
}

// CloseAll disconnects every websocket (at shutdown, after the last frames were queued).
func (h *Hub) CloseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.rooms {
		r.mu.Lock()
		for c := range r.clients {
			c.close()
		}
		r.mu.Unlock()
	}
}
