package llmtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Embeddings is a fake OpenAI-compatible embeddings endpoint (POST /v1/embeddings)
// that knows synonyms, which the offline hash embedder does not: texts about cars or
// automobiles point one way, about pasta or food another, everything else a third, so
// a test can tell whether search used the endpoint's vectors.
type Embeddings struct {
	url   string
	calls atomic.Int32
	mu    sync.Mutex
	keys  []string
	held  chan struct{} // while set, requests wait until it is closed (Release)
}

// EmbeddingsOptions shape the endpoint. The zero value answers 8-wide vectors to
// anyone.
type EmbeddingsOptions struct {
	Width int // vector width; 0 means 8 (at least 3)
	// Key, when set, is the bearer key required; other requests get 401 with a body
	// that echoes the key sent and the input, as some servers do: tests check that
	// neither reaches a log.
	Key string
}

// NewEmbeddings starts the endpoint; it is closed when the test ends.
func NewEmbeddings(t testing.TB, o EmbeddingsOptions) *Embeddings {
	width := max(o.Width, 3)
	if o.Width == 0 {
		width = 8
	}
	e := &Embeddings{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		held := e.held
		e.mu.Unlock()
		if held != nil {
			select {
			case <-held:
			case <-time.After(10 * time.Second): // a test that never releases fails, not hangs
			case <-r.Context().Done():
				return
			}
		}
		auth := r.Header.Get("Authorization")
		e.mu.Lock()
		e.keys = append(e.keys, strings.TrimPrefix(auth, "Bearer "))
		e.mu.Unlock()
		var req struct{ Input []string }
		if r.URL.Path != "/v1/embeddings" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if o.Key != "" && auth != "Bearer "+o.Key {
			http.Error(w, `{"error":"bad key: you sent `+auth+`; input was `+strings.Join(req.Input, " ")+`"}`, http.StatusUnauthorized)
			return
		}
		e.calls.Add(1)
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []item `json:"data"`
		}
		for i, text := range req.Input {
			v := make([]float32, width)
			switch low := strings.ToLower(text); {
			case strings.Contains(low, "car") || strings.Contains(low, "automobile"):
				v[0] = 1
			case strings.Contains(low, "pasta") || strings.Contains(low, "food"):
				v[1] = 1
			default:
				v[width-1] = 1
			}
			out.Data = append(out.Data, item{i, v})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/v1"
	return e
}

// URL is the base URL to configure (it ends in /v1).
func (e *Embeddings) URL() string { return e.url }

// Calls counts the requests answered with vectors.
func (e *Embeddings) Calls() int { return int(e.calls.Load()) }

// Keys are the bearer keys of every request received, in order ("" for none).
func (e *Embeddings) Keys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.keys...)
}

// Hold makes requests from now on wait until Release.
func (e *Embeddings) Hold() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held == nil {
		e.held = make(chan struct{})
	}
}

// Release lets held and later requests through.
func (e *Embeddings) Release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held != nil {
		close(e.held)
		e.held = nil
	}
}
