package web

import (
	"bytes"
	"context"
	stdhtml "html"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/a-h/templ"

	"atrium/internal/agent"
	"atrium/internal/markdown"
	"atrium/internal/store"
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
}

type room struct {
	mu        sync.Mutex
	clients   map[*client]struct{}
	live      *liveReply // nil while the session is idle
	timer     *time.Timer
	lastFlush time.Time
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
func NewHub(interval time.Duration, now func() time.Time, log *slog.Logger) *Hub {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Hub{interval: interval, now: now, log: log, rooms: map[string]*room{}}
}

func (h *Hub) room(sessionID string) *room {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.rooms[sessionID]
	if !ok {
		r = &room{clients: map[*client]struct{}{}}
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
	r.clients[c] = struct{}{}
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
	r.mu.Unlock()
	h.release(sessionID, r)
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
		BlocksHTML: r.live.blocks.String(), TailHTML: r.live.tailHTML, Model: r.live.model}}
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

// Publish implements agent.Sink.
func (h *Hub) Publish(ev agent.Event) {
	r := h.room(ev.SessionID)
	r.mu.Lock()
	switch ev.Kind {
	case agent.EventUserMessage:
		r.live = &liveReply{afterSeq: ev.Message.Seq}
		r.broadcast(renderFrame(
			views.FrameUserMessage(messageView(*ev.Message), views.LiveMessage{}),
			views.FrameRunState("streaming"),
			views.FrameNotice(""),
		))
	case agent.EventRunStarted:
		if r.live != nil {
			r.live.model = ev.Model
		}
	case agent.EventText:
		if r.live == nil {
			break
		}
		r.live.text = append(r.live.text, ev.Text...)
		r.live.dirty = true
		r.scheduleLocked(h, ev.SessionID)
	case agent.EventFinal:
		if r.timer != nil {
			r.timer.Stop()
			r.timer = nil
		}
		r.live = nil
		r.broadcast(renderFrame(views.FrameFinal(messageView(*ev.Message)), views.FrameRunState("idle")))
	}
	r.mu.Unlock()
	if ev.Kind == agent.EventFinal {
		h.release(ev.SessionID, r)
	}
}

// scheduleLocked flushes now if the interval has passed since the last flush, else makes
// sure a timer will flush at the end of the interval. Leading edge: the first token after
// a quiet spell goes out at once.
func (r *room) scheduleLocked(h *Hub, sessionID string) {
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
// A markdown.Render costs ~20µs however short its input, which is more than the whole
// budget per token when a slow stream flushes after every token. So when the new text
// only extends the last line of the tail in a way that cannot change how anything
// before it parses, the tail's HTML is extended instead of rendered again (extendTail).
func (l *liveReply) render() []byte {
	l.dirty = false
	var comps []templ.Component
	// Blocks finish only at a newline: without one since the last render, skip the scan.
	k := 0
	if bytes.IndexByte(l.text[l.tailEnd:], '\n') >= 0 {
		k = markdown.SplitStable(string(l.text[l.stable:]))
	}
	if k > 0 {
		html := markdown.Render(string(l.text[l.stable : l.stable+k]))
		l.blocks.WriteString(html)
		l.stable += k
		comps = append(comps, views.FrameLiveBlocks(html))
	}
	tail, ok := "", false
	if len(comps) == 0 && l.tailEnd > l.stable {
		tail, ok = extendTail(l.text[l.stable:l.tailEnd], l.text[l.tailEnd:], l.tailHTML)
	}
	if !ok {
		tail = markdown.Render(string(l.text[l.stable:]))
	}
	l.tailEnd = len(l.text)
	if tail != l.tailHTML || len(comps) > 0 {
		l.tailHTML = tail
		comps = append(comps, views.FrameLiveTail(tail))
	}
	if len(comps) == 0 {
		return nil
	}
	return renderFrame(comps...)
}

// extendTail returns markdown.Render(old+add) given html = markdown.Render(old), without
// rendering, for the two cases that make up most of a long reply: words added to the
// last line of a paragraph, list item, heading or table row, and text added inside an
// open fenced code block. ok is false when it cannot be sure; the caller renders then.
// (old and add are never empty when a render is due; old is the tail as last rendered.)
func extendTail(old, add []byte, html string) (string, bool) {
	if len(add) == 0 {
		return html, true
	}
	if s, ok := extendCode(old, add, html); ok {
		return s, true
	}
	return extendText(old, add, html)
}

// extendText handles add = spaces and plain words (letters, digits, . , ! ?) continuing
// the last line of old. Such text opens and closes nothing: no emphasis, code span, link,
// autolink (no "www", ':' or '@') or entity, and, following whitespace, it does not change
// the flanking of a delimiter run before it. So the last block's inline content just
// grows, and the HTML grows at the end of that content, which must be plain text too:
// the HTML ends with that same run of plain characters followed only by block closing
// tags (so not inside a link or code).
func extendText(old, add []byte, html string) (string, bool) {
	if bytes.IndexByte(add, '\n') >= 0 || !plainWords(add) || containsFold(add, "www") {
		return "", false
	}
	if add[0] != ' ' && old[len(old)-1] != ' ' {
		return "", false // add would join the last word
	}
	line := old[bytes.LastIndexByte(old, '\n')+1:]
	if !inlineLine(line) {
		return "", false
	}
	// The last word of old, as plain text maybe closed by *, _, ~ or ` (emphasis,
	// strikethrough, code span), must be what the HTML's last block ends with, maybe
	// followed by the matching inline closing tags.
	trimmed := bytes.TrimRight(old, " ")
	word := bytes.TrimRight(trimmed, "*_~`")
	if len(trimmed)-len(word) > 3 {
		return "", false
	}
	run := len(word)
	for run > 0 && plainByte(word[run-1]) {
		run--
	}
	if run == len(word) {
		return "", false
	}
	body, closing := splitClosingTags(html)
	if closing == "" || !strings.HasSuffix(trimInlineClosers(body), string(word[run:])) {
		return "", false
	}
	grown := bytes.TrimRight(append(old[len(trimmed):len(old):len(old)], add...), " ")
	if len(grown) == 0 {
		return html, true // only trailing spaces, which render as nothing
	}
	return body + string(grown) + closing, true
}

// inlineLine reports whether a line is plain inline text, maybe after a list marker,
// starting with a letter (or ** or __ and a letter): not a fence, heading, quote, table
// row, link reference definition, thematic break or setext underline.
func inlineLine(line []byte) bool {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	switch {
	case i+1 < len(line) && (line[i] == '-' || line[i] == '*' || line[i] == '+') && line[i+1] == ' ':
		i += 2
	case i < len(line) && line[i] >= '0' && line[i] <= '9':
		j := i
		for j < len(line) && j-i < 9 && line[j] >= '0' && line[j] <= '9' {
			j++
		}
		if j+1 >= len(line) || (line[j] != '.' && line[j] != ')') || line[j+1] != ' ' {
			return false
		}
		i = j + 2
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if i+2 < len(line) && (line[i] == '*' || line[i] == '_') && line[i+1] == line[i] {
		i += 2
	}
	return i < len(line) && (line[i]|0x20 >= 'a' && line[i]|0x20 <= 'z')
}

func plainByte(c byte) bool {
	return c|0x20 >= 'a' && c|0x20 <= 'z' || c >= '0' && c <= '9' || c == '.' || c == ',' || c == '!' || c == '?'
}

func plainWords(b []byte) bool {
	for _, c := range b {
		if c != ' ' && !plainByte(c) {
			return false
		}
	}
	return true
}

func containsFold(b []byte, lower string) bool {
	return bytes.Contains(bytes.ToLower(b), []byte(lower))
}

// trimInlineClosers removes the closing tags of emphasis, strikethrough and code spans,
// and literal delimiters, from the end of html.
func trimInlineClosers(html string) string {
	for {
		t := strings.TrimRight(html, "*_~`")
		for _, tag := range []string{"</em>", "</strong>", "</del>", "</code>"} {
			t = strings.TrimSuffix(t, tag)
		}
		if t == html {
			return html
		}
		html = t
	}
}

// splitClosingTags splits html into a body and its trailing run of closing tags of blocks
// whose text is inline content (p, li, lists, quotes, headings, tables).
func splitClosingTags(html string) (body, closing string) {
	end := len(html)
	for {
		s := strings.TrimSuffix(html[:end], "\n")
		i := strings.LastIndex(s, "</")
		if i < 0 || !strings.HasSuffix(s, ">") {
			break
		}
		switch s[i+2 : len(s)-1] {
		case "p", "li", "ul", "ol", "blockquote", "td", "th", "tr", "tbody", "thead", "table",
			"h1", "h2", "h3", "h4", "h5", "h6":
			end = i
			continue
		}
		break
	}
	return html[:end], html[end:]
}

// extendCode handles text added inside a fenced code block that old leaves open, opened
// at the start of a line and not closed by add. Code is shown verbatim, escaped, with a
// newline after its last line. The HTML must end with exactly that code element.
func extendCode(old, add []byte, html string) (string, bool) {
	const closing = "</code></pre></div>\n"
	if !strings.HasSuffix(html, closing) || !codeText(add) {
		return "", false
	}
	start := openFenceContent(old)
	if start < 0 {
		return "", false
	}
	// No line of the grown last line or of add may look like a closing fence.
	seg := append(old[bytes.LastIndexByte(old, '\n')+1:len(old):len(old)], add...)
	for line := range bytes.Lines(seg) {
		t := bytes.TrimLeft(line, " \t")
		if len(t) > 0 && (t[0] == '`' || t[0] == '~') {
			return "", false
		}
	}
	body := html[:len(html)-len(closing)]
	was := codeHTML(old[start:])
	open := body[:max(0, len(body)-len(was))]
	if !strings.HasSuffix(body, was) || !strings.HasSuffix(open, ">") ||
		strings.LastIndex(open, "<") != strings.LastIndex(open, "<code") {
		return "", false
	}
	code := append(old[start:len(old):len(old)], add...)
	return open + codeHTML(code) + closing, true
}

// codeHTML is how a code block's text appears in Render's output.
func codeHTML(code []byte) string {
	s := stdhtml.EscapeString(string(code))
	if len(code) > 0 && code[len(code)-1] != '\n' {
		s += "\n"
	}
	return s
}

// codeText reports whether b is text that the renderer copies into code unchanged but
// for escaping: valid UTF-8 without control characters other than tab and newline.
func codeText(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' && c != '\n' || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}

// openFenceContent returns where the content of a fenced code block starts if src ends
// inside one that was opened at column 0, else -1. The fence rules follow
// markdown.SplitStable: up to three spaces of indentation, ``` or ~~~ (a backtick fence's
// info has no backtick), closed by a run of at least as many of the same character.
func openFenceContent(src []byte) int {
	var (
		fence   byte
		n       int
		content = -1
	)
	for pos := 0; pos < len(src); {
		nl := bytes.IndexByte(src[pos:], '\n')
		if nl < 0 {
			break // the unfinished last line cannot open a fence; a closer is caught later
		}
		line := bytes.TrimRight(src[pos:pos+nl], " \t\r")
		pos += nl + 1
		ind := 0
		for ind < len(line) && line[ind] == ' ' {
			ind++
		}
		if ind > 3 {
			continue
		}
		rest := line[ind:]
		run := 0
		for run < len(rest) && (rest[run] == '`' || rest[run] == '~') && rest[run] == rest[0] {
			run++
		}
		switch {
		case fence != 0:
			if run >= n && run == len(rest) && rest[0] == fence {
				fence = 0
			}
		case run >= 3 && !(rest[0] == '`' && bytes.IndexByte(rest[run:], '`') >= 0):
			fence, n = rest[0], run
			content = -1
			if ind == 0 {
				content = pos
			}
		}
	}
	if fence == 0 {
		return -1
	}
	return content
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

// messageView maps a stored message to its view, rendering assistant markdown.
func messageView(m store.Message) views.Message {
	v := views.Message{Seq: m.Seq, Role: m.Role, Status: m.Status, Error: m.Error, Model: m.Model, CreatedAt: m.CreatedAt}
	if m.Role == "assistant" {
		v.HTML = markdown.Render(m.Content)
	} else {
		v.Text = m.Content
	}
	return v
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
