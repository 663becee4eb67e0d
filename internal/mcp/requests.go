package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/llm"
	"atrium/internal/tools"
)

// Requests from a server to Atrium (elicitation, sampling, roots) and the
// notifications that belong to a tool call (progress).
//
// A server's request is put to the chat whose tool call it arrives during. Over
// streamable HTTP that is exact: the request comes on the call's own response stream.
// Over stdio and SSE it is the chat of the server's call in flight; when calls from
// several chats are in flight Atrium cannot tell who is asked, and declines.

// Asker puts a server's question to the person in the chat it concerns. The web
// layer implements it.
type Asker interface {
	// Ask shows q in its chat and waits for the answer. It returns an Answer with
	// Action "decline" when nobody watches the chat long enough to answer, and
	// ctx's error when ctx ends first.
	Ask(ctx context.Context, q Question) (Answer, error)
}

// QuestionKind is what a server asks.
type QuestionKind string

const (
	AskForm     QuestionKind = "form"     // elicitation, form mode
	AskURL      QuestionKind = "url"      // elicitation, URL mode
	AskSampling QuestionKind = "sampling" // consent to run the chat's model for the server
)

// Question is one request of a server, as the person sees it. Texts are bounded but
// not escaped: they are the server's and must be shown as text.
type Question struct {
	Kind      QuestionKind
	Server    string
	SessionID string
	OwnerID   int64
	CallKey   string // the tool card of the call it arrived during
	Message   string
	Form      *Form        // AskForm
	URL       string       // AskURL: an http(s) URL
	Sampling  *SamplingAsk // AskSampling
}

// SamplingAsk is what a server wants the model to do.
type SamplingAsk struct {
	SystemPrompt string
	Messages     []llm.Message // user and assistant texts
	Hints        []string      // model name hints, in the server's order
	MaxTokens    int
}

// Answer is the person's answer.
type Answer struct {
	Action  string         // "accept", "decline" or "cancel"
	Content map[string]any // AskForm accepted: the checked values
	Always  bool           // AskSampling accepted for every later request of the server
}

// Answer actions.
const (
	ActionAccept  = "accept"
	ActionDecline = "decline"
	ActionCancel  = "cancel"
)

// Bounds on what a server may ask the model for.
const (
	MaxSamplingTokens   = 4096     // maxTokens above this is refused
	maxSamplingMessages = 50       // messages in one request
	maxSamplingBytes    = 64 << 10 // their text, with the system prompt
	samplingTimeout     = 2 * time.Minute
)

// inflight is a tool call sent to the server and not yet answered.
type inflight struct {
	ctx  context.Context // the call's: its clock (tools.Hold) and its end
	call tools.Call
}

type inflightKey struct{}

var progressSeq atomic.Int64

// track records a call in flight under a fresh progress token; untrack forgets it.
func (s *server) track(ctx context.Context, call tools.Call) (string, *inflight) {
	token := fmt.Sprintf("atrium-%d", progressSeq.Add(1))
	in := &inflight{ctx: ctx, call: call}
	s.callsMu.Lock()
	if s.inflight == nil {
		s.inflight = map[string]*inflight{}
	}
	s.inflight[token] = in
	s.callsMu.Unlock()
	return token, in
}

func (s *server) untrack(token string) {
	s.callsMu.Lock()
	delete(s.inflight, token)
	s.callsMu.Unlock()
}

// callFor finds the tool call a server's request belongs to (see the package notes).
func (s *server) callFor(ctx context.Context) (*inflight, error) {
	if in, ok := ctx.Value(inflightKey{}).(*inflight); ok {
		return in, nil
	}
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	var found *inflight
	for _, in := range s.inflight {
		switch {
		case found == nil:
			found = in
		case found.call.SessionID != in.call.SessionID:
			return nil, errors.New("calls from several chats are running, so Atrium cannot tell which chat to ask")
		}
	}
	if found == nil {
		return nil, errors.New("it asked outside a tool call, so there is no chat to ask")
	}
	return found, nil
}

