package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"mime/multipart"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/llm/llmtest"
	"atrium/internal/testkit"
	"atrium/web"
)

// pngImage is a w×h PNG.
func pngImage(tb testing.TB, w, h int) []byte {
	tb.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	seed := uint32(1)
	for y := 0; y < min(h, 256); y++ { // noise, so the file has some size
		for x := 0; x < min(w, 256); x++ {
			seed = seed*1664525 + 1013904223
			img.Set(x, y, color.RGBA{R: uint8(seed >> 24), G: uint8(seed >> 16), B: 160, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// upload posts one file to the chat's upload route as the composer does.
func (b *browser) upload(sessionID, name string, data []byte) response {
	b.env.t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	f, _ := w.CreateFormFile("file", name)
	f.Write(data)
	w.Close()
	req, _ := http.NewRequest(http.MethodPost, b.env.ts.URL+"/s/"+sessionID+"/files", &body)
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("X-CSRF-Token", b.token())
	req.Header.Set("HX-Request", "true")
	// A PDF is read in a child with 15 s of wall clock: on a loaded machine the answer
	// may come later than the browser's usual 10 s.
	client := *b.client
	client.Timeout = time.Minute
	return b.doWith(&client, req)
}

type uploaded struct {
	ID, Name, Kind, MIME, URL string
	Size                      int64
	Tokens                    int
}

// uploadOK uploads a file that must be accepted and returns what the server answered.
func (b *browser) uploadOK(sessionID, name string, data []byte) uploaded {
	b.env.t.Helper()
	r := b.upload(sessionID, name, data)
	wantStatus(b.env.t, r, http.StatusOK)
	var u uploaded
	if err := json.Unmarshal([]byte(r.body), &u); err != nil {
		b.env.t.Fatalf("upload answer %q: %v", r.body, err)
	}
	return u
}

// sendFiles sends a message naming uploaded files, as the composer's form does.
func (c *wsConn) sendFiles(text string, ids ...string) {
	c.t.Helper()
	t, _ := json.Marshal(text)
	f, _ := json.Marshal(ids)
	c.write(websocket.TextMessage, `{"type":"send","text":`+string(t)+`,"files":`+string(f)+`,"nonce":"n1","HEADERS":{"HX-Request":"true"}}`)
}

// An image and a markdown file attached to a message reach a vision model: the image
// as an image_url part with a data: URL, the file as a named, fenced block before the
// typed text; the chat shows a thumbnail and a chip, live and after a reload; the
// files are served to their owner only.
func TestAttachedFilesReachTheModel(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model vision", "")
	id := admin.newSession()
	pic := pngImage(t, 64, 48)
	img := admin.uploadOK(id, "chart.png", pic)
	if img.Kind != "image" || img.MIME != "image/png" || img.Size != int64(len(pic)) || img.Tokens <= 0 {
		t.Fatalf("image upload = %+v", img)
	}
	doc := admin.uploadOK(id, "notes.md", []byte("# Plan\n\n```go\nx := 1\n```\n"))
	if doc.Kind != "text" || doc.MIME != "text/markdown" || doc.Tokens <= 0 {
		t.Fatalf("text upload = %+v", doc)
	}

	env.llm.Enqueue(llmtest.Reply{Text: []string{"A blue chart."}})
	ws := admin.dial(id)
	ws.sendFiles("What is this?", img.ID, doc.ID)
	all := ws.until(`data-testid="run-link"`)
	runs := runLinks(t, all[len(all)-1])
	frames := strings.Join(all, "")
	if !strings.Contains(frames, `data-testid="file-thumb"`) || !strings.Contains(frames, `data-testid="file-chip"`) {
		t.Errorf("the live user message shows no files: %.2000s", frames)
	}

	req := env.llm.LastRequest().Chat
	user := req.Messages[len(req.Messages)-1]
	wantURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pic)
	if user.Role != "user" || len(user.Images) != 1 || user.Images[0] != wantURL {
		t.Fatalf("user message sent = %+v", user)
	}
	wantText := "Attached file \"notes.md\" (text/markdown, 25 bytes):\n````\n# Plan\n\n```go\nx := 1\n```\n````\n\nWhat is this?"
	if user.Content != wantText {
		t.Errorf("text sent =\n%q\nwant\n%q", user.Content, wantText)
	}

	// The run records the request exactly as sent; its viewer folds the image.
	if len(runs) != 1 {
		t.Fatalf("run links %v", runs)
	}
	run := openRun(t, admin, id, runs[0])
	b64 := base64.StdEncoding.EncodeToString(pic)
	if strings.Contains(run.body, b64[:2000]) || !strings.Contains(run.body, "data:image/png;base64,["+itoa(int64(len(b64)))+" base64 characters") {
		t.Errorf("the run viewer does not fold the image (%d bytes of page)", len(run.body))
	}
	export := admin.get("/runs/" + runs[0] + "/export")
	wantStatus(t, export, http.StatusOK)
	if !strings.Contains(export.body, wantURL) {
		t.Error("the run's export lacks the image as sent")
	}

	page := admin.get("/s/" + id).body
	for _, want := range []string{`data-testid="file-thumb"`, `src="/files/` + img.ID + `"`, `href="/files/` + doc.ID + `"`, "notes.md"} {
		if !strings.Contains(page, want) {
			t.Errorf("the chat after a reload lacks %s", want)
		}
	}

	r := admin.get("/files/" + img.ID)
	wantStatus(t, r, http.StatusOK)
	if r.Header.Get("Content-Type") != "image/png" || r.Header.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.HasPrefix(r.Header.Get("Content-Disposition"), "inline") || r.body != string(pic) {
		t.Errorf("image served as %v", r.Header)
	}
	r = admin.get("/files/" + doc.ID)
	if r.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !strings.HasPrefix(r.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("text served as %v", r.Header)
	}

	// Another user: 404 for the file, its removal, and a send naming it.
	bob := env.user(admin, "bob")
	wantStatus(t, bob.get("/files/"+img.ID), http.StatusNotFound)
	wantStatus(t, bob.post("/files/"+img.ID+"/delete", nil), http.StatusNotFound)
	wantStatus(t, bob.upload(id, "x.txt", []byte("hi")), http.StatusNotFound)
	// A sent file cannot be removed any more, not even by its owner.
	wantStatus(t, admin.post("/files/"+img.ID+"/delete", nil), http.StatusNotFound)
}

// The content decides what a file is, never its name: an image named .txt is an
// image, text named .png is text, SVG and HTML are text and are only ever downloaded
// as plain text, and no file is kept by a cache; binaries, broken images and oversized
// ones are refused with the limit.
func TestFileUploadChecks(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()

	if u := admin.uploadOK(id, "photo.txt", pngImage(t, 4, 4)); u.Kind != "image" || u.MIME != "image/png" {
		t.Errorf("a PNG named .txt: %+v", u)
	} else if r := admin.get(u.URL); r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("an image is served with Cache-Control %q, want no-store", r.Header.Get("Cache-Control"))
	}
	if u := admin.uploadOK(id, "fake.png", []byte("just text, not a PNG")); u.Kind != "text" {
		t.Errorf("text named .png: %+v", u)
	}
	for name, body := range map[string]string{
		"evil.svg":  `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`,
		"evil.html": `<!doctype html><html><body><script>alert(1)</script></body></html>`,
	} {
		u := admin.uploadOK(id, name, []byte(body))
		if u.Kind != "text" {
			t.Errorf("%s: %+v", name, u)
		}
		r := admin.get(u.URL)
		if ct, cd := r.Header.Get("Content-Type"), r.Header.Get("Content-Disposition"); ct != "text/plain; charset=utf-8" ||
			!strings.HasPrefix(cd, "attachment") || r.Header.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(r.Header.Get("Content-Security-Policy"), "sandbox") || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s served as %s / %s (Cache-Control %q)", name, ct, cd, r.Header.Get("Cache-Control"))
		}
	}

	// Anthropic refuses an image whose base64 is over 5 MB, for every later turn of the
	// chat too: 3,750,000 bytes is the most an image may have. (PNG decoding stops at
	// the end chunk, so padding makes a valid image of any size.)
	padded := func(n int) []byte { return append(pngImage(t, 4, 4), make([]byte, n-len(pngImage(t, 4, 4)))...) }
	if u := admin.uploadOK(id, "limit.png", padded(3_750_000)); u.Kind != "image" {
		t.Errorf("an image of exactly the limit: %+v", u)
	}

	broken := pngImage(t, 50, 50)
	broken = broken[:len(broken)-30] // the header decodes, the pixels do not
	cases := []struct {
		name   string
		data   []byte
		status int
		says   string
	}{
		{"blob.bin", []byte{0x00, 0x01, 0x02, 0xff, 0xfe}, http.StatusBadRequest, "binary file"},
		{"doc.pdf", []byte("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"), http.StatusBadRequest, "doc.pdf: this PDF could not be read: it is damaged"},
		{"broken.png", broken, http.StatusBadRequest, "not a readable PNG"},
		{"big.png", padded(3_750_001), http.StatusRequestEntityTooLarge, "big.png is larger than 3.75 MB, the limit for an image"},
		{"wide.png", pngImage(t, 8001, 1), http.StatusRequestEntityTooLarge, "at most 8000 on a side"},
		{"big.txt", bytes.Repeat([]byte("a"), 1<<20+1), http.StatusRequestEntityTooLarge, "1 MiB"},
		{"huge.txt", bytes.Repeat([]byte("a"), 6<<20), http.StatusRequestEntityTooLarge, "at most 5184 KiB"},
		// Longer than what is read of an upload (5 MiB), which then ends inside an "é".
		{"accents.txt", bytes.Repeat([]byte("é"), (5<<20+1024)/2), http.StatusRequestEntityTooLarge, "accents.txt is larger than 1 MiB, the limit for a text file"},
		{"big.bin", append(bytes.Repeat([]byte("a"), 1000), make([]byte, 2<<20)...), http.StatusBadRequest, "binary file"},
	}
	for _, c := range cases {
		r := admin.upload(id, c.name, c.data)
		if r.StatusCode != c.status || !strings.Contains(r.body, c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, r.StatusCode, r.body, c.status, c.says)
		}
	}

	// A text file larger than half the model's context is refused with the limit.
	long := strings.Repeat("word ", 20000) // ~20k tokens; the default window's half is 14,336
	if r := admin.upload(id, "long.txt", []byte(long)); r.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, "14336 tokens") {
		t.Errorf("a file over the token limit: %d %q", r.StatusCode, r.body)
	}

	// This model is not marked vision: an image upload is kept, but its send is refused
	// with what to do, and nothing is stored.
	img := admin.uploadOK(id, "p.png", pngImage(t, 4, 4))
	ws := admin.dial(id)
	ws.sendFiles("look", img.ID)
	frames := strings.Join(ws.until(`id="send-result"`), "")
	if !strings.Contains(frames, "does not take images") || !strings.Contains(frames, "vision") {
		t.Errorf("send of an image to a text model: %.1500s", frames)
	}
	if msgs := env.messages(id); len(msgs) != 0 {
		t.Errorf("messages stored: %+v", msgs)
	}
}

