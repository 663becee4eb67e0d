package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// OpenAIEmbedder calls an OpenAI-compatible embeddings endpoint (OpenAI,
// Ollama, llama.cpp, vLLM): POST {BaseURL}/embeddings with a model and the
// texts. Vectors are used at their own width, up to MaxDims; they are never
// truncated here (that is only sound for models trained for it, which take the
// "dimensions" parameter instead).
type OpenAIEmbedder struct {
	BaseURL    string // e.g. https://api.openai.com/v1 or http://localhost:11434/v1
	APIKey     string // sent as a bearer token when set
	Model      string
	Dimensions int          // asked for when > 0 (models that can shorten their vectors)
	Client     *http.Client // nil: a client with a 10 s timeout
}

var defaultEmbedClient = &http.Client{Timeout: 10 * time.Second}

// StatusError is an error answer of the endpoint. Its Error leaves the body out: the
// body may echo the request, i.e. memory texts, into the log. Body is for the admin's
// Test button, which sends a sample text only.
type StatusError struct {
	Status string // e.g. "401 Unauthorized"
	Body   string // the start of the answer, printable characters only
}

func (e *StatusError) Error() string { return "memory: embeddings: " + e.Status }

// bodyExcerpt is the first 300 characters of an error body, on one line.
func bodyExcerpt(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, strings.ToValidUTF8(string(b), ""))
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "…"
	}
	return s
}

// Embed returns one vector per text, in order.
func (e *OpenAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	body := map[string]any{"model": e.Model, "input": texts}
	if e.Dimensions > 0 {
		body["dimensions"] = e.Dimensions
	}
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(e.BaseURL, "/")+"/embeddings", bytes.NewReader(buf))
	if err != nil {
		return nil, fmt.Errorf("memory: embeddings: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.APIKey)
	}
	c := e.Client
	if c == nil {
		c = defaultEmbedClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("memory: embeddings: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("memory: embeddings: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Status: resp.Status, Body: bodyExcerpt(data)}
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("memory: embeddings: bad response: %w", err)
	}
	if len(out.Data) != len(texts) {
		return nil, fmt.Errorf("memory: embeddings: %d vectors for %d texts", len(out.Data), len(texts))
	}
	vecs := make([][]float32, len(texts))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(texts) || vecs[d.Index] != nil || len(d.Embedding) == 0 {
			return nil, fmt.Errorf("memory: embeddings: bad vector index %d", d.Index)
		}
		vecs[d.Index] = d.Embedding
	}
	for _, v := range vecs[1:] {
		if len(v) != len(vecs[0]) {
			return nil, fmt.Errorf("memory: embeddings: vectors of different widths")
		}
	}
	return vecs, nil
}