// onProgress shows a progress notification on its call's card and restarts the
// call's timeout (within the server's longest run with progress).
func (s *server) onProgress(n mcp.JSONRPCNotification) {
	f := n.Params.AdditionalFields
	token := fmt.Sprint(f["progressToken"])
	s.callsMu.Lock()
	in := s.inflight[token]
	s.callsMu.Unlock()
	if in == nil {
		return
	}
	tools.KeepAlive(in.ctx)
	if in.call.Hooks.Progress == nil {
		return
	}
	p := tools.Progress{}
	p.Progress, _ = f["progress"].(float64)
	p.Total, _ = f["total"].(float64)
	msg, _ := f["message"].(string)
	p.Message = capString(strings.Join(strings.Fields(msg), " "), 200)
	in.call.Hooks.Progress(p)
}

// refusal is an answer Atrium gives a server on purpose: a JSON-RPC error with this
// code, logged at INFO (it is the server's request that did not fit, not a fault).
type refusal struct {
	code int
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(code int, format string, args ...any) error {
	return &refusal{code: code, msg: fmt.Sprintf(format, args...)}
}

// samplingRejected is the code the spec gives a sampling request the user rejected.
const samplingRejected = -1

// newClient returns the client for one connection: the initialize handshake only (no
// server/discover probe before it, which the 2025-11-25 spec asks clients not to
// send), roots always, elicitation and sampling when there is someone to ask.
func (s *server) newClient(tr transport.Interface) *client.Client {
	return client.NewClient(tr, s.clientOptions()...)
}

func (s *server) clientOptions() []client.ClientOption {
	h := handlers{s}
	opts := []client.ClientOption{
		client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION),
		client.WithRootsHandler(h),
	}
	if s.sup.Asker != nil {
		opts = append(opts,
			client.WithClientCapabilities(mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{Form: &struct{}{}, URL: &struct{}{}}}),
			client.WithElicitationHandler(h), client.WithSamplingHandler(h))
	}
	return opts
}

// answerRequests puts a front on mcp-go's handling of the server's requests, once
// cl has started: a method Atrium does not offer is answered -32601 (mcp-go answers
// -32603 and logs an ERROR), and a refusal gets its own code, logged at INFO.
// Over legacy SSE, which mcp-go's client does not answer requests on, sse does it.
func (s *server) answerRequests(ctx context.Context, cl *client.Client, sse *sseRequests) {
	var set func(transport.RequestHandler)
	if bi, ok := cl.GetTransport().(transport.BidirectionalInterface); ok {
		set = bi.SetRequestHandler
	} else if sse != nil {
		set = sse.setHandler
	} else {
		return
	}
	// mcp-go's dispatcher to the handlers, caught from a second client on a stand-in
	// transport (the first one's is not exported).
	capture := &handlerCapture{}
	if err := client.NewClient(capture, s.clientOptions()...).Start(ctx); err != nil || capture.h == nil {
		return
	}
	inner := capture.h
	offered := map[string]bool{string(mcp.MethodPing): true, string(mcp.MethodListRoots): true}
	if s.sup.Asker != nil {
		offered[string(mcp.MethodElicitationCreate)] = true
		offered[string(mcp.MethodSamplingCreateMessage)] = true
	}
	set(func(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
		if !offered[req.Method] {
			s.log.Info("mcp: server request refused: method not offered", "method", capString(req.Method, 100))
			return transport.NewJSONRPCErrorResponse(req.ID, mcp.METHOD_NOT_FOUND, "Method not found: Atrium does not offer "+capString(req.Method, 100), nil), nil
		}
		resp, err := inner(ctx, req)
		var r *refusal
		switch {
		case err == nil:
			return resp, nil
		case errors.As(err, &r):
		case ctx.Err() != nil:
			r = &refusal{code: mcp.REQUEST_INTERRUPTED, msg: "the request ended before it was answered"}
		default:
			// mcp-go could not read the request's params.
			r = &refusal{code: mcp.INVALID_PARAMS, msg: capString(err.Error(), 300)}
		}
		s.log.Info("mcp: server request refused", "method", req.Method, "reason", r.msg)
		return transport.NewJSONRPCErrorResponse(req.ID, r.code, r.msg, nil), nil
	})
}

