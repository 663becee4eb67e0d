package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm/llmtest"
	"atrium/internal/pdftext/pdftest"
	"atrium/internal/testkit"
)

// A PDF's text reaches the model as a named block saying where it came from; the chat
// shows the PDF's chip, which downloads the text; the export and import keep it.
func TestPDFTextReachesTheModel(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	doc := pdftest.Text(true, "Quarterly report\nRevenue grew in March.", "Page two: the cat is called Pixel.")
	u := admin.uploadOK(id, "report.pdf", doc)
	if u.Kind != "text" || u.MIME != "application/pdf" || u.Name != "report.pdf" || u.Tokens <= 0 {
		t.Fatalf("PDF upload = %+v", u)
	}

	env.llm.Enqueue(llmtest.Reply{Text: []string{"Pixel."}})
	ws := admin.dial(id)
	ws.sendFiles("What is the cat called?", u.ID)
	frames := strings.Join(ws.until(`data-testid="run-link"`), "")
	if !strings.Contains(frames, `data-testid="file-chip"`) || !strings.Contains(frames, "report.pdf") {
		t.Errorf("the live user message shows no PDF chip: %.2000s", frames)
	}
	user := env.llm.LastRequest().Chat.Messages
	sent := user[len(user)-1].Content
	for _, want := range []string{`Attached file "report.pdf" (text read from a PDF, `, "Quarterly report\nRevenue grew in March.", "Page two: the cat is called Pixel.", "\n```\n\nWhat is the cat called?"} {
		if !strings.Contains(sent, want) {
			t.Errorf("sent text lacks %q:\n%s", want, sent)
		}
	}
	if strings.Contains(sent, "%PDF") {
		t.Error("the PDF's bytes were sent")
	}

	r := admin.get(u.URL)
	wantStatus(t, r, http.StatusOK)
	if ct, cd := r.Header.Get("Content-Type"), r.Header.Get("Content-Disposition"); ct != "text/plain; charset=utf-8" ||
		cd != `attachment; filename=report.pdf.txt` || !strings.Contains(r.body, "the cat is called Pixel.") {
		t.Errorf("the PDF's text is served as %s / %s: %.200q", ct, cd, r.body)
	}
	if page := admin.get("/s/" + id).body; !strings.Contains(page, `href="/files/`+u.ID+`"`) {
		t.Error("the chat after a reload has no chip for the PDF")
	}

	// Export and import keep it the text of a PDF.
	export := admin.get("/s/" + id + "/export")
	wantStatus(t, export, http.StatusOK)
	if !strings.Contains(export.body, `"type": "application/pdf"`) && !strings.Contains(export.body, `"type":"application/pdf"`) {
		t.Errorf("the export does not mark the PDF's text: %.600s", export.body)
	}
}

// Hostile PDFs are refused with the reason, in time, while the server stays up and
// small: the parser runs in a child with its own limits.
func TestHostilePDFUploadsAreRefused(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	before := testkit.PeakRSS(t)
	cases := []struct {
		name string
		data []byte
		says string
	}{
		{"bomb.pdf", pdftest.Page(pdftest.Stream("/Filter /FlateDecode", pdftest.Bomb("BT /F1 12 Tf (", 2<<30, 'A'))), "bomb.pdf: this PDF could not be read: "},
		{"scan.pdf", pdftest.Page(pdftest.Stream("", []byte("q 612 0 0 792 0 0 cm Q"))), "scan.pdf: this PDF could not be read: it has no text layer"},
		{"nested.pdf", pdftest.Page(pdftest.Object(strings.Repeat("<< /A ", 300_000) + strings.Repeat(">> ", 300_000))), "nested.pdf: this PDF could not be read: "},
		{"cut.pdf", pdftest.Text(false, "hello")[:200], "cut.pdf: this PDF could not be read: it is damaged"},
	}
	for _, c := range cases {
		start := time.Now()
		r := admin.upload(id, c.name, c.data)
		if r.StatusCode != http.StatusBadRequest || !strings.Contains(r.body, c.says) {
			t.Errorf("%s: %d %q, want 400 saying %q", c.name, r.StatusCode, r.body, c.says)
		}
		if took := time.Since(start); took > 25*time.Second {
			t.Errorf("%s took %v", c.name, took)
		}
	}
	grew := testkit.PeakRSS(t) - before
	t.Logf("peak RSS of this (the parent) process: %d MiB before, grew by %d MiB", before>>20, grew>>20)
	if grew > 96<<20 {
		t.Errorf("the server's peak RSS grew by %d MiB over the hostile uploads", grew>>20)
	}
	// Still serving, and a good PDF still reads.
	if u := admin.uploadOK(id, "ok.pdf", pdftest.Text(false, "fine")); u.MIME != "application/pdf" {
		t.Errorf("after the hostile ones: %+v", u)
	}
}
