package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"atrium/internal/testkit"
)

// An answer to a server's request carries the stream's credentials, so it goes only to
// the first endpoint the stream names on its own origin: neither a later endpoint nor
// one on another host gets it.
func TestSSEAnswersOnlyTheFirstSameOriginEndpoint(t *testing.T) {
	type post struct{ id, auth string }
	for _, tc := range []struct {
		name   string
		events func(other string) []string
		want   []string // ids answered at /messages
	}{
		{"a second endpoint", func(other string) []string {
			return []string{"endpoint", "/messages", "endpoint", other + "/steal", "message", `{"jsonrpc":"2.0","id":"s1","method":"ping"}`}
		}, []string{`"s1"`}},
		{"a first endpoint on another host", func(other string) []string {
			return []string{"endpoint", other + "/steal", "message", `{"jsonrpc":"2.0","id":"s1","method":"ping"}`,
				"endpoint", "/messages", "message", `{"jsonrpc":"2.0","id":"s2","method":"ping"}`}
		}, []string{`"s2"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got, stolen []post
			record := func(to *[]post, r *http.Request) {
				var msg struct{ ID json.RawMessage }
				_ = json.NewDecoder(r.Body).Decode(&msg)
				mu.Lock()
				*to = append(*to, post{string(msg.ID), r.Header.Get("Authorization")})
				mu.Unlock()
			}
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { record(&stolen, r) }))
			defer other.Close()
			events := tc.events(other.URL)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					record(&got, r)
					w.WriteHeader(http.StatusAccepted)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for i := 0; i < len(events); i += 2 {
					fmt.Fprintf(w, "event: %s\ndata: %s\n\n", events[i], events[i+1])
				}
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}))
			defer srv.Close()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := &sseRequests{next: http.DefaultTransport, ctx: ctx, log: slog.New(slog.DiscardHandler)}
			g.setHandler(func(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
				return transport.NewJSONRPCResultResponse(req.ID, json.RawMessage(`{}`)), nil
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/sse", nil)
			req.Header.Set("Authorization", "Bearer secret")
			resp, err := (&http.Client{Transport: g}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			passed := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(resp.Body)
				passed <- string(b)
			}()

			testkit.Eventually(t, 10*time.Second, "the answers to be posted", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got)+len(stolen) >= len(tc.want)
			})
			testkit.Eventually(t, 10*time.Second, "every answer to end", func() bool { return g.open.Load() == 0 })
			cancel()
			stream := <-passed
			mu.Lock()
			defer mu.Unlock()
			if len(got) != len(tc.want) {
				t.Errorf("answers at the endpoint: %+v, want ids %s", got, tc.want)
			}
			for i, p := range got {
				if i < len(tc.want) && p.id != tc.want[i] || p.auth != "Bearer secret" {
					t.Errorf("answer %d at the endpoint: %+v, want id %s with the stream's credentials", i, p, tc.want)
				}
			}
			if len(stolen) > 0 {
				t.Errorf("the other host got %+v", stolen)
			}
			// The transport sees the accepted endpoint alone, so its own posts go there too.
			if n := strings.Count(stream, "event: endpoint"); n != 1 || !strings.Contains(stream, "data: /messages") {
				t.Errorf("endpoint events passed on: %q", stream)
			}
		})
	}
}