// handlerCapture is a transport that does nothing but keep the request handler a
// client installs on Start.
type handlerCapture struct {
	transport.Interface
	h transport.RequestHandler
}

func (c *handlerCapture) Start(context.Context) error                          { return nil }
func (c *handlerCapture) SetNotificationHandler(func(mcp.JSONRPCNotification)) {}
func (c *handlerCapture) SetRequestHandler(h transport.RequestHandler)         { c.h = h }

// updateLive takes the settings a running server follows without a restart: its roots
// (the server is told they changed) and its sampling consent.
func (s *server) updateLive(cfg ServerConfig) {
	s.mu.Lock()
	changed := !slices.Equal(s.roots, cfg.Roots)
	s.roots, s.sampling = cfg.Roots, cfg.SamplingAlways
	c := s.conn
	s.mu.Unlock()
	if changed && c != nil {
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, s.sup.RequestTimeout)
			defer cancel()
			if err := c.client.RootListChanges(ctx); err != nil {
				s.log.Warn("mcp: telling the server its roots changed failed", "err", s.redact(err.Error()))
			}
		}()
	}
}

// handlers answers the server's requests for mcp-go's client.
type handlers struct{ s *server }

// ListRoots answers roots/list with the server's configured roots.
func (h handlers) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	h.s.mu.Lock()
	roots := h.s.roots
	h.s.mu.Unlock()
	res := &mcp.ListRootsResult{Roots: []mcp.Root{}}
	for _, r := range roots {
		name := r
		if u, err := url.Parse(r); err == nil {
			name = u.Path
		}
		res.Roots = append(res.Roots, mcp.Root{URI: r, Name: name})
	}
	return res, nil
}

// ask puts q to the person in the chat of the call in, holding the call's timeout
// while they answer. The wait ends with the call (Stop, shutdown) or ctx.
func (h handlers) ask(ctx context.Context, in *inflight, q Question) (Answer, error) {
	q.Server, q.SessionID, q.OwnerID, q.CallKey = h.s.cfg.Name, in.call.SessionID, in.call.OwnerID, in.call.Hooks.CallKey
	release := tools.Hold(in.ctx)
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(in.ctx, cancel)
	defer stop()
	return h.s.sup.Asker.Ask(ctx, q)
}

// Elicit shows a form (or a link) in the chat and returns the person's answer.
func (h handlers) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	p := req.Params
	q := Question{Kind: AskForm, Message: capString(strings.TrimSpace(p.Message), maxMessage)}
	switch p.Mode {
	case mcp.ElicitationModeURL:
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(p.URL) > 2048 {
			return nil, refuse(mcp.INVALID_PARAMS, "Atrium shows only http(s) links of at most 2048 bytes")
		}
		q.Kind, q.URL = AskURL, u.String()
	default:
		form, err := ParseForm(p.RequestedSchema)
		if err != nil {
			return nil, refuse(mcp.INVALID_PARAMS, "Atrium cannot show this form: %s", err)
		}
		q.Form = form
	}
	in, err := h.s.callFor(ctx)
	if err != nil {
		h.s.log.Info("mcp: elicitation declined", "reason", err.Error())
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
	}
	ans, err := h.ask(ctx, in, q)
	if err != nil {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionCancel}}, nil
	}
	res := &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseAction(ans.Action)}}
	if ans.Action == ActionAccept && q.Kind == AskForm {
		res.Content = ans.Content
	}
	return res, nil
}

