package main

import (
	"strings"
	"testing"

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
	emb := llmtest.NewEmbeddings(t, llmtest.EmbeddingsOptions{Key: "sk-embed-e2e-5555", Width: 10})

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
		chromedp.SetValue(chromedp.CSS(`[data-testid=memory-instance-embeddings-url]`), emb.URL()),
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
	emb.Hold() // from now on the endpoint holds requests until Release
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
	emb.Release()
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
