package web_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/mcp/oauthtest"
	"atrium/internal/store"
)

// authorizeAt opens the provider's authorization URL (the test provider approves at
// once) and returns the callback URL it sends the browser back to.
func authorizeAt(t *testing.T, authURL string) *url.URL {
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
	return back
}

var continueRE = regexp.MustCompile(`href="([^"]+)" data-testid="mcp-oauth-continue"`)

// continueURL is the provider URL on the page that answers Connect.
func continueURL(t *testing.T, r response) *url.URL {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	m := continueRE.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no Continue link on:\n%.1000s", r.body)
	}
	u, err := url.Parse(html.UnescapeString(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestMCPOAuthConnectCallback(t *testing.T) {
	as := oauthtest.Start(t)
	as.AutoApprove.Store(true)
	env, admin := mcpTestEnv(t)
	bob := env.user(admin, "bob")
	wantStatus(t, admin.post("/settings/users", url.Values{"username": {"carol"}, "password": {testPassword}, "role": {store.RoleAdmin}}), http.StatusSeeOther)
	carol := env.login("carol", testPassword)

	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"prov"}, "transport": {"http"}, "url": {as.URL}}), http.StatusSeeOther)
	env.waitMCPState("prov", "unauthorized")
	page := admin.get("/settings/mcp").body
	if !strings.Contains(page, `data-testid="mcp-connect"`) || !strings.Contains(page, `data-testid="mcp-needs-auth"`) {
		t.Fatalf("the page offers no Connect for a server that needs it:\n%.2000s", page)
	}
	connect := "/settings/mcp/" + strconv.FormatInt(env.mcpRow("prov").ID, 10) + "/oauth"

	// Only admins, and only with the page's CSRF token.
	wantStatus(t, bob.post(connect, nil), http.StatusForbidden)
	wantStatus(t, admin.postRaw(connect, url.Values{}, nil), http.StatusForbidden)

	authURL := continueURL(t, admin.post(connect, nil))
	if !strings.HasPrefix(authURL.String(), as.Issuer+"/authorize?") {
		t.Fatalf("Connect sent the browser to %q", authURL)
	}
	q := authURL.Query()
	if q.Get("redirect_uri") != env.ts.URL+"/settings/mcp/oauth/callback" || q.Get("code_challenge_method") != "S256" ||
		q.Get("resource") != as.URL || q.Get("scope") != oauthtest.Scope || len(q.Get("state")) < 20 {
		t.Fatalf("authorization request %v", q)
	}
	back := authorizeAt(t, authURL.String())
	callback := back.Path + "?" + back.RawQuery

	// A wrong state, another admin, a plain user: refused, nothing exchanged.
	tampered := back.Query()
	tampered.Set("state", q.Get("state")+"x")
	wantStatus(t, admin.get(back.Path+"?"+tampered.Encode()), http.StatusBadRequest)
	wantStatus(t, carol.get(callback), http.StatusBadRequest)
	wantStatus(t, bob.get(callback), http.StatusForbidden)
	if as.Exchanges.Load() != 0 {
		t.Fatalf("a refused callback exchanged the code")
	}
	env.waitMCPState("prov", "unauthorized")

	// The admin who started it finishes it, once.
	r := admin.get(callback)
	wantStatus(t, r, http.StatusSeeOther)
	if !strings.HasPrefix(r.Header.Get("Location"), "/settings/mcp?notice=") {
		t.Fatalf("callback went to %q", r.Header.Get("Location"))
	}
	env.waitMCPState("prov", "ready")
	wantStatus(t, admin.get(callback), http.StatusBadRequest)
	if as.Exchanges.Load() != 1 {
		t.Fatalf("%d code exchanges, want 1", as.Exchanges.Load())
	}

	// The tokens are never shown, exported or stored in the clear.
	tokens := as.Tokens()
	if len(tokens) < 2 {
		t.Fatalf("tokens issued: %d", len(tokens))
	}
	// A refused token whose refresh fails leaves the card asking to re-authorise.
	as.FailRefresh.Store(true)
	as.RevokeAccess()
	if res := env.app.Tools.Dispatch(context.Background(), "s", 1, llm.ToolCall{ID: "c1", Name: "prov__whoami", Arguments: "{}"}); !res.IsError {
		t.Fatalf("a call with a refused token and a failing refresh succeeded: %+v", res)
	}
	env.waitMCPState("prov", "unauthorized")
	page = admin.get("/settings/mcp").body
	if !strings.Contains(page, `data-auth="reauthorize"`) || !strings.Contains(page, `data-testid="mcp-reauthorize"`) || !strings.Contains(page, "Re-authorise") {
		t.Fatalf("the card does not ask to re-authorise:\n%.3000s", page)
	}

	export := admin.get("/settings/mcp/export").body
	page = admin.get("/settings/mcp").body
	db := string(env.dbBytes())
	for _, tok := range tokens {
		for what, s := range map[string]string{"export": export, "page": page, "database": db} {
			if strings.Contains(s, tok) {
				t.Errorf("the %s holds a token", what)
			}
		}
	}
}