// Uploads that no message used expire after a day; the chip's remove deletes one now.
func TestUnsentFilesExpire(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	old := admin.uploadOK(id, "a.txt", []byte("first"))
	gone := admin.uploadOK(id, "b.txt", []byte("second"))
	wantStatus(t, admin.post("/files/"+gone.ID+"/delete", nil), http.StatusNoContent)
	wantStatus(t, admin.get("/files/"+gone.ID), http.StatusNotFound)
	env.clock.advance(25 * time.Hour)
	admin = env.login("admin", testPassword) // the login expired meanwhile
	admin.uploadOK(id, "c.txt", []byte("third"))
	wantStatus(t, admin.get("/files/"+old.ID), http.StatusNotFound)
}

// Deleting the chat deletes its files physically: their bytes are in no database file.
func TestDeletedChatLeavesNoFileBytes(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	secret := "zq-attached-secret-" + strings.Repeat("7", 40)
	f := admin.uploadOK(id, "secret.txt", []byte(secret))
	ws := admin.dial(id)
	ws.sendFiles("", f.ID)
	ws.until(finalMarker)
	ws.conn.Close()
	if !bytes.Contains(env.dbFiles(), []byte(secret)) {
		t.Fatal("the file is not in the database files before the deletion (the test would prove nothing)")
	}
	if err := env.db.DeleteSession(context.Background(), id, 1); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(env.dbFiles(), []byte(secret)) {
		t.Error("the deleted chat's file is still in the database files")
	}
}

