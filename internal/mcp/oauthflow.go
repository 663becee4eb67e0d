package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/errs"
)

// OAuthFlow is one authorisation in progress: started by an admin's "Connect",
// finished by the authorization server sending the browser back to the callback.
type OAuthFlow struct {
	ServerID int64
	Server   string
	UserID   int64 // the admin who started it; only they may finish it
	State    string
	Expires  time.Time

	url      string
	verifier string
	handler  *transport.OAuthHandler
	tokens   *transport.MemoryTokenStore // where handler puts the exchanged token
	// grant is the registration and metadata this flow uses, stored only with the
	// token it gets: an abandoned flow must not pair them with the old token.
	grant oauthGrant
}

// OAuthFlowTTL is how long an admin has on the provider's consent page.
const OAuthFlowTTL = 10 * time.Minute

// maxOAuthFlows bounds the flows in progress; the oldest goes first.
const maxOAuthFlows = 64

// OAuthFlows holds the flows in progress by state. Safe for concurrent use.
type OAuthFlows struct {
	mu    sync.Mutex
	flows map[string]*OAuthFlow
}

// Put keeps f until it is taken or expires.
func (fs *OAuthFlows) Put(f *OAuthFlow, now time.Time) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.flows == nil {
		fs.flows = map[string]*OAuthFlow{}
	}
	for k, old := range fs.flows {
		if now.After(old.Expires) {
			delete(fs.flows, k)
		}
	}
	for len(fs.flows) >= maxOAuthFlows {
		var oldest string
		for k, old := range fs.flows {
			if oldest == "" || old.Expires.Before(fs.flows[oldest].Expires) {
				oldest = k
			}
		}
		delete(fs.flows, oldest)
	}
	fs.flows[f.State] = f
}

// Take removes and returns the flow with state, if it is still valid and was started
// by user: a state is good for one callback only.
func (fs *OAuthFlows) Take(state string, user int64, now time.Time) (*OAuthFlow, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.flows[state]
	if !ok || state == "" {
		return nil, false
	}
	if f.UserID != user {
		// Another admin's flow stays for them: a leaked link is not theirs to use.
		return nil, false
	}
	delete(fs.flows, state)
	if now.After(f.Expires) {
		return nil, false
	}
	return f, true
}

// challenge is what a 401 said: where the protected-resource metadata is and which
// scopes the server wants.
type challenge struct {
	resourceMetadata string
	scope            string
}

// probeAuth sends an initialize without credentials and reads the 401's
// WWW-Authenticate header (RFC 9728 §5.1).
func probeAuth(ctx context.Context, hc *http.Client, cfg ServerConfig) (challenge, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize",
		"params": map[string]any{"protocolVersion": mcp.LATEST_PROTOCOL_VERSION, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "atrium", "version": "1"}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return challenge{}, err
	}
	for k, v := range cfg.Headers {
		if !strings.EqualFold(k, "Authorization") {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if cfg.Transport == TransportSSE {
		req.Method, req.Body, req.ContentLength = http.MethodGet, nil, 0
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return challenge{}, err
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	}
	resp.Body.Close() // a 200 may be an endless event stream: not read
	var ch challenge
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		if ch.resourceMetadata == "" {
			ch.resourceMetadata = authParam(h, "resource_metadata")
		}
		if ch.scope == "" {
			ch.scope = authParam(h, "scope")
		}
	}
	return ch, nil
}

// authParam returns the value of param in a WWW-Authenticate header value (quoted or
// a token), "" when absent.
func authParam(h, param string) string {
	for i := 0; i < len(h); {
		j := strings.IndexByte(h[i:], '=')
		if j < 0 {
			return ""
		}
		name := strings.TrimSpace(h[i : i+j])
		if k := strings.LastIndexAny(name, " ,\t"); k >= 0 {
			name = name[k+1:]
		}
		i += j + 1
		var val string
		if i < len(h) && h[i] == '"' {
			var b strings.Builder
			i++
			for i < len(h) && h[i] != '"' {
				if h[i] == '\\' && i+1 < len(h) {
					i++
				}
				b.WriteByte(h[i])
				i++
			}
			i++
			val = b.String()
		} else {
			k := strings.IndexAny(h[i:], ", ")
			if k < 0 {
				k = len(h) - i
			}
			val = h[i : i+k]
			i += k
		}
		if strings.EqualFold(name, param) {
			return val
		}
	}
	return ""
}

