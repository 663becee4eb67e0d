package mcp_test

import (
	"strings"
	"testing"
	"time"

	"atrium/internal/mcp"
	"atrium/internal/mcp/oauthtest"
)

// TestOAuthStepUp: a call answered 403 insufficient_scope fails with a message for the
// model, the card asks an admin to re-authorise naming the scope, and Connect asks for
// the granted and the required scopes together; after it the call goes through. Before
// step-up, mcp-go read the 403 as an empty JSON-RPC answer: the call failed with
// "request failed with status 403", the server stayed ready, and Connect (never shown)
// would have asked for the same narrow scope again.
func TestOAuthStepUp(t *testing.T) {
	as := oauthtest.Start(t)
	as.StepUp.Store(true)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	if got := as.LastScope(); got != oauthtest.Scope {
		t.Fatalf("first authorisation asked for %q, want %q", got, oauthtest.Scope)
	}

	res := h.call(t, "prov__whoami", map[string]any{"greeting": "hi"})
	if !res.IsError || !strings.Contains(res.Content, "needs more access") || !strings.Contains(res.Content, oauthtest.WriteScope) {
		t.Fatalf("call without the scope: %+v", res)
	}
	st := h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	if st.Auth != mcp.AuthReauthorize || !strings.Contains(st.Error, "re-authorise") || !strings.Contains(st.Error, oauthtest.WriteScope) {
		t.Fatalf("card after the 403: auth %q, error %q", st.Auth, st.Error)
	}

	h.authorize(t, cfg, as)
	if got, want := as.LastScope(), oauthtest.Scope+" "+oauthtest.WriteScope; got != want {
		t.Fatalf("re-authorisation asked for %q, want %q", got, want)
	}
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)
	if res := h.call(t, "prov__whoami", map[string]any{"greeting": "again"}); res.IsError || !strings.Contains(res.Content, "again") {
		t.Fatalf("call after re-authorising: %+v", res)
	}
	if as.Authorized.Load() != 2 || as.Registrated.Load() != 1 {
		t.Errorf("authorisations %d, registrations %d; want 2 and 1", as.Authorized.Load(), as.Registrated.Load())
	}
}

// TestOAuthStepUpIsBounded: a server that asks for a scope the grant already holds is
// not put to the admin again (that would loop): the call fails saying so, the server
// stays ready, and no authorisation is asked for.
func TestOAuthStepUpIsBounded(t *testing.T) {
	as := oauthtest.Start(t)
	h := newOAuthHarness(t)
	cfg := h.add(t, "prov", as.URL)
	h.waitState(t, "prov", 20*time.Second, mcp.StateUnauthorized)
	h.authorize(t, cfg, as)
	h.waitState(t, "prov", 20*time.Second, mcp.StateReady)

	as.NeverEnough.Store(true)
	for i := range 3 {
		res := h.call(t, "prov__whoami", map[string]any{})
		if !res.IsError || !strings.Contains(res.Content, "cannot grant") {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	if st := h.status("prov"); st.State != mcp.StateReady {
		t.Errorf("state %s (%s), want ready: re-authorising cannot help", st.State, st.Error)
	}
	if as.Authorized.Load() != 1 || as.Forbidden.Load() != 3 {
		t.Errorf("authorisations %d, 403s %d; want 1 and 3", as.Authorized.Load(), as.Forbidden.Load())
	}
}
