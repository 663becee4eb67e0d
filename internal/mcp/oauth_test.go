package mcp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/mcp"
	"atrium/internal/mcp/oauthtest"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/tools"
)

// oauthHarness is a supervisor with OAuth grants in a real database file.
type oauthHarness struct {
	*harness
	db      *store.DB
	dir     string
	configs *mcp.ConfigStore
}

func newOAuthHarness(t *testing.T) *oauthHarness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(ctx, filepath.Join(dir, "atrium.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	master := make([]byte, crypto.KeySize)
	_, _ = rand.Read(master)
	keys, err := crypto.NewKeyring(ctx, master, db)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.sup.OAuth = &mcp.OAuthStore{Rows: db, Keys: keys}
	return &oauthHarness{harness: h, db: db, dir: dir, configs: &mcp.ConfigStore{Rows: db, Keys: keys}}
}

// add saves a remote server for as and applies it.
func (h *oauthHarness) add(t *testing.T, name, u string) mcp.ServerConfig {
	t.Helper()
	cfg := mcp.ServerConfig{Name: name, Transport: mcp.TransportHTTP, URL: u, Enabled: true}
	if err := h.configs.Save(context.Background(), &cfg); err != nil {
		t.Fatal(err)
	}
	h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
	return cfg
}

// authorize runs the browser's part of the flow with a plain HTTP client: the test
// provider approves at once and redirects to the callback with a code and the state.
func (h *oauthHarness) authorize(t *testing.T, cfg mcp.ServerConfig, as *oauthtest.Server) {
	t.Helper()
	ctx := context.Background()
	as.AutoApprove.Store(true)
	flow, authURL, err := h.sup.BeginOAuth(ctx, cfg, 1, "http://127.0.0.1:9/settings/mcp/oauth/callback")
	if err != nil {
		t.Fatal(err)
	}
	code := followToCallback(t, authURL, flow.State)
	if err := h.sup.FinishOAuth(ctx, flow, code); err != nil {
		t.Fatal(err)
	}
}

// followToCallback opens authURL without following the redirect back and returns
// the code, checking that the state came back unchanged.
func followToCallback(t *testing.T, authURL, state string) string {
	t.Helper()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("authorize: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	if got := back.Query().Get("state"); got != state {
		t.Fatalf("state came back as %q, want %q", got, state)
	}
	return back.Query().Get("code")
}

func TestOAuthConnectAndCall(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)

	st := h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	if st.Auth != mcp.AuthConnect || !strings.Contains(st.Error, "Connect") {
		t.Fatalf("before authorising: auth %q, error %q", st.Auth, st.Error)
	}
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	res := h.call(t, "prov__whoami", map[string]any{"greeting": "hi"})
	if res.IsError || !strings.Contains(res.Content, "signed in as tester; hi") {
		t.Fatalf("call: %+v", res)
	}
	if as.Registrated.Load() != 1 || as.Exchanges.Load() != 1 {
		t.Errorf("registrations %d, code exchanges %d; want 1 each", as.Registrated.Load(), as.Exchanges.Load())
	}

	// The tokens are in the database only sealed (closed first, so the WAL is checkpointed).
	h.sup.Close()
	h.db.Close()
	tokens := as.Tokens()
	if len(tokens) < 2 {
		t.Fatalf("tokens issued: %d", len(tokens))
	}
	files, _ := filepath.Glob(filepath.Join(h.dir, "atrium.db*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range tokens {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("%s holds the token %s in plaintext", filepath.Base(f), tok[:6])
			}
		}
	}
}

// TestOAuthAfterOpenHandshake: a server that lets initialize through and answers 401
// to the listing needs authorisation too (it failed as "list tools: authorization
// required" before).
func TestOAuthAfterOpenHandshake(t *testing.T) {
	as := oauthtest.Start(t)
	as.OpenHandshake.Store(true)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	if st := h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized, mcp.StateFailed); st.State != mcp.StateUnauthorized {
		t.Fatalf("state %s (%s), want unauthorized", st.State, st.Error)
	}
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	if res := h.call(t, "prov__whoami", map[string]any{}); res.IsError {
		t.Fatalf("call: %+v", res)
	}
}

