package views_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/assets"
	"atrium/views"
)

// TestBrowserMemoriesPage renders the Memories page under the strict CSP and uses
// its add form and a Forget button (plain forms, the latter behind data-confirm)
// against a stand-in server that keeps the list in memory.
func TestBrowserMemoriesPage(t *testing.T) {
	ctx, problems := browser(t, 1100, 900)
	var mu sync.Mutex
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	seq := 1
	items := []views.MemoryItem{{ID: "mem_1", Kind: "fact", Text: "Lives in <Lyon>", Source: "chat", ChatURL: "/s/s1#msg-3",
		CreatedAt: now, UpdatedAt: now, UseCount: 2, LastUsedAt: &now}}
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	mux.HandleFunc("GET /memories", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		v := views.Memories{Items: append([]views.MemoryItem(nil), items...), Total: len(items),
			Kinds: []string{"preference", "fact", "instruction", "other"}, Add: views.MemoryForm{Kind: "fact"}}
		mu.Unlock()
		_ = views.MemoriesPage(page, v).Render(r.Context(), w)
	})
	csrfOK := func(w http.ResponseWriter, r *http.Request) bool {
		if r.FormValue("_csrf") != page.CSRF {
			http.Error(w, "no csrf", http.StatusForbidden)
			return false
		}
		return true
	}
	mux.HandleFunc("POST /memories", func(w http.ResponseWriter, r *http.Request) {
		if !csrfOK(w, r) {
			return
		}
		mu.Lock()
		seq++
		items = append([]views.MemoryItem{{ID: "mem_" + strconv.Itoa(seq), Kind: r.FormValue("kind"), Text: r.FormValue("text"),
			Source: "manual", CreatedAt: now, UpdatedAt: now}}, items...)
		mu.Unlock()
		http.Redirect(w, r, "/memories", http.StatusSeeOther)
	})
	mux.HandleFunc("POST /memories/{id}/delete", func(w http.ResponseWriter, r *http.Request) {
		if !csrfOK(w, r) {
			return
		}
		mu.Lock()
		for i, it := range items {
			if it.ID == r.PathValue("id") {
				items = append(items[:i], items[i+1:]...)
				break
			}
		}
		mu.Unlock()
		http.Redirect(w, r, "/memories", http.StatusSeeOther)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", testCSP)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	run(t, ctx, chromedp.Navigate(srv.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory][data-memory-id=mem_1]`)),
		waitJS(`document.querySelector("[data-testid=memory-text-shown]").textContent === "Lives in <Lyon>"`),
		waitJS(`document.querySelector("[data-testid=memory-source-link]").getAttribute("href") === "/s/s1#msg-3"`),
		waitJS(`!!document.querySelector("[data-testid=nav-memories]")`),
		waitJS(`document.querySelector("[data-testid=memories-chat-note]").textContent.includes("does not delete the chat")`),

		// Add one through the form.
		chromedp.SetValue(chromedp.CSS(`[data-testid=memory-kind]`), "preference"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=memory-text]`), "Prefers metric units"),
		chromedp.Click(chromedp.CSS(`[data-testid=memory-add]`)),
		afterNav(`document.querySelectorAll("[data-testid=memory]").length === 2`),
		waitJS(`document.querySelector("[data-testid=memory]").dataset.memoryId === "mem_2" &&
			document.querySelector("[data-testid=memory] [data-testid=memory-kind-badge]").textContent === "preference"`),

		// A declined confirm keeps the memory; an accepted one forgets it.
		waitJS(`(window.confirm = () => false, true)`),
		chromedp.Click(chromedp.CSS(`[data-memory-id=mem_1] [data-testid=memory-delete]`)),
		chromedp.Sleep(200*time.Millisecond),
		waitJS(`document.querySelectorAll("[data-testid=memory]").length === 2`),
		waitJS(`(window.confirm = () => true, true)`),
		chromedp.Click(chromedp.CSS(`[data-memory-id=mem_1] [data-testid=memory-delete]`)),
		afterNav(`document.querySelectorAll("[data-testid=memory]").length === 1 && !document.querySelector("[data-memory-id=mem_1]")`),

		// The edit form opens from its summary.
		chromedp.Click(chromedp.CSS(`[data-memory-id=mem_2] [data-testid=memory-edit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-memory-id=mem_2] [data-testid=memory-edit-text]`)),
		waitJS(`document.querySelector("[data-memory-id=mem_2] [data-testid=memory-edit-text]").value === "Prefers metric units"`),
	)
	problems.Check(t)
}

// afterNav is waitJS across a navigation the previous step started (a plain form
// submit): an evaluation cut short by the page unloading, or sent to the old
// page's context, is retried.
func afterNav(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := waitJS(expr)(ctx, t)
			if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "navigated or closed") && !strings.Contains(err.Error(), "Cannot find context") {
				return v, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
