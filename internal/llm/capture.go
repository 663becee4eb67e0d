package llm

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"
)

// HTTPRequest is one HTTP request to a model provider as it went on the wire. Body
// holds the raw body bytes as a JSON string; a body that is not valid UTF-8 (which a
// JSON string cannot hold byte for byte) is in BodyBase64 instead. It carries
// credentials (headers, URL) exactly as sent: whoever stores it redacts it first.
type HTTPRequest struct {
	Method     string      `json:"method"`
	URL        string      `json:"url"`
	Headers    http.Header `json:"headers,omitempty"`
	Body       string      `json:"body,omitempty"`
	BodyBase64 string      `json:"body_base64,omitempty"`
}

// NewHTTPRequest describes a request: it copies header and picks Body or BodyBase64.
func NewHTTPRequest(method, rawURL string, header http.Header, body []byte) *HTTPRequest {
	h := &HTTPRequest{Method: method, URL: rawURL, Headers: header.Clone()}
	if utf8.Valid(body) {
		h.Body = string(body)
	} else {
		h.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	return h
}

// RawBody returns the body bytes h describes.
func (h *HTTPRequest) RawBody() ([]byte, error) {
	if h.BodyBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(h.BodyBase64)
		if err != nil {
			return nil, fmt.Errorf("llm: request body: %w", err)
		}
		return b, nil
	}
	return []byte(h.Body), nil
}

type captureKey struct{}

type rawBodyKey struct{}

// WithRawBody returns a context under which CaptureTransport sends body in place of
// the request body the provider built. A replay uses it to send a recorded request
// again byte for byte while the provider still sets the endpoint, the credentials
// from its configuration and the headers, and parses the streamed reply as usual.
// A provider whose client lacks CaptureTransport ignores it: compare what the
// capture reports with body to know.
func WithRawBody(ctx context.Context, body []byte) context.Context {
	return context.WithValue(ctx, rawBodyKey{}, body)
}

// WithCapture returns a context under which CaptureTransport reports every
// request it sends to fn (from the goroutine that sends it).
func WithCapture(ctx context.Context, fn func(*HTTPRequest)) context.Context {
	return context.WithValue(ctx, captureKey{}, fn)
}

// CaptureTransport wraps next (nil: http.DefaultTransport) so that requests made
// under a WithCapture context are reported, body included, before they are sent.
// Give it to a provider through Config.HTTPClient; the agent then puts each captured
// request in its model-response event, so the trace holds the exact bytes sent.
func CaptureTransport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return captureTransport{next: next}
}

type captureTransport struct{ next http.RoundTripper }

func (t captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if raw, ok := req.Context().Value(rawBodyKey{}).([]byte); ok && req.Body != nil && req.Body != http.NoBody {
		req.Body.Close()
		req = req.Clone(req.Context())
		req.ContentLength = int64(len(raw))
		req.Body = io.NopCloser(bytes.NewReader(raw))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	}
	fn, _ := req.Context().Value(captureKey{}).(func(*HTTPRequest))
	if fn == nil {
		return t.next.RoundTrip(req)
	}
	var body []byte
	switch {
	case req.Body == nil || req.Body == http.NoBody:
	case req.GetBody != nil:
		rc, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		body, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
	default:
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	fn(NewHTTPRequest(req.Method, req.URL.String(), req.Header, body))
	return t.next.RoundTrip(req)
}