// CreateMessage runs the chat's model for the server, once the person agreed (or the
// server may sample without asking), and returns the model's reply.
func (h handlers) CreateMessage(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	p := req.CreateMessageParams
	ask, err := samplingAsk(p)
	if err != nil {
		return nil, err
	}
	in, err := h.s.callFor(ctx)
	if err != nil {
		return nil, refuse(samplingRejected, "Sampling refused: %s", err)
	}
	if in.call.Hooks.Sample == nil {
		return nil, refuse(samplingRejected, "Sampling refused: the chat has no model to run it")
	}
	h.s.mu.Lock()
	always := h.s.sampling
	h.s.mu.Unlock()
	if !always {
		ans, err := h.ask(ctx, in, Question{Kind: AskSampling, Sampling: ask})
		if err != nil || ans.Action != ActionAccept {
			return nil, refuse(samplingRejected, "User rejected sampling request")
		}
	}
	release := tools.Hold(in.ctx) // the model runs on the call's behalf: its own timeout applies
	defer release()
	mctx, cancel := context.WithTimeout(ctx, samplingTimeout)
	defer cancel()
	stop := context.AfterFunc(in.ctx, cancel)
	defer stop()
	msgs := []llm.Message{}
	if ask.SystemPrompt != "" {
		msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: ask.SystemPrompt})
	}
	msgs = append(msgs, ask.Messages...)
	resp, err := in.call.Hooks.Sample(mctx, h.s.cfg.Name, llm.Request{Messages: msgs, MaxTokens: ask.MaxTokens})
	if err != nil {
		return nil, refuse(mcp.INTERNAL_ERROR, "The model call failed")
	}
	stopReason := "endTurn"
	if resp.FinishReason == "length" || resp.FinishReason == "max_tokens" {
		stopReason = "maxTokens"
	}
	return &mcp.CreateMessageResult{
		SamplingMessage: mcp.SamplingMessage{Role: mcp.RoleAssistant, Content: mcp.NewTextContent(resp.Content)},
		Model:           "atrium",
		StopReason:      stopReason,
	}, nil
}

// samplingAsk checks a sampling request against Atrium's bounds and returns it as the
// person sees it; what does not fit is refused with a message for the server.
func samplingAsk(p mcp.CreateMessageParams) (*SamplingAsk, error) {
	if len(p.Tools) > 0 || p.ToolChoice != nil {
		return nil, refuse(mcp.INVALID_PARAMS, "Atrium does not offer tools in sampling")
	}
	if p.MaxTokens <= 0 || p.MaxTokens > MaxSamplingTokens {
		return nil, refuse(mcp.INVALID_PARAMS, "maxTokens must be between 1 and %d", MaxSamplingTokens)
	}
	if len(p.Messages) == 0 || len(p.Messages) > maxSamplingMessages {
		return nil, refuse(mcp.INVALID_PARAMS, "a sampling request needs 1 to %d messages", maxSamplingMessages)
	}
	ask := &SamplingAsk{SystemPrompt: p.SystemPrompt, MaxTokens: p.MaxTokens}
	size := len(p.SystemPrompt)
	for i, m := range p.Messages {
		if m.Role != mcp.RoleUser && m.Role != mcp.RoleAssistant {
			return nil, refuse(mcp.INVALID_PARAMS, "message %d has the role %q", i+1, capString(string(m.Role), 40))
		}
		text, ok := samplingText(m.Content)
		if !ok {
			return nil, refuse(mcp.INVALID_PARAMS, "message %d is not text; Atrium samples text only", i+1)
		}
		size += len(text)
		ask.Messages = append(ask.Messages, llm.Message{Role: string(m.Role), Content: text})
	}
	if size > maxSamplingBytes {
		return nil, refuse(mcp.INVALID_PARAMS, "the messages are %d bytes; Atrium samples at most %d", size, maxSamplingBytes)
	}
	if p.ModelPreferences != nil {
		for _, hint := range p.ModelPreferences.Hints {
			if len(ask.Hints) < 8 && strings.TrimSpace(hint.Name) != "" {
				ask.Hints = append(ask.Hints, capString(hint.Name, 100))
			}
		}
	}
	return ask, nil
}

// samplingText is a sampling message's text (one text content, or a list of them).
func samplingText(c any) (string, bool) {
	switch v := c.(type) {
	case mcp.TextContent:
		return v.Text, true
	case *mcp.TextContent:
		return v.Text, true
	case []mcp.Content:
		var parts []string
		for _, x := range v {
			t, ok := samplingText(x)
			if !ok {
				return "", false
			}
			parts = append(parts, t)
		}
		return strings.Join(parts, "\n"), len(parts) > 0
	}
	// A shape mcp-go left as JSON.
	b, err := json.Marshal(c)
	if err != nil {
		return "", false
	}
	var t struct{ Type, Text string }
	if json.Unmarshal(b, &t) == nil && t.Type == "text" {
		return t.Text, true
	}
	return "", false
}
