package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// httpGate sits between mcp-go's streamable HTTP transport and the network, for what
// the transport cannot be told:
//
//   - The standalone GET event stream. mcp-go retries it every second forever unless the
//     server answers 405, so a server that refuses it with another 4xx (400, 403, 406 …)
//     got a request and an ERROR line per second. A refusal now stops it (answered as 405
//     to the transport), and failures back off up to streamBackoffMax.
//   - The end of that stream. When a stream that was open ends, the server may have
//     died: onStreamEnd has the supervisor check at once instead of at the next ping.
//   - A forgotten session. A restarted server answers the old session id with 400 and a
//     JSON-RPC "no valid session" error; the spec's answer is 404, which mcp-go (and the
//     supervisor) treat as a lost session to re-initialise.
type httpGate struct {
	next        http.RoundTripper
	log         *slog.Logger
	onStreamEnd func()

	mu      sync.Mutex
	refused bool // the server said no to the GET stream: never ask again on this connection
	fails   int  // GET stream failures in a row
}

const (
	streamBackoffBase = time.Second
	streamBackoffMax  = time.Minute
	sessionBodyLimit  = 64 << 10
)

func isEventStreamGET(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (g *httpGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if isEventStreamGET(r) {
		return g.stream(r)
	}
	resp, err := g.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusBadRequest || r.Header.Get("Mcp-Session-Id") == "" {
		return resp, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, sessionBodyLimit))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr == nil && strings.Contains(strings.ToLower(string(body)), "session") {
		resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
	}
	return resp, nil
}

func (g *httpGate) stream(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	refused, fails := g.refused, g.fails
	g.mu.Unlock()
	if refused {
		return refusedStream(r), nil
	}
	if fails > 0 {
		// mcp-go waits a second between attempts; the rest of the backoff is here.
		delay := min(streamBackoffBase<<min(fails-1, 10), streamBackoffMax) - streamBackoffBase
		if err := sleepCtx(r.Context(), delay); err != nil {
			return nil, err
		}
	}
	resp, err := g.next.RoundTrip(r)
	if err != nil {
		g.failed(r.Context())
		return nil, err
	}
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		g.mu.Lock()
		g.fails = 0
		g.mu.Unlock()
		resp.Body = &streamBody{ReadCloser: resp.Body, ctx: r.Context(), onEnd: g.onStreamEnd}
	case code == http.StatusNotFound || code == http.StatusUnauthorized:
		// mcp-go's session and auth handling decides.
	case code == http.StatusMethodNotAllowed || code >= 400 && code < 500:
		g.mu.Lock()
		g.refused = true
		g.mu.Unlock()
		resp.Body.Close()
		g.log.Info("mcp: the server offers no event stream; list changes are picked up at each reconnect", "status", code)
		return refusedStream(r), nil
	default:
		g.failed(r.Context())
	}
	return resp, nil
}

// failed counts a failed stream attempt and, since a server that cannot be reached may
// have died, asks for a health check.
func (g *httpGate) failed(ctx context.Context) {
	if ctx.Err() != nil {
		return // the connection is closing, or mcp-go moved to a new session
	}
	g.mu.Lock()
	g.fails++
	g.mu.Unlock()
	if g.onStreamEnd != nil {
		g.onStreamEnd()
	}
}

func refusedStream(r *http.Request) *http.Response {
	return &http.Response{StatusCode: http.StatusMethodNotAllowed, Status: "405 Method Not Allowed",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{},
		Body: http.NoBody, Request: r}
}

// streamBody reports the end of an open event stream (the server closed it or the
// connection broke), unless the stream's own context ended it.
type streamBody struct {
	io.ReadCloser
	ctx   context.Context
	onEnd func()
	once  sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.ctx.Err() == nil && b.onEnd != nil {
		b.once.Do(b.onEnd)
	}
	return n, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// transportLog is the logger handed to mcp-go's transports. It redacts the server's
// secrets (mcp-go's messages quote URLs, which may carry credentials) and lowers the
// level of its event-stream messages: a refused stream is the server's choice, not an
// error, and retries back off in httpGate.
type transportLog struct {
	slog.Handler
	secrets []string
}

func newTransportLog(log *slog.Logger, secrets []string) *slog.Logger {
	return slog.New(transportLog{log.Handler(), secrets})
}

var listenerLevels = map[string]slog.Level{
	"server does not support listening":             slog.LevelInfo,
	"failed to listen to server. retry in 1 second": slog.LevelWarn,
	"listening to server forever":                   slog.LevelDebug,
}

func (q transportLog) Handle(ctx context.Context, r slog.Record) error {
	lvl, ok := listenerLevels[r.Message]
	if !ok {
		lvl = r.Level
	}
	if !q.Handler.Enabled(ctx, lvl) {
		return nil
	}
	out := slog.NewRecord(r.Time, lvl, redact(r.Message, q.secrets), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(q.redactAttr(a))
		return true
	})
	return q.Handler.Handle(ctx, out)
}

func (q transportLog) redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redact(v.String(), q.secrets))
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, redact(err.Error(), q.secrets))
		}
		if st, ok := v.Any().(fmt.Stringer); ok {
			return slog.String(a.Key, redact(st.String(), q.secrets))
		}
	case slog.KindGroup:
		as := v.Group()
		out := make([]any, len(as))
		for i, g := range as {
			out[i] = q.redactAttr(g)
		}
		return slog.Group(a.Key, out...)
	}
	return a
}

func (q transportLog) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = q.redactAttr(a)
	}
	return transportLog{q.Handler.WithAttrs(out), q.secrets}
}

func (q transportLog) WithGroup(name string) slog.Handler {
	return transportLog{q.Handler.WithGroup(name), q.secrets}
}
