// Package oauthtest is an OAuth-protected MCP server for tests: mcp-go's streamable
// HTTP server behind bearer-token checks, and beside it a minimal OAuth 2.1
// authorization server (RFC 9728 protected-resource metadata, RFC 8414 metadata,
// RFC 7591 dynamic registration, authorization code with a consent page and a PKCE
// S256 check, RFC 8707 resource indicators, refresh tokens with rotation). It is real
// HTTP on a loopback port; the tests reach it the way Atrium reaches any provider.
package oauthtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Scope is the scope the server asks for at first.
const Scope = "mcp:tools"

// WriteScope is the scope tools/call needs when Server.StepUp is set.
const WriteScope = "mcp:write"

// Server is a running OAuth-protected MCP server. Its fields after URL may be changed
// while it runs.
type Server struct {
	URL    string // the MCP endpoint (…/mcp), also the resource identifier (see ResourceAtOrigin)
	Issuer string // the authorization server (the same origin)

	TokenTTL    atomic.Int64 // access token lifetime in seconds; default 3600
	FailRefresh atomic.Bool  // refresh requests get invalid_grant
	// ErrorPadding is how many bytes of filler come before the refresh token that a
	// refused refresh echoes in its error_description.
	ErrorPadding atomic.Int32
	AutoApprove  atomic.Bool // /authorize redirects at once instead of showing the consent page
	// OpenHandshake lets initialize (and its notification) through without a token, as
	// some servers do; everything after it still needs one.
	OpenHandshake atomic.Bool
	// StepUp makes tools/call need WriteScope as well: a token without it gets 403
	// insufficient_scope naming both scopes (step-up authorisation).
	StepUp atomic.Bool
	// NeverEnough answers every tools/call with 403 insufficient_scope naming only
	// Scope, which the token holds: a requirement no re-authorisation meets.
	NeverEnough atomic.Bool
	// ResourceAtOrigin makes the metadata name the origin (Issuer) as the resource, as
	// servers mounted under a path often do; authorization and token requests must
	// then name it.
	ResourceAtOrigin atomic.Bool

	Refreshes    atomic.Int32 // successful refresh grants
	RefreshTries atomic.Int32 // refresh grant requests, refused ones too
	Exchanges    atomic.Int32 // successful code exchanges
	Rejected     atomic.Int32 // MCP requests refused with 401 although they carried a token
	Registrated  atomic.Int32 // dynamic registrations
	Authorized   atomic.Int32 // codes issued (authorisations the admin went through)
	Forbidden    atomic.Int32 // MCP requests refused with 403 insufficient_scope

	mu      sync.Mutex
	clients map[string][]string  // client id → redirect URIs
	codes   map[string]codeGrant // one-time codes
	access  map[string]time.Time // access token → expiry
	scopes  map[string]string    // access or refresh token → the scope granted
	refresh map[string]string    // refresh token → client id (rotated on use)
	scope   string               // the scope asked for at the last /authorize
	tokens  []string             // every token issued, for leak checks
}

type codeGrant struct {
	client, redirect, challenge, resource, scope string
}

// Start runs a server until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{clients: map[string][]string{}, codes: map[string]codeGrant{},
		access: map[string]time.Time{}, refresh: map[string]string{}, scopes: map[string]string{}}
	s.TokenTTL.Store(3600)

	ms := server.NewMCPServer("oauth-test", "1.0.0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("whoami", mcp.WithDescription("Says who is signed in."),
		mcp.WithString("greeting", mcp.Description("A word to echo back"))),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("signed in as tester; " + req.GetString("greeting", "hello")), nil
		})
	mcpHandler := server.NewStreamableHTTPServer(ms)

	mux := http.NewServeMux()
	hs := httptest.NewServer(mux)
	tb.Cleanup(hs.Close)
	s.Issuer = hs.URL
	s.URL = hs.URL + "/mcp"
	prm := hs.URL + "/.well-known/oauth-protected-resource/mcp"

	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && s.OpenHandshake.Load() && r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(body, &msg) == nil && (msg.Method == "initialize" || msg.Method == "notifications/initialized") {
				mcpHandler.ServeHTTP(w, r)
				return
			}
		}
		if !ok || !s.validAccess(tok) {
			if ok {
				s.Rejected.Add(1)
			}
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+prm+`", scope="`+Scope+`"`)
			http.Error(w, `{"error":"invalid_token"}`, http.StatusUnauthorized)
			return
		}
		if need := s.needs(r, tok); need != "" {
			s.Forbidden.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+need+`", resource_metadata="`+prm+`"`)
			http.Error(w, `{"error":"insufficient_scope"}`, http.StatusForbidden)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"resource": s.resource(), "authorization_servers": []string{s.Issuer},
			"scopes_supported": []string{Scope}})
	})
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"issuer": s.Issuer,
			"authorization_endpoint": s.Issuer + "/authorize", "token_endpoint": s.Issuer + "/token",
			"registration_endpoint": s.Issuer + "/register", "response_types_supported": []string{"code"},
			"grant_types_supported":            []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"none"},
			"scopes_supported": []string{Scope}})
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /register", s.register)
	mux.HandleFunc("GET /authorize", s.authorize)
	mux.HandleFunc("POST /authorize", s.approve)
	mux.HandleFunc("POST /token", s.token)
	return s
}

// resource is the resource identifier the metadata names (RFC 8707, RFC 9728).
func (s *Server) resource() string {
	if s.ResourceAtOrigin.Load() {
		return s.Issuer
	}
	return s.URL
}