func TestOAuthRefreshesBeforeExpiry(t *testing.T) {
	as := oauthtest.Start(t)
	as.TokenTTL.Store(6) // refreshed 2 s before it expires
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, "a refresh", func() bool {
		if res := h.call(t, "prov__whoami", map[string]any{}); res.IsError {
			t.Fatalf("call failed: %+v", res)
		}
		return as.Refreshes.Load() > 0
	})
	if as.Rejected.Load() != 0 {
		t.Errorf("the server refused %d requests: the token was not refreshed before it expired", as.Rejected.Load())
	}
	if el := time.Since(start); el > 5*time.Second && as.Refreshes.Load() == 0 {
		t.Errorf("no refresh within %s", el)
	}
}

func TestOAuthRefreshesOn401(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	as.RevokeAccess() // valid for another hour, but the server no longer takes it
	res := h.call(t, "prov__whoami", map[string]any{"greeting": "again"})
	if res.IsError || !strings.Contains(res.Content, "again") {
		t.Fatalf("call after the token was refused: %+v", res)
	}
	if as.Refreshes.Load() != 1 || as.Rejected.Load() == 0 {
		t.Errorf("refreshes %d, refused %d; want 1 refresh after a refusal", as.Refreshes.Load(), as.Rejected.Load())
	}
	if st := h.status("prov"); st.State != mcp.StateReady {
		t.Errorf("state %s after the refresh", st.State)
	}
}

func TestOAuthFailedRefreshAsksToReauthorise(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	as.FailRefresh.Store(true)
	as.RevokeAccess()
	if res := h.call(t, "prov__whoami", map[string]any{}); !res.IsError {
		t.Fatalf("call with a refused token and no refresh: %+v", res)
	}
	st := h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	if st.Auth != mcp.AuthReauthorize || !strings.Contains(st.Error, "re-authorise") || !strings.Contains(st.Error, "invalid_grant") {
		t.Fatalf("after the refresh failed: auth %q, error %q", st.Auth, st.Error)
	}
	for _, tok := range as.Tokens() {
		if strings.Contains(st.Error, tok) {
			t.Fatalf("the card shows a token: %q", st.Error)
		}
	}

	// Authorising again brings it back, with the same registration.
	as.FailRefresh.Store(false)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	if res := h.call(t, "prov__whoami", map[string]any{}); res.IsError {
		t.Fatalf("call after re-authorising: %+v", res)
	}
	if as.Registrated.Load() != 1 {
		t.Errorf("%d registrations; the first one should be reused", as.Registrated.Load())
	}
}

