package trace

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"atrium/internal/llm"
)

// ModelRequest is the data of a model_request span: the request as the agent
// built it and as it went on the wire.
type ModelRequest struct {
	Request llm.Request  `json:"request"`
	HTTP    *HTTPRequest `json:"http,omitempty"`
}

// HTTPRequest is one HTTP request as sent. Body holds the raw body bytes as a JSON
// string; a body that is not valid UTF-8 (which a JSON string cannot hold byte for
// byte) is in BodyBase64 instead.
//
// Redaction (which the recorder applies to all span data) replaces header values
// such as Authorization and x-api-key. It leaves a body byte for byte as sent
// unless the body contains a configured secret or a credential-shaped string (see
// Redactor); so RebuildRequests returns exactly the bytes sent for every body
// without secrets, and a body that held one comes back with "[REDACTED]" in its place.
type HTTPRequest struct {
	Method     string      `json:"method"`
	URL        string      `json:"url"`
	Headers    http.Header `json:"headers,omitempty"`
	Body       string      `json:"body,omitempty"`
	BodyBase64 string      `json:"body_base64,omitempty"`
}

// NewHTTPRequest describes a request for a model_request span. It copies header,
// strips credentials from the URL (user info; values of query parameters such as
// key or api_key) and picks Body or BodyBase64.
func NewHTTPRequest(method, rawURL string, header http.Header, body []byte) *HTTPRequest {
	h := &HTTPRequest{Method: method, URL: redactURL(rawURL), Headers: header.Clone()}
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
			return nil, fmt.Errorf("trace: request body: %w", err)
		}
		return b, nil
	}
	return []byte(h.Body), nil
}

var sensitiveQuery = map[string]bool{"key": true, "sig": true, "signature": true}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	changed := false
	if u.User != nil {
		u.User, changed = nil, true
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			k, _, ok := strings.Cut(p, "=")
			name, err := url.QueryUnescape(k)
			if !ok || err != nil {
				continue
			}
			if sensitiveKey(name) || sensitiveQuery[strings.ToLower(name)] {
				parts[i], changed = k+"="+url.QueryEscape(Redacted), true
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if !changed {
		return raw
	}
	return u.String()
}

type captureKey struct{}

// WithCapture returns a context under which CaptureTransport reports every
// request it sends to fn (from the goroutine that sends it).
func WithCapture(ctx context.Context, fn func(*HTTPRequest)) context.Context {
	return context.WithValue(ctx, captureKey{}, fn)
}

// CaptureTransport wraps next (nil: http.DefaultTransport) so that requests made
// under a WithCapture context are reported, body included, before they are sent.
// Give it to the model provider through llm.Config.HTTPClient; the agent then
// records each captured request in its model_request span.
func CaptureTransport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return captureTransport{next: next}
}

type captureTransport struct{ next http.RoundTripper }

func (t captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
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

// modelRequestSpans returns the model_request spans in seq order, decoded.
func modelRequestSpans(spans []SpanInfo) ([]ModelRequest, error) {
	var list []SpanInfo
	for _, s := range spans {
		if s.Kind == KindModelRequest {
			list = append(list, s)
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
	out := make([]ModelRequest, 0, len(list))
	for _, s := range list {
		var mr ModelRequest
		if err := json.Unmarshal(s.Data, &mr); err != nil {
			return nil, fmt.Errorf("trace: model request span %d: %w", s.Seq, err)
		}
		out = append(out, mr)
	}
	return out, nil
}

// RebuildRequests returns the raw HTTP bodies of the run's model requests, in the
// order they were sent (seq). They are byte-equal to what was sent unless a body
// contained a secret (see HTTPRequest). A model_request span without an http part
// is an error.
func RebuildRequests(spans []SpanInfo) ([][]byte, error) {
	reqs, err := modelRequestSpans(spans)
	if err != nil {
		return nil, err
	}
	bodies := make([][]byte, 0, len(reqs))
	for i, mr := range reqs {
		if mr.HTTP == nil {
			return nil, fmt.Errorf("trace: model request %d has no recorded http body", i+1)
		}
		b, err := mr.HTTP.RawBody()
		if err != nil {
			return nil, err
		}
		bodies = append(bodies, b)
	}
	return bodies, nil
}

// RebuildLLMRequests returns the run's model requests as the agent built them, in
// the order they were sent. Redacted text stays redacted; a tool's Parameters
// schema comes back compacted, with its object keys sorted.
func RebuildLLMRequests(spans []SpanInfo) ([]llm.Request, error) {
	reqs, err := modelRequestSpans(spans)
	if err != nil {
		return nil, err
	}
	out := make([]llm.Request, len(reqs))
	for i, mr := range reqs {
		out[i] = mr.Request
	}
	return out, nil
}
