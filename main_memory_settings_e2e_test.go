package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestEndToEndMemoryInstanceSettings: in Settings → Memories an admin tests an
// embeddings endpoint (the width shows, the typed key does not come back), saves it,
// and watches the reindex progress turn into "indexed" without reloading the page.
func TestEndToEndMemoryInstanceSettings(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 1400)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	gate := make(chan struct{})
	gateOn := make(chan struct{}) // closed: the endpoint holds requests until gate opens
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gateOn:
			select {
			case <-gate:
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
				return
			}
		default:
		}
		var req struct{ Input []string }
		if json.NewDecoder(r.Body).Decode(&req) != nil || r.Header.Get("Authorization") != "Bearer sk-embed-e2e-5555" {
			http.Error(w, "refused", http.StatusUnauthorized)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []item `json:"data"`
		}
		for i := range req.Input {
			out.Data = append(out.Data, item{i, []float32{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)

	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	run("add a memory",
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`#new-memory-text`)),
		chromedp.SendKeys(chromedp.CSS(`#new-memory-text`), "I keep bees on the roof"),
		chromedp.Click(chromedp.CSS(`[data-testid=memory-add]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory] [data-testid=memory-text-shown]`)),
	)
	var result, keyValue string
	run("test the endpoint",
		chromedp.Click(chromedp.CSS(`[data-testid=nav-admin-memories]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-instance-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-reindex-done]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=memory-instance-embeddings-url]`), srv.URL+"/v1"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=memory-instance-embeddings-model]`), "tiny"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=memory-instance-key]`), "sk-embed-e2e-5555"),
		chromedp.Click(chromedp.CSS(`[data-testid=memory-instance-test]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-instance-test-result]`)),
		into(&result, chromedp.Text(chromedp.CSS(`[data-testid=memory-instance-test-result]`))),
		into(&keyValue, chromedp.Value(chromedp.CSS(`[data-testid=memory-instance-key]`))),
	)
	if !strings.Contains(result, "10 dimensions") || keyValue != "" {
		t.Fatalf("test result %q, key field after the test %q", result, keyValue)
	}
	close(gateOn) // from now on the endpoint holds requests until gate opens
	var progress string
	run("save and watch the reindex",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=memory-instance-key]`), "sk-embed-e2e-5555"),
		chromedp.Click(chromedp.CSS(`[data-testid=memory-instance-save]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=form-notice]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-reindex]`)),
		into(&progress, chromedp.Text(chromedp.CSS(`[data-testid=memory-reindex]`))),
	)
	if !strings.Contains(progress, "Reindexing") {
		t.Errorf("while the endpoint holds the reindex the page says %q", progress)
	}
	close(gate)
	var body string
	run("the progress follows without a reload",
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-reindex-done]`)),
		into(&body, chromedp.Evaluate[string](`document.documentElement.outerHTML`)),
	)
	if strings.Contains(body, "sk-embed-e2e-5555") || strings.Contains(body, "5555") {
		t.Error("the page shows the embeddings key")
	}
	if !strings.Contains(body, "A key is stored") {
		t.Error("the page does not say a key is stored")
	}
	problems.Check(t)
}
