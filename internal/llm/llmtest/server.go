// Package llmtest is a scripted fake model server for tests. It speaks the
// OpenAI chat completions API (streamed), GET /v1/models, and the Anthropic
// Messages API (streamed), so tests of anything that calls a model never reach
// the internet.
//
// A test enqueues Replies (or sets a Handler for rule-based replies) and then
// inspects what was sent with Requests:
//
//	srv := llmtest.NewServer(t)
//	srv.Enqueue(llmtest.Reply{Text: llmtest.Words("Hello there.")})
//	p, _ := llm.New(llm.Config{Kind: "openai", BaseURL: srv.URL()})
package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"atrium/internal/llm"
)

// ToolCall is a tool call the fake model makes.
type ToolCall struct{ ID, Name, Arguments string }

// Reply scripts one response.
type Reply struct {
	Text      []string   // content deltas, sent one per chunk, in order
	Reasoning []string   // reasoning deltas (reasoning_content / thinking), sent before Text
	ToolCalls []ToolCall // each call's Arguments is split into ~3 fragments across chunks
	Usage     *llm.Usage // sent in a final usage chunk (OpenAI) or message_start/message_delta (Anthropic) when set
	// FinishReason overrides the finish/stop reason; default "stop" or
	// "tool_calls" (OpenAI), "end_turn" or "tool_use" (Anthropic).
	FinishReason string
	ChunkDelay   time.Duration // pause between chunks
	// Status other than 0/200 answers with that status and ErrorBody
	// ({"error":{"message":...}} with the status text by default).
	Status    int
	ErrorBody string
	// StallBeforeHeaders waits this long before sending response headers; use a
	// very long value for "never starts". The wait ends early when the client goes away.
	StallBeforeHeaders time.Duration
	// StallAfter: after this many chunks, stop sending and hold the connection
	// open until the client goes away (0 = never).
	StallAfter int
	// BreakAfter: after this many chunks, abort the connection without a proper
	// end (0 = never).
	//
	// Chunks are counted as content deltas: every "data:" chunk in the OpenAI
	// protocol, every content_block_delta in the Anthropic one.
	BreakAfter int
}

// Message is one conversation entry of a received request, in a common shape
// for both protocols (Anthropic system text becomes a "system" message,
// tool_result blocks become "tool" messages).
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	// Images are a user message's image parts as data: URLs (an Anthropic base64
	// block is written as one too: "data:<media_type>;base64,<data>").
	Images []string
}

// Tool is a tool offered in a received request.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// ChatRequest is a received chat request, parsed.
type ChatRequest struct {
	Protocol  string // "openai" or "anthropic"
	Model     string
	Messages  []Message
	Stream    bool
	Tools     []Tool
	MaxTokens int
}

// LastUser returns the content of the last user message ("" if none).
func (r ChatRequest) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// Recorded is one request the server received.
type Recorded struct {
	Method string
	Path   string
	Header http.Header // Authorization and X-Api-Key included
	Body   []byte
	Chat   ChatRequest // zero unless the request was a chat request
}

// Server is the fake. Set the exported fields before the first request, or use
// the setters, which are safe while requests are in flight.
type Server struct {
	// Handler decides the reply when the queue is empty (nil: Text ["ok"]).
	Handler func(req ChatRequest) Reply
	// Models is served by GET /v1/models (nil: ["fake-model"]).
	Models []string
	// Windows reports a context window for some of Models, in the field a real
	// server of the style uses: vLLM's max_model_len for OpenAI-style listings,
	// max_input_tokens for Anthropic's.
	Windows map[string]int
	// RequireKey, when set, makes every request without this key (as a bearer
	// token or x-api-key) fail with 401.
	RequireKey string
	// Unrecorded, set before the first request, keeps no Requests (a load
	// test's thousands of bodies would count in its memory figures).
	Unrecorded bool

	srv  *httptest.Server
	done chan struct{}

	mu    sync.Mutex
	queue []Reply
	reqs  []Recorded
}

// NewServer starts a fake server, closed in tb.Cleanup.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("GET /v1/models", s.models)
	s.srv = httptest.NewServer(s.record(mux))
	tb.Cleanup(func() {
		close(s.done) // release stalled handlers whose client never went away
		s.srv.Close()
	})
	return s
}

// URL returns the base URL, ending in /v1.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Enqueue appends replies to the FIFO script.
func (s *Server) Enqueue(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, r...)
}

// SetHandler sets Handler safely while requests may be in flight.
func (s *Server) SetHandler(h func(req ChatRequest) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Handler = h
}

// SetModels sets Models safely while requests may be in flight.
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Models = ids
}

// SetWindows sets Windows safely while requests may be in flight.
func (s *Server) SetWindows(w map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Windows = w
}

// SetRequireKey sets RequireKey safely while requests may be in flight.
func (s *Server) SetRequireKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.RequireKey = key
}

// Requests returns every request received so far, in order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.reqs...)
}

// LastRequest returns the last request received (zero if none).
func (s *Server) LastRequest() Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return Recorded{}
	}
	return s.reqs[len(s.reqs)-1]
}

