package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Step-up authorisation. A server that answers a request with 403 and
// `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"` wants a token with
// more scope than the grant holds. A wider grant needs an admin's consent, so the
// server's card asks to re-authorise (its tools are hidden meanwhile, as for any
// server waiting for authorisation), and Connect then asks for the union of the scopes
// granted and those required. Retries are bounded: a server that still refuses with
// insufficient_scope although the grant holds every scope it names is not put to the
// admin again (the call fails with that explanation), so a server whose requirement can
// never be met costs one authorisation, not a loop.

// insufficientScope is a 403 insufficient_scope answer: the scopes the server requires.
type insufficientScope struct{ scopes []string }

func (e *insufficientScope) Error() string {
	return "the server needs more access (scope: " + strings.Join(e.scopes, " ") + ")"
}

// Bounds on the scopes a 403 may name (they are shown on the card and requested).
const (
	maxScopes     = 20
	maxScopeBytes = 200
)

// scopeGate turns a 403 insufficient_scope answer to a request into an
// *insufficientScope error. mcp-go reads a 403 as a JSON-RPC answer and loses the
// header. The standalone GET event stream is left to httpGate.
type scopeGate struct{ next http.RoundTripper }

func (g scopeGate) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusForbidden || r.Method == http.MethodGet {
		return resp, err
	}
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		if !strings.EqualFold(authParam(h, "error"), "insufficient_scope") {
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
		resp.Body.Close()
		return nil, &insufficientScope{scopes: scopeList(authParam(h, "scope"))}
	}
	return resp, nil
}

// scopeList splits a scope parameter into distinct scopes, within the bounds.
func scopeList(s string) []string {
	var out []string
	for _, sc := range strings.Fields(s) {
		if len(out) < maxScopes && len(sc) <= maxScopeBytes && !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out
}

// union is a's scopes followed by those of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// grantedScopes is what a grant holds: the token's scope when the authorization
// server said, else what was asked for.
func (g oauthGrant) grantedScopes() []string {
	if g.Token != nil && strings.TrimSpace(g.Token.Scope) != "" {
		return strings.Fields(g.Token.Scope)
	}
	return g.Scopes
}

// needScope records that the server requires scopes. It returns true when
// re-authorising can help: the server has an OAuth grant that lacks some of them (they
// are kept in the grant for the next Connect). It returns false when there is no grant
// to widen, or the grant already holds them all (asking again would loop).
func (s *server) needScope(ctx context.Context, need []string) bool {
	st := s.sup.OAuth
	g, ok, err := st.grantFor(ctx, s.cfg)
	if err != nil || !ok || g.Token == nil || len(need) == 0 {
		return false
	}
	granted := g.grantedScopes()
	if !slices.ContainsFunc(need, func(sc string) bool { return !slices.Contains(granted, sc) }) {
		s.log.Warn("mcp: the server refuses for lack of scope the grant already holds; not asking again", "scope", strings.Join(need, " "))
		return false
	}
	if !slices.ContainsFunc(need, func(sc string) bool { return !slices.Contains(g.Required, sc) }) {
		return true // recorded already
	}
	if err := st.update(context.WithoutCancel(ctx), s.cfg.ID, func(g *oauthGrant) error {
		g.Required = union(g.Required, need)
		return nil
	}); err != nil {
		s.log.Error("mcp: could not record the scope the server requires", "err", err)
		return false
	}
	s.log.Info("mcp: the server requires more scope; an admin must re-authorise", "scope", strings.Join(need, " "))
	return true
}

func isInsufficientScope(err error) bool {
	var isc *insufficientScope
	return errors.As(err, &isc)
}