// TestOAuthHostileServers: what an MCP server or its authorization server sends is
// bounded and checked, and a failure says what went wrong.
func TestOAuthHostileServers(t *testing.T) {
	huge := strings.Repeat(" ", 300<<10) + "{}"
	cases := []struct {
		name    string
		prm     func(self, other string) string // protected-resource metadata, "" = 404
		asMeta  func(self string) string        // authorization server metadata, "" = 404
		wantErr string
	}{
		{"metadata on another origin is not followed",
			func(self, other string) string { return "" },
			func(self string) string { return "" },
			// Without metadata the 2025-03-26 fallback (/authorize, /token, /register on the
			// server's origin) is tried; this server has none of them.
			"registering Atrium as a client: registration request failed with status 404"},
		{"huge metadata",
			func(self, other string) string {
				return `{"resource":"` + self + `/mcp","authorization_servers":["` + self + `"]}`
			},
			func(self string) string { return huge },
			// The document is cut at 256 KiB, unusable, so the fallback endpoints are tried.
			"registering Atrium as a client: registration request failed with status 404"},
		{"malformed metadata",
			func(self, other string) string { return `{"resource": [` },
			func(self string) string { return "" },
			"discovering its authorization server"},
		{"javascript: endpoint",
			func(self, other string) string {
				return `{"resource":"` + self + `/mcp","authorization_servers":["` + self + `"]}`
			},
			func(self string) string {
				return `{"issuer":"` + self + `","authorization_endpoint":"javascript:alert(1)","token_endpoint":"` + self + `/token","response_types_supported":["code"]}`
			},
			// Refused (never put in a link), so the fallback endpoints are tried.
			"registering Atrium as a client: registration request failed with status 404"},
		{"no dynamic registration",
			func(self, other string) string {
				return `{"resource":"` + self + `/mcp","authorization_servers":["` + self + `"]}`
			},
			func(self string) string {
				return `{"issuer":"` + self + `","authorization_endpoint":"` + self + `/authorize","token_endpoint":"` + self + `/token","response_types_supported":["code"],"code_challenge_methods_supported":["S256"]}`
			},
			"enter the client ID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// other serves perfectly good metadata for an authorization server the
			// MCP server has no business sending Atrium to.
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, `{"resource":"x","authorization_servers":["http://evil.invalid"]}`)
			}))
			defer other.Close()
			var self string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/mcp":
					w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+other.URL+`/.well-known/oauth-protected-resource"`)
					w.WriteHeader(http.StatusUnauthorized)
				case strings.HasPrefix(r.URL.Path, "/.well-known/oauth-protected-resource"):
					if b := tc.prm(self, other.URL); b != "" {
						fmt.Fprint(w, b)
						return
					}
					http.NotFound(w, r)
				case strings.HasPrefix(r.URL.Path, "/.well-known/"):
					if b := tc.asMeta(self); b != "" {
						fmt.Fprint(w, b)
						return
					}
					http.NotFound(w, r)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			self = srv.URL
			h := newOAuthHarness(t)
			cfg := h.add(t, "hostile", srv.URL+"/mcp")
			h.waitState(t, "hostile", 20*time.Second, mcp.StateUnauthorized)
			_, authURL, err := h.sup.BeginOAuth(context.Background(), cfg, 1, "http://127.0.0.1:9/cb")
			if err == nil {
				t.Fatalf("BeginOAuth succeeded with %s", authURL)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want it to mention %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "evil.invalid") {
				t.Fatalf("followed the metadata on another origin: %q", err)
			}
			if len(err.Error()) > 600 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		})
	}
}

func TestOAuthFlowsAreOneTimeAndPerUser(t *testing.T) {
	var fs mcp.OAuthFlows
	now := time.Now()
	fs.Put(&mcp.OAuthFlow{State: "s1", UserID: 1, Expires: now.Add(time.Minute)}, now)
	fs.Put(&mcp.OAuthFlow{State: "s2", UserID: 1, Expires: now.Add(-time.Second)}, now.Add(-time.Minute))
	if _, ok := fs.Take("s1", 2, now); ok {
		t.Fatal("another user took the flow")
	}
	if _, ok := fs.Take("s1", 1, now); !ok {
		t.Fatal("the user who started it could not finish it")
	}
	if _, ok := fs.Take("s1", 1, now); ok {
		t.Fatal("a state was good twice")
	}
	if _, ok := fs.Take("s2", 1, now); ok {
		t.Fatal("an expired flow was taken")
	}
	if _, ok := fs.Take("", 1, now); ok {
		t.Fatal("an empty state matched")
	}
}

// TestOAuthConcurrent401sRefreshOnce: calls that the server refuses together share one
// refresh. The authorization server rotates refresh tokens, so before they did, each
// call sent the same refresh token, all but one got invalid_grant, and the last
// failure overwrote the success: the calls failed and the card asked to re-authorise.
func TestOAuthConcurrent401sRefreshOnce(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	if res := h.call(t, "prov__whoami", map[string]any{}); res.IsError {
		t.Fatalf("first call: %+v", res)
	}

	as.RevokeAccess()
	var wg sync.WaitGroup
	results := make([]tools.Result, 8)
	for i := range results {
		wg.Go(func() { results[i] = h.call(t, "prov__whoami", map[string]any{"greeting": fmt.Sprint(i)}) })
	}
	wg.Wait()
	for i, res := range results {
		if res.IsError || !strings.Contains(res.Content, "; "+fmt.Sprint(i)) {
			t.Errorf("call %d: %+v", i, res)
		}
	}
	if n := as.RefreshTries.Load(); n != 1 {
		t.Errorf("%d refresh requests reached the authorization server, want 1", n)
	}
	if st := h.status("prov"); st.State != mcp.StateReady || st.Auth != "" {
		t.Errorf("after the refresh: state %s, auth %q, error %q", st.State, st.Auth, st.Error)
	}
}

