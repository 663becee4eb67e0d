package web

import (
	"encoding/json"
	"strings"
	"testing"

	"atrium/internal/mcp"
)

func TestAttachList(t *testing.T) {
	for in, want := range map[string]string{
		`{"attach":"a\nb"}`:          "a\nb",
		`{"attach":["a\nb","c\nd"]}`: "a\nb|c\nd",
		`{"attach":null}`:            "",
		`{}`:                         "",
	} {
		var f clientFrame
		if err := json.Unmarshal([]byte(in), &f); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := strings.Join(f.Attach, "|"); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
	var f clientFrame
	if err := json.Unmarshal([]byte(`{"attach":{"x":1}}`), &f); err == nil {
		t.Error("an object was accepted as attachments")
	}
}

func TestWriteAttachment(t *testing.T) {
	var b strings.Builder
	writeAttachment(&b, "file:///a.md", mcp.ResourceContent{MimeType: "text/markdown", Text: "x ```` y\n"})
	want := "Attached resource file:///a.md (text/markdown):\n`````\nx ```` y\n`````\n\n"
	if b.String() != want {
		t.Errorf("text: %q, want %q", b.String(), want)
	}
	b.Reset()
	writeAttachment(&b, "file:///a.png", mcp.ResourceContent{MimeType: "image/png", BlobBytes: 1234})
	if !strings.Contains(b.String(), "1234 bytes") || strings.Contains(b.String(), "```") {
		t.Errorf("binary: %q", b.String())
	}
}
