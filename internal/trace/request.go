package trace

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"atrium/internal/llm"
)

// ModelRequest is the data of a model_request span: the request as it went on
// the wire (llm.HTTPRequest) and, only when no wire body was captured (the call
// failed before it was sent), the request as the agent built it. Each request is
// stored once: the built form is read back from the body (llm.ParseRequest) by
// Built, for RebuildLLMRequests and for a replay that converts the request to the
// other API format or goes on after its first step. Spans written before this
// hold both. Redaction (which the
// recorder applies to all span data) replaces header values such as Authorization
// and x-api-key. It leaves a body byte for byte as sent unless the body contains a
// configured secret or a credential-shaped string (see Redactor); so
// RebuildRequests returns exactly the bytes sent for every body without secrets,
// and a body that held one comes back with "[REDACTED]" in its place.
//
// A model call outside the reply's steps (Purpose "memory_extract") keeps its
// Response here too, sealed with the request: the memory extraction's answer holds
// memory texts, which must not sit in a plaintext model_response span.
type ModelRequest struct {
	Request  llm.Request      `json:"request,omitzero"`
	HTTP     *llm.HTTPRequest `json:"http,omitempty"`
	Purpose  string           `json:"purpose,omitempty"`
	Response *llm.Response    `json:"response,omitempty"`
}

// NewHTTPRequest describes a request for a model_request span, with credentials
// stripped from the URL (user info; values of query parameters such as key or
// api_key). Header values are redacted when the span is stored.
func NewHTTPRequest(method, rawURL string, header http.Header, body []byte) *llm.HTTPRequest {
	return redactWire(llm.NewHTTPRequest(method, rawURL, header, body))
}

// Built returns the request as the agent built it: as stored, or else read back
// from the wire body. Errors: neither is there, or the body is no request of the
// recorded endpoint's format.
func (mr *ModelRequest) Built() (llm.Request, error) {
	if mr.HTTP == nil || !isZeroRequest(mr.Request) {
		return mr.Request, nil
	}
	format, err := wireFormat(mr.HTTP.URL)
	if err != nil {
		return llm.Request{}, err
	}
	body, err := mr.HTTP.RawBody()
	if err != nil {
		return llm.Request{}, err
	}
	req, err := llm.ParseRequest(format, body)
	if err != nil {
		return llm.Request{}, fmt.Errorf("trace: the recorded request body: %w", err)
	}
	return req, nil
}

func isZeroRequest(r llm.Request) bool {
	return r.Model == "" && len(r.Messages) == 0 && len(r.Tools) == 0 && r.MaxTokens == 0
}

// storedRequest is what a model_request span stores of a request: the wire body
// alone when it was captured, the request as built otherwise.
func storedRequest(req llm.Request, wire *llm.HTTPRequest) ModelRequest {
	if wire != nil {
		return ModelRequest{HTTP: redactWire(wire)}
	}
	return ModelRequest{Request: req}
}

// redactWire returns a copy of h whose URL carries no credentials.
func redactWire(h *llm.HTTPRequest) *llm.HTTPRequest {
	if h == nil {
		return nil
	}
	c := *h
	c.URL = redactURL(h.URL)
	return &c
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
// the order they were sent (see ModelRequest.Built). Redacted text stays
// redacted; a tool's Parameters schema comes back as sent.
func RebuildLLMRequests(spans []SpanInfo) ([]llm.Request, error) {
	reqs, err := modelRequestSpans(spans)
	if err != nil {
		return nil, err
	}
	out := make([]llm.Request, len(reqs))
	for i, mr := range reqs {
		if out[i], err = mr.Built(); err != nil {
			return nil, fmt.Errorf("trace: model request %d: %w", i+1, err)
		}
	}
	return out, nil
}
