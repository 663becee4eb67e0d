package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"atrium/internal/crypto"
	"atrium/internal/errs"
)

// OAuth 2.1 for remote servers, as the MCP authorization spec describes it. A server
// that answers 401 needs an admin to "Connect" it (oauthflow.go: discovery, dynamic
// client registration, authorization code with PKCE in the admin's browser). What that
// yields, the client registration and the tokens, is one grant per server, sealed with
// the instance data key in its own row (tokens change on every refresh, the server's
// configuration does not). mcp-go's OAuth handler puts the access token on every
// request and refreshes it through the TokenStore below; Atrium refreshes early (before
// expiry), once more when the server answers 401 anyway, and shows "re-authorise" on
// the card when the refresh fails. Tokens are never logged, shown or exported.

// OAuthRows is what the grants need of the database.
type OAuthRows interface {
	MCPOAuth(ctx context.Context, serverID int64) ([]byte, error)
	SaveMCPOAuth(ctx context.Context, serverID int64, sealed []byte) error
	DeleteMCPOAuth(ctx context.Context, serverID int64) error
}

// OAuthStore keeps the servers' sealed grants. Safe for concurrent use.
type OAuthStore struct {
	Rows OAuthRows
	Keys Sealer

	mu sync.Mutex // serialises read-modify-write of a grant
	// refreshing holds one lock per server: refresh tokens rotate, so two refreshes
	// with the same one would leave one of them refused.
	refreshing map[int64]*sync.Mutex
}

// refreshLock is server id's refresh lock.
func (st *OAuthStore) refreshLock(id int64) *sync.Mutex {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.refreshing == nil {
		st.refreshing = map[int64]*sync.Mutex{}
	}
	if st.refreshing[id] == nil {
		st.refreshing[id] = &sync.Mutex{}
	}
	return st.refreshing[id]
}

// oauthGrant is what one server's "Connect" yielded, sealed as JSON.
type oauthGrant struct {
	URL          string `json:"url"` // the server URL it is for; another URL ignores it
	RedirectURI  string `json:"redirect_uri,omitempty"`
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
	AuthMethod   string `json:"auth_method,omitempty"`
	// Registered says ClientID came from dynamic registration (reused while the URL and
	// redirect URI stay the same), not from the admin's form.
	Registered          bool     `json:"registered,omitempty"`
	Scopes              []string `json:"scopes,omitempty"`
	ResourceMetadataURL string   `json:"resource_metadata_url,omitempty"`
	// AuthServerMetadataURL is set when there was no protected-resource metadata and
	// the authorization server's was found at the server's root (2025-03-26 discovery).
	AuthServerMetadataURL string `json:"auth_server_metadata_url,omitempty"`
	// Resource is the RFC 8707 resource indicator Atrium sends itself, on the
	// authorization URL and every token request: set when the metadata names a
	// resource above the server's URL, which mcp-go is not told about.
	Resource string           `json:"resource,omitempty"`
	Token    *transport.Token `json:"token,omitempty"`
	// Failed is why the last refresh failed; the admin must authorise again.
	Failed string `json:"failed,omitempty"`
	// Required are scopes the server asked for with a 403 insufficient_scope that the
	// grant lacks (step-up, stepup.go); the next Connect asks for them too.
	Required []string `json:"required_scopes,omitempty"`
}

// OAuthAD binds a server's sealed grant to its row.
func OAuthAD(id int64) []byte {
	return crypto.AD("mcp_server", strconv.FormatInt(id, 10), "oauth")
}

