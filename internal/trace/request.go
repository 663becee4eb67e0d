package trace

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"atrium/internal/llm"
)

// ModelRequest is the data of a model_request span: the request as the agent
// built it and as it went on the wire (llm.HTTPRequest). Redaction (which the
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
	Request  llm.Request      `json:"request"`
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
		if mr.HTTP != nil && missingImageData(mr.Request) {
			// The span keeps image bytes only in the wire body (see builtRequest).
			body, err := mr.HTTP.RawBody()
			if err != nil {
				return nil, err
			}
			if err := fillImages(&out[i], body); err != nil {
				return nil, fmt.Errorf("trace: model request %d: %w", i+1, err)
			}
		}
	}
	return out, nil
}

func missingImageData(req llm.Request) bool {
	for _, m := range req.Messages {
		for _, img := range m.Images {
			if img.Data == nil {
				return true
			}
		}
	}
	return false
}

// fillImages gives the images of req their bytes from the wire body, in order: an
// OpenAI-compatible body's image_url parts (data: URLs) or an Anthropic body's base64
// image blocks.
func fillImages(req *llm.Request, body []byte) error {
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("read the body's images: %w", err)
	}
	var found [][]byte
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case map[string]any:
			var enc string
			switch x["type"] {
			case "image_url":
				u, _ := x["image_url"].(map[string]any)
				url, _ := u["url"].(string)
				_, enc, _ = strings.Cut(url, ";base64,")
			case "image":
				src, _ := x["source"].(map[string]any)
				enc, _ = src["data"].(string)
			default:
				for _, k := range []string{"messages", "content"} {
					if err := walk(x[k]); err != nil {
						return err
					}
				}
				return nil
			}
			data, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				return fmt.Errorf("an image in the body is not base64: %w", err)
			}
			found = append(found, data)
		}
		return nil
	}
	if err := walk(doc); err != nil {
		return err
	}
	n := 0
	req.Messages = slices.Clone(req.Messages)
	for i := range req.Messages {
		imgs := slices.Clone(req.Messages[i].Images)
		for k := range imgs {
			if n >= len(found) {
				return errors.New("the body has fewer images than the request")
			}
			imgs[k].Data = found[n]
			n++
		}
		req.Messages[i].Images = imgs
	}
	return nil
}