// protectedResource is the part of RFC 9728 metadata Atrium reads itself (mcp-go
// reads the rest): the scopes to ask for when neither the admin nor the 401 names any.
type protectedResource struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

func fetchProtectedResource(ctx context.Context, hc *http.Client, u string) (protectedResource, error) {
	var pr protectedResource
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return pr, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return pr, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pr, fmt.Errorf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&pr); err != nil {
		return pr, err
	}
	if len(pr.AuthorizationServers) == 0 && pr.Resource == "" {
		return pr, errors.New("not protected-resource metadata")
	}
	return pr, nil
}

// sameOrigin reports whether a and b share scheme and host.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host != "" && strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host)
}

// rootWellKnown is /.well-known/<suffix> at the root of u's origin.
func rootWellKnown(u, suffix string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Scheme + "://" + p.Host + "/.well-known/" + suffix
}

// resourceBinds reports whether resource (from protected-resource metadata) names the
// server at u: the same origin, and its path u's path or a whole-segment prefix of it.
func resourceBinds(resource, u string) bool {
	r, err1 := url.Parse(resource)
	p, err2 := url.Parse(u)
	if err1 != nil || err2 != nil || !sameOrigin(resource, u) || r.RawQuery != "" || r.Fragment != "" {
		return false
	}
	rp, up := strings.TrimSuffix(r.EscapedPath(), "/"), strings.TrimSuffix(p.EscapedPath(), "/")
	return rp == up || strings.HasPrefix(up, rp+"/")
}

// asMetadataURLs are the places of an authorization server's metadata, in the order
// the MCP spec gives: RFC 8414 with the issuer's path inserted, then OpenID Connect's.
func asMetadataURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return nil
	}
	root, path := u.Scheme+"://"+u.Host, strings.Trim(u.EscapedPath(), "/")
	if path == "" {
		return []string{root + "/.well-known/oauth-authorization-server", root + "/.well-known/openid-configuration"}
	}
	return []string{root + "/.well-known/oauth-authorization-server/" + path,
		root + "/.well-known/openid-configuration/" + path, root + "/" + path + "/.well-known/openid-configuration"}
}