// load returns server id's grant; ok is false when it has none.
func (st *OAuthStore) load(ctx context.Context, id int64) (g oauthGrant, ok bool, err error) {
	sealed, err := st.Rows.MCPOAuth(ctx, id)
	if errs.Is(err, errs.NotFound) {
		return oauthGrant{}, false, nil
	}
	if err != nil {
		return oauthGrant{}, false, err
	}
	plain, err := st.Keys.Open(ctx, 0, sealed, OAuthAD(id))
	if err != nil {
		return oauthGrant{}, false, fmt.Errorf("mcp: oauth grant: %w", err)
	}
	if err := json.Unmarshal(plain, &g); err != nil {
		return oauthGrant{}, false, fmt.Errorf("mcp: oauth grant: %w", err)
	}
	return g, true, nil
}

func (st *OAuthStore) save(ctx context.Context, id int64, g oauthGrant) error {
	plain, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("mcp: oauth grant: %w", err)
	}
	if err := st.Keys.Prepare(ctx, 0); err != nil {
		return err
	}
	sealed, err := st.Keys.Seal(ctx, 0, plain, OAuthAD(id))
	if err != nil {
		return err
	}
	return st.Rows.SaveMCPOAuth(ctx, id, sealed)
}

// update applies f to server id's grant (a zero grant when it has none) and saves it.
func (st *OAuthStore) update(ctx context.Context, id int64, f func(g *oauthGrant) error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	g, _, err := st.load(ctx, id)
	if err != nil {
		return err
	}
	if err := f(&g); err != nil {
		return err
	}
	return st.save(ctx, id, g)
}

// grantFor returns server cfg's grant when it is for cfg's current URL.
func (st *OAuthStore) grantFor(ctx context.Context, cfg ServerConfig) (oauthGrant, bool, error) {
	if st == nil || cfg.ID == 0 {
		return oauthGrant{}, false, nil
	}
	st.mu.Lock()
	g, ok, err := st.load(ctx, cfg.ID)
	st.mu.Unlock()
	if err != nil || !ok || g.URL != cfg.URL {
		return oauthGrant{}, false, err
	}
	return g, true, nil
}

// Forget deletes server id's grant (tokens and registration).
func (st *OAuthStore) Forget(ctx context.Context, id int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.Rows.DeleteMCPOAuth(ctx, id)
}

// refreshMargin is how long before its expiry a token is refreshed: a minute, or a
// third of its lifetime when that is shorter.
func refreshMargin(t *transport.Token) time.Duration {
	m := time.Minute
	if t.ExpiresIn > 0 {
		if life := time.Duration(t.ExpiresIn) * time.Second / 3; life < m {
			m = life
		}
	}
	return m
}

// tokenStore is mcp-go's TokenStore for one server, over its sealed grant.
type tokenStore struct {
	st  *OAuthStore
	id  int64
	url string
}

// GetToken returns the stored token with its expiry moved earlier by refreshMargin,
// so that mcp-go refreshes it before the server would refuse it.
func (ts *tokenStore) GetToken(ctx context.Context) (*transport.Token, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ts.st.mu.Lock()
	g, ok, err := ts.st.load(ctx, ts.id)
	ts.st.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok || g.Token == nil || g.URL != ts.url || g.Failed != "" {
		return nil, transport.ErrNoToken
	}
	t := *g.Token
	if !t.ExpiresAt.IsZero() {
		t.ExpiresAt = t.ExpiresAt.Add(-refreshMargin(&t))
	}
	return &t, nil
}

// SaveToken stores a new token (from a refresh) and clears a recorded refresh failure.
func (ts *tokenStore) SaveToken(ctx context.Context, t *transport.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	saved, err := storableToken(t)
	if err != nil {
		return err
	}
	return ts.st.update(ctx, ts.id, func(g *oauthGrant) error {
		if g.URL != ts.url {
			return errors.New("the server's URL changed during the refresh")
		}
		g.Token, g.Failed = saved, ""
		return nil
	})
}

