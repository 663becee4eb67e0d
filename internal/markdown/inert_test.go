package markdown_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"atrium/internal/markdown"
)

// checkInert fails if inert accepts goldmark's HTML for src but its result differs from
// the sanitiser's. It reports whether inert accepted it.
func checkInert(t testing.TB, src string) bool {
	t.Helper()
	html, got, ok, want := markdown.InertAndSanitized(src)
	if ok && got != want {
		t.Fatalf("source %q\ngoldmark  %q\ninert     %q\nsanitiser %q", src, html, got, want)
	}
	return ok
}

// inertPieces are fragments that random documents are made of: markdown syntax of every
// kind, entities, quotes, raw HTML, URLs, control characters and invalid UTF-8.
var inertPieces = []string{
	"word", "words ", "Other", " ", " ", "  ", "\n", "\n", "\n\n", "\t", "\r\n", "\r",
	"**", "*", "_", "__", "~~", "`", "``", "```", "```go\n", "``` c++\n", "```we\"ird\n",
	"```<x>\n", "~~~\n", "```\n", "- ", "* ", "+ ", "1. ", "3) ", "10. ", "> ", "# ", "## ",
	"###### ", "---\n", "===\n", "***\n", "| a | b |\n", "|---|:-:|\n", "|:--|--:|\n", "| 1 |",
	"- [ ] ", "- [x] ", "\\", "\\*", "&amp;", "&copy;", "&quot;", "&lt;", "&gt;", "&#35;",
	"&#0;", "&#x27;", "&", "'", "\"", "<", ">", "<b>", "</b>", "<script>", "<!-- c -->",
	"<a href=x>", "[x](http://a.b/c)", "[ref]", "[ref]: http://r.x\n", "www.x.com",
	"a@b.co", "https://x.y/z?q=1&r=2", "mailto:a@b.c", "![i](http://x/y.png)",
	"javascript:alert(1)", "    code\n", "é", "日本", "\u2028", "\x00", "\x01", "\x7f", "\xff",
	"\xe2\x82", ":", "(", ")", "!", "?", ".", ",", "{", "}", "|", "=", "+", "-", "#",
}

// TestInertMatchesSanitizer checks that the fast path gives exactly the sanitiser's
// output on random documents, every prefix of them, and the test inputs of this
// package, and that it is taken for plain prose and code.
func TestInertMatchesSanitizer(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	accepted, total := 0, 0
	for range 1500 {
		var b strings.Builder
		for range 1 + rnd.IntN(40) {
			b.WriteString(inertPieces[rnd.IntN(len(inertPieces))])
		}
		doc := b.String()
		for _, src := range []string{doc, doc[:rnd.IntN(len(doc)+1)]} {
			total++
			if checkInert(t, src) {
				accepted++
			}
		}
	}
	t.Logf("inert accepted %d of %d random documents", accepted, total)
	if accepted < total/20 {
		t.Errorf("inert accepted only %d of %d random documents", accepted, total)
	}
	for i := 0; i <= len(sample); i += 7 {
		checkInert(t, sample[:i])
	}
	for _, src := range []string{
		"Plain words, it's \"quoted\" & <escaped>.\n\n- a\n- b\n\n1. x\n2. y\n",
		"# Title\n\n> quote **bold** *em* ~~del~~ `code`\n\n---\n\na  \nb\\\nc\n",
		"```go\nfunc f() { return \"x\" + 'y' }\n```\n\n| a | b | c |\n|:--|--:|:-:|\n| 1 | 2 | 3 |\n",
		"- [x] done\n- [ ] todo\n",
		"```python\ndef f(x):\n    return x < 'a'  # it's\n```\n",
		"```html\n<script>alert(\"x\")</script></pre>\n```\n",
	} {
		if !checkInert(t, src) {
			t.Errorf("inert does not accept %q", src)
		}
	}
	for _, src := range []string{"[x](https://a.b)", "see www.example.com", "a@b.co", "3. x", "![i](http://x/y.png)"} {
		if checkInert(t, src) {
			t.Errorf("inert accepts %q", src)
		}
	}
}

func FuzzInert(f *testing.F) {
	for _, p := range inertPieces {
		f.Add(p)
	}
	f.Add(sample)
	f.Fuzz(func(t *testing.T, src string) { checkInert(t, src) })
}