func TestMCPOAuthProviderRefusal(t *testing.T) {
	as := oauthtest.Start(t)
	env, admin := mcpTestEnv(t)
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"prov"}, "transport": {"http"}, "url": {as.URL}}), http.StatusSeeOther)
	env.waitMCPState("prov", "unauthorized")
	authURL := continueURL(t, admin.post("/settings/mcp/"+strconv.FormatInt(env.mcpRow("prov").ID, 10)+"/oauth", nil))
	state := authURL.Query().Get("state")
	r := admin.get("/settings/mcp/oauth/callback?error=access_denied&error_description=" + url.QueryEscape("<b>no</b>") + "&state=" + url.QueryEscape(state))
	wantStatus(t, r, http.StatusSeeOther)
	page := admin.get(r.Header.Get("Location")).body
	if !strings.Contains(page, "did not authorise prov: access_denied (&lt;b&gt;no&lt;/b&gt;)") {
		t.Fatalf("the refusal is not explained:\n%.3000s", page)
	}
	env.waitMCPState("prov", "unauthorized")
}

// TestMCPOAuthRefusesScriptAuthorizationURL: Connect sends the browser only to an http
// or https authorization endpoint. A server whose metadata names a javascript:
// authorization server got, through mcp-go's fallback endpoints (/authorize under the
// server named), a javascript: URL in the Continue link and the meta refresh.
func TestMCPOAuthRefusesScriptAuthorizationURL(t *testing.T) {
	var self string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/mcp":
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+self+`/.well-known/oauth-protected-resource/mcp"`)
			w.WriteHeader(http.StatusUnauthorized)
		case "/.well-known/oauth-protected-resource/mcp":
			fmt.Fprint(w, `{"resource":"`+self+`/mcp","authorization_servers":["javascript://evil.test"]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	self = srv.URL
	env, admin := mcpTestEnv(t)
	// A client entered on the form: no registration is needed to build the URL.
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"hostile"}, "transport": {"http"}, "url": {srv.URL + "/mcp"},
		"oauth_client_id": {"atrium"}}), http.StatusSeeOther)
	env.waitMCPState("hostile", "unauthorized")
	r := admin.post("/settings/mcp/"+strconv.FormatInt(env.mcpRow("hostile").ID, 10)+"/oauth", nil)
	if strings.Contains(r.body, "javascript:") {
		t.Fatalf("Connect offers a javascript: URL:\n%.2000s", r.body)
	}
	wantStatus(t, r, http.StatusSeeOther)
	page := admin.get(r.Header.Get("Location")).body
	if !strings.Contains(page, "not an http or https URL") || strings.Contains(page, "javascript:") {
		t.Fatalf("the refusal is not explained:\n%.3000s", page)
	}
}