// fetchIssuer fetches authorization server metadata and returns its issuer.
func fetchIssuer(ctx context.Context, hc *http.Client, u string) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var md struct {
		Issuer string `json:"issuer"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&md) != nil {
		return "", false
	}
	return md.Issuer, true
}

// fetchOK reports whether u answers a GET with 200 and a JSON object.
func fetchOK(ctx context.Context, hc *http.Client, u string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var obj map[string]json.RawMessage
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&obj) == nil
}

// wellKnownPRM is the RFC 9728 well-known metadata URL of resource u (path inserted).
func wellKnownPRM(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	path := strings.TrimSuffix(p.EscapedPath(), "/")
	p.RawQuery, p.Fragment, p.RawPath = "", "", ""
	p.Path = "/.well-known/oauth-protected-resource" + path
	return p.String()
}

// BeginOAuth starts authorising server cfg for user: it asks the server without
// credentials and follows its 401 to the protected-resource metadata and from there
// to the authorization server's metadata (mcp-go, with the spec's fallbacks), registers
// Atrium as a client where the server offers dynamic registration (or uses the client
// the admin entered), and returns the flow to keep and the provider URL to send the
// browser to (authorization code with PKCE S256, state, resource indicator, scopes).
// Errors a user can act on are errs.Invalid with a message to show.
func (s *Supervisor) BeginOAuth(ctx context.Context, cfg ServerConfig, user int64, redirectURI string) (*OAuthFlow, string, error) {
	if s.OAuth == nil {
		return nil, "", errs.E(errs.Unavailable, "OAuth is not available.")
	}
	if cfg.Transport != TransportHTTP && cfg.Transport != TransportSSE {
		return nil, "", errs.E(errs.Invalid, "Only a remote (HTTP or SSE) server can be connected with OAuth.")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*oauthTimeout)
	defer cancel()
	secrets := cfg.Secrets()
	fail := func(step string, err error) (*OAuthFlow, string, error) {
		return nil, "", errs.E(errs.Invalid, "Server %q: %s: %s", cfg.Name, step, oauthErrorText(err, secrets))
	}
	hc := newOAuthHTTPClient()
	ch, err := probeAuth(ctx, hc, cfg)
	if err != nil {
		return fail("asking the server", err)
	}
	old, _, err := s.OAuth.grantFor(ctx, cfg)
	if err != nil {
		return nil, "", err
	}

	// Protected-resource metadata (RFC 9728): where the 401 says, but only on the
	// server's own origin (a server must not point Atrium at another party's metadata),
	// else the well-known URL with the server's path, else the one at its root.
	var candidates []string
	if ch.resourceMetadata != "" && sameOrigin(ch.resourceMetadata, cfg.URL) {
		candidates = append(candidates, ch.resourceMetadata)
	}
	candidates = append(candidates, wellKnownPRM(cfg.URL), rootWellKnown(cfg.URL, "oauth-protected-resource"))
	var pr protectedResource
	g := oauthGrant{URL: cfg.URL, RedirectURI: redirectURI}
	for _, u := range candidates {
		if p, err := fetchProtectedResource(ctx, hc, u); err == nil {
			pr, g.ResourceMetadataURL = p, u
			break
		}
	}
	if g.ResourceMetadataURL != "" && pr.Resource != "" && strings.TrimSuffix(pr.Resource, "/") != strings.TrimSuffix(cfg.URL, "/") {
		// The metadata names a resource above the server's URL (its origin, say).
		// mcp-go takes a metadata URL it is given only for exactly the server's URL, so
		// Atrium checks the binding itself and hands mcp-go the authorization server's
		// metadata instead (issuer checked as RFC 8414 §3.3 asks).
		if !resourceBinds(pr.Resource, cfg.URL) {
			return nil, "", errs.E(errs.Invalid, "Server %q: its metadata declares the resource %q, which is not this server (%s).", cfg.Name, capString(pr.Resource, 200), cfg.URL)
		}
		if len(pr.AuthorizationServers) > 0 {
			issuer := pr.AuthorizationServers[0]
			for _, u := range asMetadataURLs(issuer) {
				if iss, ok := fetchIssuer(ctx, hc, u); ok {
					if strings.TrimSuffix(iss, "/") != strings.TrimSuffix(issuer, "/") {
						return nil, "", errs.E(errs.Invalid, "Server %q: the authorization server's metadata names the issuer %q, not %q.", cfg.Name, capString(iss, 200), capString(issuer, 200))
					}
					g.AuthServerMetadataURL, g.ResourceMetadataURL, g.Resource = u, "", pr.Resource
					break
				}
			}
		}
	}
	if g.ResourceMetadataURL == "" && g.AuthServerMetadataURL == "" {
		// No protected-resource metadata: the 2025-03-26 spec's discovery, the
		// authorization server's metadata at the root of the server's origin (mcp-go
		// looks under the server's path, then falls back to /authorize, /token, /register).
		if u := rootWellKnown(cfg.URL, "oauth-authorization-server"); fetchOK(ctx, hc, u) {
			g.AuthServerMetadataURL = u
		}
	}
	g.Scopes = cfg.OAuthScopes
	if len(g.Scopes) == 0 && ch.scope != "" {
		g.Scopes = strings.Fields(ch.scope)
	}
	if len(g.Scopes) == 0 {
		g.Scopes = pr.ScopesSupported
	}
	if len(old.Required) > 0 {
		// Step-up (stepup.go): what was granted, and what the server now requires.
		g.Scopes = union(union(old.grantedScopes(), g.Scopes), old.Required)
	}
	switch {
	case cfg.OAuthClientID != "":
		g.ClientID, g.ClientSecret = cfg.OAuthClientID, cfg.OAuthClientSecret
	case old.Registered && old.RedirectURI == redirectURI && old.ClientID != "":
		g.ClientID, g.ClientSecret, g.AuthMethod, g.Registered = old.ClientID, old.ClientSecret, old.AuthMethod, true
	}
	tokens := transport.NewMemoryTokenStore()
	conf := s.oauthConfig(cfg, g)
	conf.TokenStore = tokens
	h := transport.NewOAuthHandler(conf)
	h.SetBaseURL(cfg.URL)
	md, err := h.GetServerMetadata(ctx)
	if err != nil {
		return fail("discovering its authorization server", err)
	}
	if len(md.CodeChallengeMethodsSupported) > 0 && !slices.Contains(md.CodeChallengeMethodsSupported, "S256") {
		return nil, "", errs.E(errs.Invalid, "Server %q: its authorization server does not support PKCE with S256, which OAuth 2.1 requires.", cfg.Name)
	}
	if g.ClientID == "" {
		if md.RegistrationEndpoint == "" {
			return nil, "", errs.E(errs.Invalid, "Server %q: its authorization server offers no dynamic client registration. Register Atrium with the provider (redirect URI %s) and enter the client ID and secret on the server's form.", cfg.Name, redirectURI)
		}
		if err := h.RegisterClient(ctx, "Atrium"); err != nil {
			return fail("registering Atrium as a client", err)
		}
		if h.GetClientID() == "" {
			return nil, "", errs.E(errs.Invalid, "Server %q: registering Atrium as a client: the answer has no client_id.", cfg.Name)
		}
		g.ClientID, g.ClientSecret, g.AuthMethod, g.Registered = h.GetClientID(), h.GetClientSecret(), h.GetTokenEndpointAuthMethod(), true
	}
	verifier, err := transport.GenerateCodeVerifier()
	if err != nil {
		return nil, "", err
	}
	state, err := transport.GenerateState()
	if err != nil {
		return nil, "", err
	}
	authURL, err := h.GetAuthorizationURL(ctx, state, transport.GenerateCodeChallenge(verifier))
	if err != nil {
		return fail("building the authorization URL", err)
	}
	// The browser is sent there by a link and a meta refresh: only the web will do
	// (mcp-go checks the endpoints from metadata, not those it makes up for a server
	// named in authorization_servers).
	if u, err := url.Parse(authURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		scheme := ""
		if err == nil {
			scheme = u.Scheme
		}
		return nil, "", errs.E(errs.Invalid, "Server %q: its authorization endpoint is not an http or https URL (scheme %q); Atrium will not send the browser there.", cfg.Name, capString(scheme, 40))
	}
	if g.Resource != "" && !strings.Contains(authURL, "&resource=") {
		authURL += "&resource=" + url.QueryEscape(g.Resource)
	}
	f := &OAuthFlow{ServerID: cfg.ID, Server: cfg.Name, UserID: user, State: state, Expires: s.Now().Add(OAuthFlowTTL),
		url: cfg.URL, verifier: verifier, handler: h, tokens: tokens, grant: g}
	return f, authURL, nil
}

// FinishOAuth exchanges the authorization code of f (the callback checked its state)
// for tokens with the PKCE verifier, stores them sealed and reconnects the server.
func (s *Supervisor) FinishOAuth(ctx context.Context, f *OAuthFlow, code string) error {
	if code == "" {
		return errs.E(errs.Invalid, "The authorization server sent no code back.")
	}
	ctx, cancel := context.WithTimeout(ctx, oauthTimeout)
	defer cancel()
	if err := f.handler.ProcessAuthorizationResponse(ctx, code, f.State, f.verifier); err != nil {
		// mcp-go quotes the token endpoint's answer, which might echo what was sent.
		msg := oauthErrorText(err, []string{f.verifier, code, f.handler.GetClientSecret()})
		return errs.E(errs.Invalid, "Server %q: exchanging the code for a token failed: %s", f.Server, msg)
	}
	t, err := f.tokens.GetToken(ctx)
	if err != nil {
		return err
	}
	tok, err := storableToken(t)
	if err != nil {
		return errs.E(errs.Invalid, "Server %q: exchanging the code for a token failed: %s", f.Server, err)
	}
	if u, ok := s.runningURL(f.ServerID); ok && u != f.url {
		return errs.E(errs.Invalid, "Server %q: its URL changed during the authorisation; Connect again.", f.Server)
	}
	// The registration and the token it was issued to, together. The new grant holds
	// what a step-up asked for (or the server will say so again).
	if err := s.OAuth.update(ctx, f.ServerID, func(g *oauthGrant) error {
		*g = f.grant
		g.Token = tok
		return nil
	}); err != nil {
		return err
	}
	s.log.Info("mcp: oauth authorised", "mcp_server", f.Server)
	s.Reconnect(f.Server)
	return nil
}