// storableToken is a copy of the token response t with a sane expiry.
func storableToken(t *transport.Token) (*transport.Token, error) {
	if t == nil || t.AccessToken == "" {
		return nil, errors.New("the token response has no access token")
	}
	saved := *t
	if saved.ExpiresIn < 0 || saved.ExpiresIn > maxTokenLife {
		// Nonsense (or an overflow in mcp-go's expiry sum): no known expiry; a 401
		// then refreshes it.
		saved.ExpiresIn, saved.ExpiresAt = 0, time.Time{}
	}
	if saved.ExpiresAt.IsZero() && saved.ExpiresIn > 0 {
		saved.ExpiresAt = time.Now().Add(time.Duration(saved.ExpiresIn) * time.Second)
	}
	return &saved, nil
}

// maxTokenLife bounds a token's expires_in (seconds) taken at its word: a year.
const maxTokenLife = 365 * 24 * 3600

// maxOAuthBody bounds any response read during discovery, registration and token
// exchange: metadata documents and token responses are small.
const maxOAuthBody = 256 << 10

// oauthTimeout bounds one OAuth exchange (a metadata fetch, a registration, a token request).
const oauthTimeout = 20 * time.Second

// newOAuthHTTPClient is the HTTP client for talking to authorization servers: the same
// TLS and redirect rules as for MCP servers, a whole-exchange timeout, and bodies cut
// at maxOAuthBody (reading past it is an error, so a huge document fails clearly).
func newOAuthHTTPClient() *http.Client {
	hc := newHTTPClient()
	hc.Timeout = oauthTimeout
	hc.Transport = limitBodies{next: hc.Transport, max: maxOAuthBody}
	return hc
}

// limitBodies is a RoundTripper whose response bodies fail after max bytes.
type limitBodies struct {
	next http.RoundTripper
	max  int64
}

func (l limitBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: l.max}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte tells a body of exactly max from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("the response is larger than %d KiB", maxOAuthBody>>10)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// oauthHandler builds mcp-go's handler for server cfg from its grant.
func (s *Supervisor) oauthHandler(cfg ServerConfig, g oauthGrant) *transport.OAuthHandler {
	h := transport.NewOAuthHandler(s.oauthConfig(cfg, g))
	h.SetBaseURL(cfg.URL)
	return h
}

func (s *Supervisor) oauthConfig(cfg ServerConfig, g oauthGrant) transport.OAuthConfig {
	return transport.OAuthConfig{
		ClientID:                     g.ClientID,
		ClientSecret:                 g.ClientSecret,
		TokenEndpointAuthMethod:      g.AuthMethod,
		RedirectURI:                  g.RedirectURI,
		Scopes:                       g.Scopes,
		TokenStore:                   &tokenStore{st: s.OAuth, id: cfg.ID, url: cfg.URL},
		ProtectedResourceMetadataURL: g.ResourceMetadataURL,
		AuthServerMetadataURL:        g.AuthServerMetadataURL,
		PKCEEnabled:                  true,
		HTTPClient:                   oauthHTTPClientFor(g),
	}
}

// oauthHTTPClientFor is the HTTP client for grant g's authorization server: one that
// names g's resource on token requests when Atrium, not mcp-go, knows it.
func oauthHTTPClientFor(g oauthGrant) *http.Client {
	hc := newOAuthHTTPClient()
	if g.Resource != "" {
		hc.Transport = addResource{next: hc.Transport, resource: g.Resource}
	}
	return hc
}

// addResource is a RoundTripper that adds a resource parameter to token requests
// (form posts with a grant_type) that have none.
type addResource struct {
	next     http.RoundTripper
	resource string
}

func (a addResource) RoundTrip(r *http.Request) (*http.Response, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method != http.MethodPost || ct != "application/x-www-form-urlencoded" || r.Body == nil {
		return a.next.RoundTrip(r)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxOAuthBody))
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(body))
	if err == nil && form.Get("grant_type") != "" && !form.Has("resource") {
		form.Set("resource", a.resource)
		body = []byte(form.Encode())
	}
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return a.next.RoundTrip(r)
}

