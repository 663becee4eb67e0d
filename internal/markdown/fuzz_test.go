package markdown_test

import (
	"strings"
	"testing"

	"golang.org/x/net/html"

	"atrium/internal/markdown"
)

// unsafeHTML names what must never come out of rendering model output, as a browser
// would parse it: script-like elements, event handler or style attributes, URLs that
// run code, or a raw NUL. "" means none. (The code blocks' Copy button is Atrium's own.)
func unsafeHTML(s string) string {
	if strings.ContainsRune(s, 0) {
		return "a NUL"
	}
	z := html.NewTokenizer(strings.NewReader(s))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return ""
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			switch tok.Data {
			case "script", "style", "iframe", "object", "embed", "form", "input", "meta", "link", "base", "svg", "math":
				return "a <" + tok.Data + "> element"
			}
			for _, a := range tok.Attr {
				k, v := strings.ToLower(a.Key), strings.ToLower(strings.TrimSpace(a.Val))
				if strings.HasPrefix(k, "on") || k == "style" || k == "srcdoc" || k == "formaction" {
					return "the attribute " + k
				}
				if k == "href" || k == "src" {
					for _, scheme := range []string{"javascript:", "vbscript:", "data:"} {
						if strings.HasPrefix(v, scheme) {
							return k + "=" + v
						}
					}
				}
			}
		}
	}
}

// FuzzRender renders arbitrary markdown, whole and as a stream split at every fifth
// byte: nothing unsafe comes out, and the shortcut for a growing tail (ExtendTail) gives
// what a full render gives whenever it claims to know.
func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"# Title\n\nSome **bold** and *it* text, `code`, [link](https://example.com).",
		"<script>alert(1)</script>", "[x](javascript:alert(1))", "![img](data:text/html,<script>)",
		"<a href=\"javascript:alert(1)\" onclick=\"x()\">a</a>", "```go\nfunc main() {}\n```\nafter",
		"- item\n- **two** words\n\n1. one\n2. two", "| a | b |\n|---|---|\n| 1 | 2 |",
		"text with \x00 NUL and \u202e bidi", "<iframe src=x>", "> quote\n>> nested", "***\n___",
		"www.example.com and https://a.example/?q=<b>", "&lt;script&gt; &#106;avascript:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out := markdown.Render(src)
		if m := unsafeHTML(out); m != "" {
			t.Fatalf("Render(%q) has %s:\n%s", src, m, out)
		}
		for cut := 1; cut < len(src); cut += 5 {
			old, add := src[:cut], src[cut:]
			if !strings.HasPrefix(src, old) || old == "" || add == "" {
				continue
			}
			if got, ok := markdown.ExtendTail([]byte(old), []byte(add), markdown.Render(old)); ok {
				if want := markdown.Render(src); got != want {
					t.Fatalf("ExtendTail(%q, %q) =\n%q\nwant Render =\n%q", old, add, got, want)
				}
			}
		}
	})
}