// TestOAuthAbandonedConnectKeepsGrant: a Connect left on the provider's page changes
// nothing stored. It used to save its new registration (another redirect URI, so
// another client) at once beside the old token: after a restart the refresh went out
// as a client the token was never issued to, was refused, and the working grant was
// lost.
func TestOAuthAbandonedConnectKeepsGrant(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	// Connect through another host name, and the tab closed on the consent page.
	ctx := context.Background()
	if _, _, err := h.sup.BeginOAuth(ctx, cfg, 1, "http://atrium.lan:8080/settings/mcp/oauth/callback"); err != nil {
		t.Fatal(err)
	}
	if n := as.Registrated.Load(); n != 2 {
		t.Fatalf("%d registrations, want a second one for the other redirect URI", n)
	}
	h.sup.Apply(ctx, nil) // disabled and enabled again: a new connection from the stored grant
	h.sup.Apply(ctx, []mcp.ServerConfig{cfg})
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	as.RevokeAccess()
	if res := h.call(t, "prov__whoami", map[string]any{}); res.IsError {
		t.Fatalf("call after the token was refused: %+v", res)
	}
	if st := h.status("prov"); as.Refreshes.Load() != 1 || st.State != mcp.StateReady {
		t.Errorf("refreshes %d, state %s (%s); want the old grant refreshed", as.Refreshes.Load(), st.State, st.Error)
	}
}

// TestOAuthResourceAtOrigin: where the metadata names a resource above the server's
// URL, the code exchange and the refresh name it too (RFC 8707; the MCP spec requires
// it on token requests), not only the authorization URL. Before, the token requests
// went without it, and this authorization server refused the exchange.
func TestOAuthResourceAtOrigin(t *testing.T) {
	as := oauthtest.Start(t)
	as.ResourceAtOrigin.Store(true)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	as.RevokeAccess()
	if res := h.call(t, "prov__whoami", map[string]any{}); res.IsError {
		t.Fatalf("call after the token was refused: %+v", res)
	}
	if as.Exchanges.Load() != 1 || as.Refreshes.Load() != 1 {
		t.Errorf("code exchanges %d, refreshes %d; want 1 each", as.Exchanges.Load(), as.Refreshes.Load())
	}
}

// TestOAuthCutErrorHidesToken: an authorization server's error is redacted before it
// is cut to fit the card. Cut first, a token echoed across the cut lost its end, no
// longer matched, and its first part was shown.
func TestOAuthCutErrorHidesToken(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	// mcp-go's "refresh token request failed: OAuth error: invalid_grant - " is some
	// 60 bytes, so the echoed refresh token (35) starts near byte 290 of the error and
	// the cut at 300 goes through it.
	as.ErrorPadding.Store(215)
	as.FailRefresh.Store(true)
	as.RevokeAccess()
	if res := h.call(t, "prov__whoami", map[string]any{}); !res.IsError {
		t.Fatalf("call with a refused token and no refresh: %+v", res)
	}
	st := h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	if !strings.Contains(st.Error, "xxxxx") || !strings.Contains(st.Error, "…") {
		t.Fatalf("the error was not cut after the padding: %q", st.Error)
	}
	for _, tok := range as.Tokens() {
		if strings.Contains(st.Error, tok[:8]) {
			t.Fatalf("the card shows the start of a token (%s): %q", tok[:8], st.Error)
		}
	}
}
