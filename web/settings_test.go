package web_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestUsersMovedIntoSettings: the users page lives at /settings/users; old links to
// /admin/users are a permanent redirect that keeps the query, twice in a row (the
// redirect must not grow with each request).
func TestUsersMovedIntoSettings(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	for range 2 {
		r := admin.get("/admin/users?notice=hello")
		wantStatus(t, r, http.StatusMovedPermanently)
		if got := r.Header.Get("Location"); got != "/settings/users?notice=hello" {
			t.Fatalf("Location %q, want /settings/users?notice=hello", got)
		}
	}
	if got := admin.get("/admin/users").Header.Get("Location"); got != "/settings/users" {
		t.Errorf("Location %q, want /settings/users", got)
	}
	r := admin.get("/settings/users")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{`data-testid="settings-nav"`, `data-testid="nav-users" aria-current="page"`, `action="/settings/users"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the users page lacks %s", want)
		}
	}
	// The forms post to the new address; the old POST routes are gone.
	wantStatus(t, admin.post("/admin/users", nil), http.StatusNotFound)
}

// TestSettingsNavForUsers: a plain user's settings nav lists only their own sections,
// and every admin section is a 404 to them, as if it did not exist.
func TestSettingsNavForUsers(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	for _, page := range []string{"/settings/account", "/memories"} {
		r := bob.get(page)
		wantStatus(t, r, http.StatusOK)
		for _, want := range []string{`data-testid="settings-nav"`, `data-testid="nav-account"`, `data-testid="nav-memories"`, `href="` + page + `" data-testid`} {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s lacks %s", page, want)
			}
		}
		for _, admin := range []string{"nav-providers", "nav-mcp", "nav-admin-memories", "nav-admin-runs", "nav-users"} {
			if strings.Contains(r.body, `data-testid="`+admin+`"`) {
				t.Errorf("%s shows a plain user the admin section %s", page, admin)
			}
		}
	}
	for _, page := range []string{"/settings/users", "/settings/memories", "/settings/runs"} {
		wantStatus(t, bob.get(page), http.StatusNotFound)
	}
	// The old address redirects everyone, and the new one is still a 404 to bob.
	wantStatus(t, bob.get("/admin/users"), http.StatusMovedPermanently)
	// Every section, admin ones included, has the nav for an admin.
	for _, page := range []string{"/settings/account", "/memories", "/settings/providers", "/settings/mcp", "/settings/memories", "/settings/runs", "/settings/users"} {
		r := admin.get(page)
		wantStatus(t, r, http.StatusOK)
		if !strings.Contains(r.body, `data-testid="nav-users"`) || !strings.Contains(r.body, `aria-current="page"`) {
			t.Errorf("%s: no settings nav with the current section", page)
		}
	}
}