// record stores the request, checks the key and passes it on.
func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec := Recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		switch r.URL.Path {
		case "/v1/chat/completions":
			rec.Chat = parseOpenAI(body)
		case "/v1/messages":
			rec.Chat = parseAnthropic(body)
		}
		s.mu.Lock()
		if !s.Unrecorded {
			s.reqs = append(s.reqs, rec)
		}
		want := s.RequireKey
		s.mu.Unlock()
		if want != "" && r.Header.Get("Authorization") != "Bearer "+want && r.Header.Get("X-Api-Key") != want {
			if r.Header.Get("Anthropic-Version") != "" {
				writeJSON(w, http.StatusUnauthorized, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			} else {
				writeJSON(w, http.StatusUnauthorized, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`)
			}
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chatKey{}, rec.Chat)))
	})
}

type chatKey struct{}

// chatOf returns the request parsed by record.
func chatOf(r *http.Request) ChatRequest {
	req, _ := r.Context().Value(chatKey{}).(ChatRequest)
	return req
}

// next picks the reply for req: the queue first, then Handler, then "ok".
func (s *Server) next(req ChatRequest) Reply {
	s.mu.Lock()
	if len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		return r
	}
	h := s.Handler
	s.mu.Unlock()
	if h != nil {
		return h(req)
	}
	return Reply{Text: []string{"ok"}}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ids, windows := s.Models, s.Windows
	s.mu.Unlock()
	if ids == nil {
		ids = []string{"fake-model"}
	}
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object,omitempty"`
		Created     int64  `json:"created,omitempty"`
		OwnedBy     string `json:"owned_by,omitempty"`
		Type        string `json:"type,omitempty"`
		DisplayName string `json:"display_name,omitempty"`
		CreatedAt   string `json:"created_at,omitempty"`
		MaxModelLen int    `json:"max_model_len,omitempty"`
		MaxInput    int    `json:"max_input_tokens,omitempty"`
	}
	data := []model{}
	anthropicStyle := r.Header.Get("Anthropic-Version") != ""
	for _, id := range ids {
		if anthropicStyle {
			data = append(data, model{ID: id, Type: "model", DisplayName: id, CreatedAt: "2025-01-01T00:00:00Z", MaxInput: windows[id]})
		} else {
			data = append(data, model{ID: id, Object: "model", Created: 1700000000, OwnedBy: "llmtest", MaxModelLen: windows[id]})
		}
	}
	out := map[string]any{"object": "list", "data": data}
	if anthropicStyle {
		out = map[string]any{"data": data, "has_more": false}
		if len(ids) > 0 {
			out["first_id"], out["last_id"] = ids[0], ids[len(ids)-1]
		}
	}
	b, _ := json.Marshal(out)
	writeJSON(w, http.StatusOK, string(b))
}

// sse writes one server-sent event per call and enforces the reply's delays,
// stalls and breaks. send returns false when the handler must return.
type sse struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	reply  Reply
	deltas int
}

// start waits StallBeforeHeaders, then answers an error status or starts the
// event stream. It returns false when nothing more is to be sent.
func (e *sse) start(defaultError func(status int) string) bool {
	if d := e.reply.StallBeforeHeaders; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-e.r.Context().Done():
			return false
		case <-e.s.done:
			return false
		}
	}
	if st := e.reply.Status; st != 0 && st != http.StatusOK {
		body := e.reply.ErrorBody
		if body == "" {
			body = defaultError(st)
		}
		writeJSON(e.w, st, body)
		return false
	}
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	e.w.WriteHeader(http.StatusOK)
	e.flush()
	return true
}

// send writes an event; delta says whether it counts as a chunk for
// StallAfter/BreakAfter.
func (e *sse) send(event, data string, delta bool) bool {
	if delta && e.deltas > 0 && e.reply.ChunkDelay > 0 {
		t := time.NewTimer(e.reply.ChunkDelay)
		select {
		case <-t.C:
		case <-e.r.Context().Done():
			t.Stop()
			return false
		case <-e.s.done:
			t.Stop()
			return false
		}
	}
	if delta {
		if n := e.reply.StallAfter; n > 0 && e.deltas >= n {
			select {
			case <-e.r.Context().Done():
			case <-e.s.done:
			}
			return false
		}
		if n := e.reply.BreakAfter; n > 0 && e.deltas >= n {
			// Abort the connection: the client sees the body end mid-stream.
			panic(http.ErrAbortHandler)
		}
		e.deltas++
	}
	if event != "" {
		fmt.Fprintf(e.w, "event: %s\n", event)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", data)
	e.flush()
	return e.r.Context().Err() == nil
}

func (e *sse) flush() {
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fragments splits s into about three pieces whose concatenation is s.
func fragments(s string) []string {
	r := []rune(s)
	if len(r) < 3 {
		return []string{s}
	}
	a, b := len(r)/3, 2*len(r)/3
	return []string{string(r[:a]), string(r[a:b]), string(r[b:])}
}

// Words splits text into token-like chunks (words with their trailing
// whitespace) whose concatenation is text.
func Words(text string) []string {
	var out []string
	start := 0
	inSpace := true // leading whitespace joins the first word
	for i, c := range text {
		space := unicode.IsSpace(c)
		if !space && inSpace && i > 0 && start < i && hasNonSpace(text[start:i]) {
			out = append(out, text[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

func hasNonSpace(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsSpace(r) }) >= 0
}