// isAuthRequired reports whether err is the server (or mcp-go, lacking a token)
// saying that the request needs authorisation.
func isAuthRequired(err error) bool {
	return errors.Is(err, transport.ErrAuthorizationRequired) || errors.Is(err, transport.ErrOAuthAuthorizationRequired)
}

// errNoRefresh means there is no grant with a refresh token to refresh.
var errNoRefresh = errors.New("no refresh token")

// errRefreshFailed wraps a refresh the authorization server refused or that broke.
var errRefreshFailed = errors.New("refreshing the token failed")

func isRefreshFailure(err error) bool { return errors.Is(err, errRefreshFailed) }

// accessToken is the server's stored access token, "" when it has none: taken before
// a request, it tells refreshGrant which token a refusal was for.
func (s *server) accessToken(ctx context.Context) string {
	g, ok, err := s.sup.OAuth.grantFor(ctx, s.cfg)
	if err != nil || !ok || g.Token == nil {
		return ""
	}
	return g.Token.AccessToken
}

// refreshGrant refreshes the server's token now, whatever its expiry, because the
// server refused the access token seen ("" when not known). Refreshes of one server
// take turns, and one that finds seen already replaced (another refresh, or a new
// authorisation) returns at once: the caller tries again with the stored token. A
// failure other than errNoRefresh is recorded in the grant, unless the refresh token
// was replaced meanwhile: the card then asks to re-authorise, and the token is not
// offered again.
func (s *server) refreshGrant(ctx context.Context, seen string) error {
	st := s.sup.OAuth
	if st == nil || s.cfg.ID == 0 {
		return errNoRefresh
	}
	mu := st.refreshLock(s.cfg.ID)
	mu.Lock()
	defer mu.Unlock()
	g, ok, err := st.grantFor(ctx, s.cfg)
	if err != nil {
		return err
	}
	if !ok || g.Token == nil || g.Failed != "" {
		return errNoRefresh
	}
	if seen != "" && g.Token.AccessToken != seen {
		return nil
	}
	if g.Token.RefreshToken == "" {
		return errNoRefresh
	}
	// A handler of its own: the connection's resets its metadata on every 401, which
	// concurrent calls would do in the middle of this refresh.
	h := s.sup.oauthHandler(s.cfg, g)
	rctx, cancel := context.WithTimeout(ctx, oauthTimeout)
	defer cancel()
	spent := g.Token.RefreshToken
	_, err = h.RefreshToken(rctx, spent)
	if err == nil {
		s.log.Info("mcp: oauth token refreshed after the server refused it")
		return nil
	}
	// mcp-go quotes the token endpoint's answer, which might echo what was sent.
	msg := oauthErrorText(err, s.secrets, []string{g.Token.RefreshToken, g.Token.AccessToken, g.ClientSecret})
	s.log.Warn("mcp: oauth refresh failed", "err", msg)
	replaced := false
	if uerr := st.update(context.WithoutCancel(ctx), s.cfg.ID, func(g *oauthGrant) error {
		// mcp-go's own refresh before expiry does not take turns with this one.
		if g.Token == nil || g.Token.RefreshToken != spent {
			replaced = true
			return nil
		}
		g.Failed = msg
		return nil
	}); uerr != nil {
		s.log.Error("mcp: could not record a failed oauth refresh", "err", uerr)
	}
	if replaced {
		return nil
	}
	return fmt.Errorf("%w: %s", errRefreshFailed, msg)
}

// maxOAuthError bounds an error text from an authorization server shown on a card.
const maxOAuthError = 300

// oauthErrorText is err's message without secrets, cut to maxOAuthError bytes (mcp-go
// quotes whole response bodies of failed token requests). Redacted first: a secret
// the cut went through would no longer match.
func oauthErrorText(err error, secrets ...[]string) string {
	msg := err.Error()
	for _, s := range secrets {
		msg = redact(msg, s)
	}
	if len(msg) > maxOAuthError {
		msg = capString(msg, maxOAuthError) + "…"
	}
	return msg
}
