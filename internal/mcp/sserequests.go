package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client/transport"
)

// sseRequests answers a legacy SSE server's own requests (elicitation, sampling,
// roots, ping). mcp-go v1.2.1's SSE transport takes every event with an id for the
// answer to one of its requests and drops it when none is pending, so such a server
// waited for an answer that never came and the tool call timed out. This RoundTripper
// reads the event stream before the transport does: a request is taken out of the
// stream, answered by the connection's request handler (the same as for the other
// transports, see answerRequests) and the answer POSTed to the first endpoint the
// server named on the stream's own origin, with the stream's own headers (its
// credentials included).
type sseRequests struct {
	next    http.RoundTripper
	handler atomic.Pointer[transport.RequestHandler]
	ctx     context.Context // the connection's: answers end with it
	log     *slog.Logger
	open    atomic.Int32 // requests being answered
}

const (
	maxSSELine     = 4 << 20 // one line of the event stream (an event's data line)
	maxSSEAnswered = 16      // requests answered at once; more are dropped (the server's wait times out)
)

func (g *sseRequests) setHandler(h transport.RequestHandler) { g.handler.Store(&h) }

func (g *sseRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || resp.StatusCode != http.StatusOK ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	pr, pw := io.Pipe()
	src := resp.Body
	resp.Body = &pipeBody{PipeReader: pr, src: src}
	go g.filter(r, src, pw)
	return resp, nil
}

// pipeBody is the filtered stream; closing it closes the server's stream too.
type pipeBody struct {
	*io.PipeReader
	src io.Closer
}

func (b *pipeBody) Close() error {
	b.PipeReader.Close()
	return b.src.Close()
}

// filter copies the event stream from src to w, taking the server's requests out.
func (g *sseRequests) filter(r *http.Request, src io.ReadCloser, w *io.PipeWriter) {
	defer src.Close()
	var endpoint *url.URL
	var mu sync.Mutex // endpoint, read by answers
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 64<<10), maxSSELine)
	var event []string // the current event's lines
	var name, data string
	flush := func() error {
		defer func() { event, name, data = event[:0], "", "" }()
		switch name {
		case "endpoint":
			// The answers carry the stream's headers (its credentials), so they go
			// only where the stream came from, and only to the first endpoint: a later
			// one is dropped for the transport too, which then posts where answers go.
			u, err := r.URL.Parse(strings.TrimSpace(data))
			mu.Lock()
			first := endpoint == nil
			mu.Unlock()
			switch {
			case !first:
				g.log.Warn("mcp: endpoint event ignored: the server already named one")
				return nil
			case err != nil:
			case u.Scheme != r.URL.Scheme || u.Host != r.URL.Host:
				g.log.Warn("mcp: endpoint event ignored: not the stream's origin", "endpoint", capString(u.Scheme+"://"+u.Host, 200))
				return nil
			default:
				mu.Lock()
				endpoint = u
				mu.Unlock()
			}
		case "", "message":
			var head struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal([]byte(data), &head) == nil && head.Method != "" && len(head.ID) > 0 && string(head.ID) != "null" {
				var req transport.JSONRPCRequest
				if json.Unmarshal([]byte(data), &req) == nil {
					mu.Lock()
					to := endpoint
					mu.Unlock()
					if g.open.Add(1) > maxSSEAnswered {
						g.open.Add(-1)
						g.log.Warn("mcp: server request dropped: too many open at once", "method", capString(req.Method, 100))
						return nil
					}
					go func() {
						defer g.open.Add(-1)
						g.answer(r, to, req)
					}()
					return nil
				}
			}
		}
		_, err := io.WriteString(w, strings.Join(event, "\n")+"\n\n")
		return err
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(event) > 0 {
				if err := flush(); err != nil {
					return
				}
			}
			continue
		}
		event = append(event, line)
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			if data != "" {
				data += "\n"
			}
			data += value
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	w.CloseWithError(err)
}

// answer runs the request through the handler and POSTs the answer to the endpoint.
func (g *sseRequests) answer(stream *http.Request, endpoint *url.URL, req transport.JSONRPCRequest) {
	h := g.handler.Load()
	if endpoint == nil || h == nil {
		return // before the handshake: nothing to answer with yet
	}
	resp, err := (*h)(g.ctx, req)
	if err != nil || resp == nil {
		return // the handler answers refusals itself; this is the connection ending
	}
	body, err := json.Marshal(resp)
	if err != nil {
		return
	}
	post, err := http.NewRequestWithContext(g.ctx, http.MethodPost, endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return
	}
	for k, v := range stream.Header {
		if !strings.EqualFold(k, "Accept") && !strings.EqualFold(k, "Last-Event-Id") {
			post.Header[k] = v
		}
	}
	post.Header.Set("Content-Type", "application/json")
	res, err := g.next.RoundTrip(post)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
}
