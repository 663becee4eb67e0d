package web_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
	"atrium/internal/testkit"
)

// TestBrowserAttachImage: in Chromium against the real server, an image picked with
// the Attach button and a text file dropped on the composer upload at once and show as
// chips; the message goes out with both, the fake model's recorded request carries the
// image as an image_url part (the very bytes picked) and the file as a fenced block,
// and the chat shows the thumbnail (a loaded image) and the file's chip, live and after
// a reload.
func TestBrowserAttachImage(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 800)
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model vision", "")
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("A noisy picture.")})
	id := admin.newSession()
	pic := pngImage(t, 120, 80)
	picPath := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(picPath, pic, 0o600); err != nil {
		t.Fatal(err)
	}

	steps := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	wait := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))
	}
	steps("login",
		chromedp.Navigate(env.ts.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-username`)),
		chromedp.SendKeys(chromedp.CSS(`#login-username`), "admin"),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), testPassword),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat-search`)),
		chromedp.Navigate(env.ts.URL+"/s/"+id),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=attach-file]`)),
	)
	steps("pick an image and drop a text file",
		chromedp.SetUploadFiles(chromedp.CSS(`#file-input`), []string{picPath}),
		wait(`document.querySelectorAll("[data-testid=file-attachment-chip]").length === 1`),
		chromedp.Evaluate[chromedp.Void](`(() => {
			const dt = new DataTransfer();
			dt.items.add(new File(["a,b\n1,2\n"], "table.csv", {type: "text/csv"}));
			document.querySelector("[data-testid=composer]").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
		})()`),
		wait(`document.querySelectorAll("[data-testid=file-attachment-chip]").length === 2`),
		wait(`[...document.querySelectorAll("[data-testid=file-attachment-chip]")].map(c => c.textContent).join("|").includes("photo.png · ")`),
	)
	shot(t, ctx, "files-chips")
	steps("send",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "What is in the picture?"),
		chromedp.KeyEvent(kb.Enter),
		wait(`!!document.querySelector("#msg-2") && document.querySelector("#msg-2").dataset.status === "complete"`),
		wait(`document.querySelector("#msg-1 [data-testid=file-thumb] img")?.naturalWidth === 120`),
		wait(`document.querySelector("#msg-1 [data-testid=file-chip]")?.textContent.includes("table.csv")`),
		wait(`document.querySelectorAll("[data-testid=file-attachment-chip]").length === 0`),
	)
	shot(t, ctx, "files-sent")

	user := env.llm.LastRequest().Chat.Messages
	last := user[len(user)-1]
	if len(last.Images) != 1 || last.Images[0] != "data:image/png;base64,"+base64.StdEncoding.EncodeToString(pic) {
		t.Errorf("the model's request has no image part with the picked bytes: %d images", len(last.Images))
	}
	if !strings.Contains(last.Content, "Attached file \"table.csv\" (text/csv, 8 bytes):\n```\na,b\n1,2\n```") || !strings.HasSuffix(last.Content, "What is in the picture?") {
		t.Errorf("the model's text = %q", last.Content)
	}

	steps("reload",
		chromedp.Reload(),
		wait(`document.querySelector("#msg-1 [data-testid=file-thumb] img")?.naturalWidth === 120`),
		wait(`document.querySelector("#msg-1 [data-testid=file-chip]")?.getAttribute("href").startsWith("/files/")`),
	)
	// A pasted image uploads too; its chip's × removes the upload from the server.
	steps("paste an image, then remove it",
		chromedp.Evaluate[chromedp.Void](`(() => {
			const bin = atob("`+base64.StdEncoding.EncodeToString(pngImage(t, 8, 8))+`");
			const bytes = Uint8Array.from(bin, c => c.charCodeAt(0));
			const dt = new DataTransfer();
			dt.items.add(new File([bytes], "pasted.png", {type: "image/png"}));
			document.querySelector("[data-testid=composer]").dispatchEvent(new ClipboardEvent("paste", {clipboardData: dt, bubbles: true, cancelable: true}));
		})()`),
		wait(`document.querySelector("[data-testid=file-attachment-chip]")?.textContent.includes("pasted.png · ")`),
	)
	testkit.Eventually(t, 5*time.Second, "the pasted image stored as an upload", func() bool {
		n, err := env.db.CountUnsentAttachments(context.Background(), 1)
		return err == nil && n == 1
	})
	steps("remove", chromedp.Click(chromedp.CSS(`[data-testid=file-attachment-chip] [data-remove-attachment]`)),
		wait(`!document.querySelector("[data-testid=file-attachment-chip]")`))
	testkit.Eventually(t, 5*time.Second, "the removed upload deleted", func() bool {
		n, err := env.db.CountUnsentAttachments(context.Background(), 1)
		return err == nil && n == 0
	})
	// Files alone: Enter in the empty composer sends them.
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Another one.")})
	steps("send an image alone",
		chromedp.SetUploadFiles(chromedp.CSS(`#file-input`), []string{picPath}),
		wait(`document.querySelectorAll("[data-testid=file-attachment-chip]").length === 1`),
		chromedp.Focus(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.KeyEvent(kb.Enter),
		wait(`document.querySelector("#msg-4")?.dataset.status === "complete"`),
		wait(`document.querySelector("#msg-3 [data-testid=file-thumb] img")?.naturalWidth === 120`),
	)
	problems.Check(t)
}

// shot saves a PNG of the page into $E2E_SCREENSHOTS, when set, for a person to look at.
func shot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("E2E_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
	}
}
