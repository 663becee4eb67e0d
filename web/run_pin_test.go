package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"atrium/internal/llm/llmtest"
	"atrium/internal/testkit"
)

// A run's owner pins and unpins it over POST /runs/:rid/pin; another user's
// attempt is the 404 of a missing run and changes nothing.
func TestPinRun(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.llm.Enqueue(llmtest.Reply{Text: []string{"hi"}})
	ws := admin.dial(id)
	ws.send("hello")
	ws.until(finalMarker)
	ctx := context.Background()
	var runID string
	var owner int64
	testkit.Eventually(t, 5*time.Second, "the run recorded", func() bool {
		u, err := env.db.UserByUsername(ctx, "admin")
		if err != nil {
			return false
		}
		runs, err := env.db.ListRuns(ctx, u.ID, id, 1)
		if err != nil || len(runs) == 0 {
			return false
		}
		runID, owner = runs[0].ID, u.ID
		return true
	})
	pinned := func() bool {
		p, err := env.db.RunPinned(ctx, owner, runID)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	bob := env.user(admin, "bob")
	wantStatus(t, bob.post("/runs/"+runID+"/pin", url.Values{"pinned": {"true"}}), http.StatusNotFound)
	wantStatus(t, admin.post("/runs/no-such-run/pin", url.Values{"pinned": {"true"}}), http.StatusNotFound)
	if pinned() {
		t.Fatal("pinned by another user")
	}
	wantStatus(t, admin.post("/runs/"+runID+"/pin", url.Values{"pinned": {"maybe"}}), http.StatusBadRequest)
	wantStatus(t, admin.post("/runs/"+runID+"/pin", url.Values{"pinned": {"true"}}), http.StatusNoContent)
	if !pinned() {
		t.Error("not pinned")
	}
	wantStatus(t, admin.post("/runs/"+runID+"/pin", url.Values{"pinned": {"false"}}), http.StatusNoContent)
	if pinned() {
		t.Error("still pinned")
	}
}
