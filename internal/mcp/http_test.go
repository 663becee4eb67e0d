package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/mcp"
)

// TestHTTPClient checks what Atrium's HTTP client does before any MCP is
// spoken: headers and token sent, TLS verified, redirects limited, and the
// token kept out of the status.
func TestHTTPClient(t *testing.T) {
	t.Parallel()
	remote := func(url string) mcp.ServerConfig {
		return mcp.ServerConfig{
			Name: "remote", Transport: mcp.TransportHTTP, URL: url, Enabled: true,
			Headers: map[string]string{"X-Api-Key": "key-123"}, BearerToken: "tok-456",
		}
	}

	t.Run("headers and token", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var got http.Header
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if got == nil {
				got = r.Header.Clone()
			}
			mu.Unlock()
			http.Error(w, "nope: tok-456", http.StatusInternalServerError)
		}))
		defer srv.Close()
		h := newHarness(t)
		h.sup.Apply(context.Background(), []mcp.ServerConfig{remote(srv.URL + "/mcp")})
		st := h.waitState(t, "remote", 10*time.Second, mcp.StateFailed)
		mu.Lock()
		defer mu.Unlock()
		if got.Get("Authorization") != "Bearer tok-456" || got.Get("X-Api-Key") != "key-123" {
			t.Fatalf("request headers %v", got)
		}
		if strings.Contains(st.Error, "tok-456") {
			t.Fatalf("the token leaked into the status error: %q", st.Error)
		}
	})

	t.Run("TLS verified", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewTLSServer(http.NotFoundHandler()) // self-signed
		defer srv.Close()
		h := newHarness(t)
		h.sup.Apply(context.Background(), []mcp.ServerConfig{remote(srv.URL + "/mcp")})
		st := h.waitState(t, "remote", 10*time.Second, mcp.StateFailed)
		if !strings.Contains(st.Error, "certificate") {
			t.Fatalf("error %q, want a certificate error", st.Error)
		}
	})

	t.Run("redirects limited", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		hops := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hops++
			mu.Unlock()
			http.Redirect(w, r, "/again", http.StatusTemporaryRedirect)
		}))
		defer srv.Close()
		h := newHarness(t)
		h.sup.FailAfter = 1
		h.sup.BackoffBase = time.Hour // one attempt only
		h.sup.Apply(context.Background(), []mcp.ServerConfig{remote(srv.URL + "/mcp")})
		st := h.waitState(t, "remote", 10*time.Second, mcp.StateFailed)
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(st.Error, "stopped after 3 redirects") || hops != 4 {
			t.Fatalf("error %q after %d requests, want a stop after 3 redirects", st.Error, hops)
		}
	})

	t.Run("no redirect to another host", func(t *testing.T) {
		t.Parallel()
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("the other host got a request with headers %v", r.Header)
		}))
		defer other.Close()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/mcp", http.StatusTemporaryRedirect)
		}))
		defer srv.Close()
		h := newHarness(t)
		h.sup.Apply(context.Background(), []mcp.ServerConfig{remote(srv.URL + "/mcp")})
		st := h.waitState(t, "remote", 10*time.Second, mcp.StateFailed)
		if !strings.Contains(st.Error, "another host") {
			t.Fatalf("error %q", st.Error)
		}
	})
}