// needs returns the scope a tools/call request lacks with token tok (as the 403's
// scope parameter), "" when it may go through.
func (s *Server) needs(r *http.Request, tok string) string {
	if r.Method != http.MethodPost || !s.StepUp.Load() && !s.NeverEnough.Load() {
		return ""
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
		return ""
	}
	if s.NeverEnough.Load() {
		return Scope
	}
	s.mu.Lock()
	granted := strings.Fields(s.scopes[tok])
	s.mu.Unlock()
	if !slices.Contains(granted, WriteScope) {
		return Scope + " " + WriteScope
	}
	return ""
}

// LastScope is the scope asked for at the last authorization request.
func (s *Server) LastScope() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scope
}

// Tokens returns every access and refresh token issued so far.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tokens)
}

// RevokeAccess makes every access token issued so far invalid (the refresh tokens stay
// good): the next MCP request gets a 401 although its token has not expired.
func (s *Server) RevokeAccess() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
}

func (s *Server) validAccess(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.access[tok]
	return ok && time.Now().Before(exp)
}

func random() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || len(req.RedirectURIs) == 0 {
		oauthError(w, http.StatusBadRequest, "invalid_client_metadata", "redirect_uris required")
		return
	}
	id := "client-" + random()
	s.mu.Lock()
	s.clients[id] = req.RedirectURIs
	s.mu.Unlock()
	s.Registrated.Add(1)
	writeJSON(w, http.StatusCreated, map[string]any{"client_id": id, "redirect_uris": req.RedirectURIs,
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"}})
}

// checkAuthorize validates an authorization request; it returns a message for a
// request that must not go back to its redirect URI.
func (s *Server) checkAuthorize(q url.Values) string {
	s.mu.Lock()
	uris, ok := s.clients[q.Get("client_id")]
	s.mu.Unlock()
	switch {
	case !ok:
		return "unknown client"
	case !slices.Contains(uris, q.Get("redirect_uri")):
		return "redirect_uri not registered"
	case q.Get("response_type") != "code":
		return "response_type must be code"
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		return "PKCE S256 required"
	case q.Get("resource") != s.resource():
		return "resource must be " + s.resource()
	case q.Get("state") == "":
		return "state required"
	}
	return ""
}

var consentPage = template.Must(template.New("consent").Parse(`<!doctype html>
<html><head><title>Test provider: consent</title></head><body>
<h1>Allow Atrium to use the test MCP server?</h1>
<p>Scopes: {{.Get "scope"}}</p>
<form method="post" action="/authorize">
{{range $k, $v := .}}<input type="hidden" name="{{$k}}" value="{{index $v 0}}">
{{end}}<button type="submit" id="approve">Approve</button>
</form></body></html>`))

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if msg := s.checkAuthorize(q); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	if s.AutoApprove.Load() {
		s.redirectWithCode(w, r, q)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = consentPage.Execute(w, q)
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	if msg := s.checkAuthorize(r.PostForm); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	s.redirectWithCode(w, r, r.PostForm)
}

func (s *Server) redirectWithCode(w http.ResponseWriter, r *http.Request, q url.Values) {
	code := "code-" + random()
	s.Authorized.Add(1)
	s.mu.Lock()
	s.scope = q.Get("scope")
	s.codes[code] = codeGrant{client: q.Get("client_id"), redirect: q.Get("redirect_uri"),
		challenge: q.Get("code_challenge"), resource: q.Get("resource"), scope: q.Get("scope")}
	s.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "bad form")
		return
	}
	f := r.PostForm
	client := f.Get("client_id")
	s.mu.Lock()
	_, known := s.clients[client]
	s.mu.Unlock()
	if !known {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "unknown client")
		return
	}
	if f.Get("resource") != s.resource() {
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource must be "+s.resource())
		return
	}
	switch f.Get("grant_type") {
	case "authorization_code":
		s.mu.Lock()
		g, ok := s.codes[f.Get("code")]
		delete(s.codes, f.Get("code"))
		s.mu.Unlock()
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		switch {
		case !ok || g.client != client:
			oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown code")
		case g.redirect != f.Get("redirect_uri"):
			oauthError(w, http.StatusBadRequest, "invalid_grant", "redirect_uri differs")
		case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
			oauthError(w, http.StatusBadRequest, "invalid_grant", "PKCE verification failed")
		default:
			s.Exchanges.Add(1)
			s.issue(w, client, g.scope)
		}
	case "refresh_token":
		s.RefreshTries.Add(1)
		s.mu.Lock()
		owner, ok := s.refresh[f.Get("refresh_token")]
		scope := s.scopes[f.Get("refresh_token")]
		if ok {
			delete(s.refresh, f.Get("refresh_token"))
		}
		s.mu.Unlock()
		if !ok || owner != client || s.FailRefresh.Load() {
			// Echoes the token, as careless servers do: Atrium must not show it.
			pad := strings.Repeat("x", int(s.ErrorPadding.Load()))
			oauthError(w, http.StatusBadRequest, "invalid_grant", pad+"refresh token "+f.Get("refresh_token")+" not valid")
			return
		}
		s.Refreshes.Add(1)
		s.issue(w, client, scope)
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "")
	}
}

func (s *Server) issue(w http.ResponseWriter, client, scope string) {
	ttl := s.TokenTTL.Load()
	at, rt := "at-"+random(), "rt-"+random()
	if scope == "" {
		scope = Scope
	}
	s.mu.Lock()
	s.access[at] = time.Now().Add(time.Duration(ttl) * time.Second)
	s.scopes[at], s.scopes[rt] = scope, scope
	s.refresh[rt] = client
	s.tokens = append(s.tokens, at, rt)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": ttl,
		"refresh_token": rt, "scope": scope})
}