// Memory extraction reads the user's own words only: a file's text is not among them
// (it is not the user saying it).
func TestExtractionIgnoresFileText(t *testing.T) {
	env := newTestEnvConfig(t, app.Options{}, func(c *config.Config) { c.MemoryExtraction = true })
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	f := admin.uploadOK(id, "bio.txt", []byte("My name is Mallory and I live in Oslo."))
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Noted."}}, llmtest.Reply{Text: []string{`{"actions":[]}`}})
	ws := admin.dial(id)
	ws.sendFiles("I prefer short answers.", f.ID)
	ws.until(finalMarker)
	testkit.Eventually(t, 5*time.Second, "the extraction call", func() bool {
		for _, r := range env.llm.Requests() {
			if strings.Contains(r.Chat.LastUser(), "USER MESSAGE:") {
				return true
			}
		}
		return false
	})
	for _, r := range env.llm.Requests() {
		u := r.Chat.LastUser()
		if strings.Contains(u, "USER MESSAGE:") && (strings.Contains(u, "Mallory") || !strings.Contains(u, "I prefer short answers.")) {
			t.Errorf("extraction input = %q", u)
		}
	}
}

// A chat's JSON export carries its files (name, type, base64 bytes); importing it into
// another account stores them again, checked like uploads, with the message they came
// with; a file that is not what an upload may be fails the whole import.
func TestFilesExportImportRoundTrip(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model vision", "")
	id := admin.newSession()
	pic := pngImage(t, 10, 10)
	img := admin.uploadOK(id, "p.png", pic)
	doc := admin.uploadOK(id, "a.csv", []byte("x,y\n1,2\n"))
	ws := admin.dial(id)
	ws.sendFiles("see", img.ID, doc.ID)
	ws.until(finalMarker)

	export := admin.get("/s/" + id + "/export")
	wantStatus(t, export, http.StatusOK)
	var doc1 struct {
		Chats []struct {
			Messages []struct {
				Role  string
				Files []struct {
					Name, Type string
					Data       []byte
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(export.body), &doc1); err != nil {
		t.Fatal(err)
	}
	files := doc1.Chats[0].Messages[0].Files
	if len(files) != 2 || files[0].Name != "p.png" || files[0].Type != "image/png" || !bytes.Equal(files[0].Data, pic) ||
		files[1].Type != "text/csv" || string(files[1].Data) != "x,y\n1,2\n" {
		t.Fatalf("exported files = %+v", files)
	}
	if md := admin.get("/s/" + id + "/export?format=md").body; !strings.Contains(md, "*Attached: p.png (image/png, ") {
		t.Errorf("markdown export lacks the file line")
	}

	bob := env.user(admin, "bob")
	wantStatus(t, bob.postFile("/sessions/import", "file", export.body), http.StatusSeeOther)
	sessions, err := env.db.OwnerSessions(context.Background(), env.userID("bob"))
	if err != nil || len(sessions) != 1 {
		t.Fatalf("bob's chats: %v %v", sessions, err)
	}
	page := bob.get("/s/" + sessions[0].ID).body
	m := regexp.MustCompile(`src="/files/([0-9a-f-]+)"`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "a.csv") {
		t.Fatalf("the imported chat shows no files")
	}
	if r := bob.get("/files/" + m[1]); r.body != string(pic) || r.Header.Get("Content-Type") != "image/png" {
		t.Errorf("imported image served as %v", r.Header)
	}
	wantStatus(t, admin.get("/files/"+m[1]), http.StatusNotFound)

	// A file an upload would refuse (binary, "type" lying) fails the import, naming it.
	bad := regexp.MustCompile(`("type":\s*"text/csv",\s*"data":\s*")`).ReplaceAllString(export.body, "${1}AAECAwQF")
	if bad == export.body {
		t.Fatal("the test could not alter the export")
	}
	r := bob.postFile("/sessions/import", "file", bad)
	if !strings.Contains(r.body, "chat 1, message 1: file 2: ") || !strings.Contains(r.body, "Nothing was imported") {
		t.Errorf("bad file import: %d %.400s", r.StatusCode, r.body)
	}
	if sessions, _ := env.db.OwnerSessions(context.Background(), env.userID("bob")); len(sessions) != 1 {
		t.Errorf("a failed import stored %d chats", len(sessions)-1)
	}
}

// A 16-bit PNG takes 8 bytes a pixel to decode: one of 3500×3500 pixels (98 MB
// decoded, a few hundred KB on disk) is refused from its header, before it is decoded,
// though its pixel count is within the limit.
func TestWideImageRefusedBeforeDecoding(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	// Every row is the same memory (stride 0), so the encoder needs no 98 MB either.
	const side = 3500
	img := &image.NRGBA64{Pix: make([]byte, 8*side), Stride: 0, Rect: image.Rect(0, 0, side, side)}
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	r := admin.upload(id, "deep.png", b.Bytes())
	if r.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, "deep.png is 3500×3500 pixels of 8 bytes each, 98 MB to decode: at most 96 MB") {
		t.Errorf("a 16-bit %d-byte PNG of %d×%d: %d %q", b.Len(), side, side, r.StatusCode, r.body)
	}
}

// Parallel uploads cannot all pass the check of unsent files: exactly maxUnsentFiles
// (32) are stored, the others are refused with the reason.
func TestParallelUploadsKeepTheUnsentLimit(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	admin.token() // fetched once, before the uploads share it
	const n = 48
	codes := make(chan response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes <- admin.upload(id, fmt.Sprintf("f%d.txt", i), []byte(strings.Repeat("word ", 2000))) })
	}
	wg.Wait()
	close(codes)
	ok, refused := 0, 0
	for r := range codes {
		switch {
		case r.StatusCode == http.StatusOK:
			ok++
		case r.StatusCode == http.StatusConflict && strings.Contains(r.body, "not sent yet"):
			refused++
		default:
			t.Errorf("upload: %d %q", r.StatusCode, r.body)
		}
	}
	stored, err := env.db.CountUnsentAttachments(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 32 || refused != n-32 || stored != 32 {
		t.Errorf("%d uploads stored (%d unsent in the database), %d refused; want 32 and %d", ok, stored, refused, n-32)
	}
}

// At most two images decode at once: an upload waits while both slots are taken, and
// goes on when one frees.
func TestImageDecodesWaitForASlot(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	admin.token()
	release := web.HoldImageDecodes()
	done := make(chan response, 1)
	go func() { done <- admin.upload(id, "p.png", pngImage(t, 8, 8)) }()
	select {
	case r := <-done:
		release()
		t.Fatalf("the upload decoded while every slot was taken: %d %q", r.StatusCode, r.body)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case r := <-done:
		wantStatus(t, r, http.StatusOK)
	case <-time.After(10 * time.Second):
		t.Fatal("the upload still waits after the slots were freed")
	}
}

// Removing an upload, or its expiry, deletes its bytes from every database file, the
// WAL included (secure_delete zeroes the pages; the checkpoint takes the old ones out
// of the WAL).
func TestRemovedUploadLeavesNoBytes(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	removed := "zq-removed-secret-" + strings.Repeat("5", 40)
	expired := "zq-expired-secret-" + strings.Repeat("6", 40)
	f := admin.uploadOK(id, "removed.txt", []byte(removed))
	admin.uploadOK(id, "expired.txt", []byte(expired))
	if all := env.dbFiles(); !bytes.Contains(all, []byte(removed)) || !bytes.Contains(all, []byte(expired)) {
		t.Fatal("the uploads are not in the database files (the test would prove nothing)")
	}
	wantStatus(t, admin.post("/files/"+f.ID+"/delete", nil), http.StatusNoContent)
	if bytes.Contains(env.dbFiles(), []byte(removed)) {
		t.Error("the removed upload is still in the database files")
	}
	if n, err := env.db.PruneUnsentAttachments(context.Background(), time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("pruned %d: %v", n, err)
	}
	if bytes.Contains(env.dbFiles(), []byte(expired)) {
		t.Error("the expired upload is still in the database files")
	}
}
