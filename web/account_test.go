package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The theme is saved per user and set on every page; an unknown one is refused.
func TestAccountTheme(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	if r := bob.get("/"); !strings.Contains(r.body, `data-theme="system"`) {
		t.Fatalf("a new user's page is not on the system theme: %.300s", r.body)
	}
	wantRedirect(t, bob.post("/settings/account/theme", url.Values{"theme": {"dark"}}), "/settings/account?notice=Theme+saved.")
	if r := bob.get("/memories"); !strings.Contains(r.body, `data-theme="dark"`) || !strings.Contains(r.body, `name="color-scheme" content="dark"`) {
		t.Errorf("the dark theme is not on bob's pages: %.400s", r.body)
	}
	if r := admin.get("/"); !strings.Contains(r.body, `data-theme="system"`) {
		t.Error("bob's theme changed the admin's pages")
	}
	for _, bad := range []string{"", "neon", `dark" onload="x`} {
		r := bob.post("/settings/account/theme", url.Values{"theme": {bad}})
		if r.StatusCode != http.StatusBadRequest || !strings.Contains(r.body, "Pick a theme") {
			t.Errorf("theme %q: status %d", bad, r.StatusCode)
		}
	}
}

// Custom instructions are saved for their user only, shown back, and refused over the
// limit with the typed text kept; control characters are dropped.
func TestAccountInstructions(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	r := bob.post("/settings/account/instructions", url.Values{"about_me": {"I am a nurse.\x00\x1b[31m"}, "answer_style": {"Be <b>brief</b>."}})
	wantStatus(t, r, http.StatusSeeOther)
	page := bob.get("/settings/account")
	if !strings.Contains(page.body, "I am a nurse.[31m</textarea>") || !strings.Contains(page.body, "Be &lt;b&gt;brief&lt;/b&gt;.") {
		t.Errorf("saved instructions not shown (escaped, control characters dropped): %.3000s", page.body)
	}
	if strings.Contains(admin.get("/settings/account").body, "nurse") {
		t.Error("bob's instructions show on the admin's account page")
	}
	long := strings.Repeat("é", 1501)
	r = bob.post("/settings/account/instructions", url.Values{"about_me": {long}, "answer_style": {"kept"}})
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(r.body, "the limit is 1500") || !strings.Contains(r.body, long) {
		t.Errorf("over-long instructions: status %d, body %.300s", r.StatusCode, r.body)
	}
	u, err := env.db.UserByUsername(context.Background(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := env.db.UserInstructions(context.Background(), u.ID); in.AboutMe != "I am a nurse.[31m" || in.AnswerStyle != "Be <b>brief</b>." {
		t.Errorf("stored %+v after the refused save", in)
	}
}

// Changing one's password needs the current one, ends the user's other logins and
// keeps this browser logged in.
func TestAccountPassword(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	other := env.login("bob", testPassword)
	const next = "another long password 42"

	r := bob.post("/settings/account/password", url.Values{"current": {"wrong"}, "password": {next}, "confirm": {next}})
	if r.StatusCode != http.StatusUnauthorized || !strings.Contains(r.body, "The current password is wrong.") {
		t.Fatalf("wrong current password: status %d %.300s", r.StatusCode, r.body)
	}
	r = bob.post("/settings/account/password", url.Values{"current": {testPassword}, "password": {next}, "confirm": {next + "x"}})
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(r.body, "differ") {
		t.Fatalf("mismatched new passwords: status %d", r.StatusCode)
	}
	r = bob.post("/settings/account/password", url.Values{"current": {testPassword}, "password": {"short"}, "confirm": {"short"}})
	if r.StatusCode != http.StatusBadRequest {
		t.Fatalf("too short a password: status %d", r.StatusCode)
	}
	if r := other.get("/memories"); r.StatusCode != http.StatusOK {
		t.Fatalf("a refused change ended the other login: %d", r.StatusCode)
	}

	r = bob.post("/settings/account/password", url.Values{"current": {testPassword}, "password": {next}, "confirm": {next}})
	wantStatus(t, r, http.StatusSeeOther)
	if r := bob.get("/memories"); r.StatusCode != http.StatusOK {
		t.Errorf("the browser that changed the password was logged out: %d", r.StatusCode)
	}
	if r := other.get("/memories"); r.StatusCode == http.StatusOK {
		t.Error("the other login survived the password change")
	}
	env.login("bob", next)
	if r := env.browser().post("/login", url.Values{"username": {"bob"}, "password": {testPassword}}); r.StatusCode == http.StatusSeeOther {
		t.Error("the old password still logs in")
	}
}

// A chat's own instructions are saved by its owner only, and refused over the limit.
func TestChatInstructions(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	id := bob.newSession()
	r := bob.post("/s/"+id+"/instructions", url.Values{"system_prompt": {"Answer in French."}})
	if r.StatusCode != http.StatusOK || !strings.Contains(r.body, "Saved.") {
		t.Fatalf("save: %d %.300s", r.StatusCode, r.body)
	}
	if page := bob.get("/s/" + id); !strings.Contains(page.body, "Answer in French.</textarea>") {
		t.Error("the chat page does not show its instructions")
	}
	if r := admin.post("/s/"+id+"/instructions", url.Values{"system_prompt": {"pwned"}}); r.StatusCode != http.StatusNotFound {
		t.Errorf("another user's save: status %d, want 404", r.StatusCode)
	}
	r = bob.post("/s/"+id+"/instructions", url.Values{"system_prompt": {strings.Repeat("x", 4001)}})
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(r.body, "the limit is 4000") {
		t.Errorf("over-long chat instructions: %d", r.StatusCode)
	}
	u, _ := env.db.UserByUsername(context.Background(), "bob")
	if s, _ := env.db.SessionForOwner(context.Background(), id, u.ID); s.SystemPrompt != "Answer in French." {
		t.Errorf("stored %q", s.SystemPrompt)
	}
}
