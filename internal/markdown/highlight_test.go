package markdown_test

import (
	"strings"
	"testing"

	"atrium/internal/markdown"

	"golang.org/x/net/html"
)

// codeOf returns the <code> element of the single code block in a rendered fragment,
// and the classes of the spans inside it.
func codeOf(t *testing.T, out string) (*html.Node, []string) {
	t.Helper()
	var code *html.Node
	var classes []string
	for _, n := range elements(t, out) {
		switch n.Data {
		case "code":
			if code != nil {
				t.Fatalf("two <code> elements in\n%s", out)
			}
			code = n
		case "span":
			if code == nil {
				t.Fatalf("a <span> outside code in\n%s", out)
			}
			c, _ := attr(n, "class")
			classes = append(classes, c)
		}
	}
	if code == nil {
		t.Fatalf("no <code> in\n%s", out)
	}
	return code, classes
}

// textOf is the text content of n, what pre.innerText gives Copy.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

func TestHighlightLanguages(t *testing.T) {
	tests := []struct {
		lang, code string
		want       []string // spans that must be there, as <span class="c">text</span>
	}{
		{"go", "func main() {\n\tfmt.Println(\"hi\", 1 < 2)\n}\n",
			[]string{`<span class="kd">func</span>`, `<span class="nf">main</span>`, `<span class="s">&#34;hi&#34;</span>`, `<span class="mi">1</span>`}},
		{"python", "def f(x):\n    return x + 1  # add\n",
			[]string{`<span class="k">def</span>`, `<span class="nf">f</span>`, `<span class="c1"># add</span>`}},
		{"js", "const s = 'a';\n", []string{`<span class="kr">const</span>`, `<span class="s1">&#39;a&#39;</span>`}},
		{"bash", "echo \"$HOME\" | grep x\n", []string{`<span class="nb">echo</span>`, `<span class="nv">$HOME</span>`}},
		{"sql", "SELECT id FROM t WHERE n = 1;\n", []string{`<span class="k">SELECT</span>`, `<span class="k">FROM</span>`}},
	}
	for _, tt := range tests {
		t.Run(tt.lang, func(t *testing.T) {
			out := markdown.Render("```" + tt.lang + "\n" + tt.code + "```\n")
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("Render of %s code =\n%s\nwant it to contain %s", tt.lang, out, w)
				}
			}
			code, classes := codeOf(t, out)
			if c, _ := attr(code, "class"); c != "language-"+tt.lang {
				t.Errorf("code class = %q, want language-%s", c, tt.lang)
			}
			if len(classes) < len(tt.want) {
				t.Errorf("only %d spans: %v", len(classes), classes)
			}
			if got := textOf(code); got != tt.code {
				t.Errorf("text of the highlighted block = %q, want the code %q", got, tt.code)
			}
		})
	}
}

// Code that is HTML, closes the <pre>, or opens a script is shown as text and
// highlighted as text: no element but the spans, and the text is the code.
func TestHighlightHostileCode(t *testing.T) {
	for _, c := range []struct{ lang, code string }{
		{"html", "<script>alert(1)</script>\n<img src=x onerror=alert(2)>\n"},
		{"go", "s := \"</code></pre><script>alert(1)</script>\"\n"},
		{"js", "document.body.innerHTML = '<iframe src=javascript:alert(1)>';\n"},
		{"html", "</pre></div><a href=\"javascript:alert(1)\" style=\"x\">x</a>\n"},
		{"go", "a\r\nb := `\x00`\n"},
	} {
		out := markdown.Render("```" + c.lang + "\n" + c.code + "```\n")
		if m := unsafeHTML(out); m != "" {
			t.Errorf("Render of %q has %s:\n%s", c.code, m, out)
		}
		code, classes := codeOf(t, out)
		if len(classes) == 0 && !strings.Contains(c.code, "\x00") {
			t.Errorf("no highlighting for %q:\n%s", c.code, out)
		}
		for _, n := range elements(t, out) {
			switch n.Data {
			case "div", "button", "pre", "code", "span":
			default:
				t.Errorf("element <%s> in the rendering of %q:\n%s", n.Data, c.code, out)
			}
		}
		want := strings.ReplaceAll(strings.ReplaceAll(c.code, "\r\n", "\n"), "\x00", "\uFFFD")
		if got := strings.ReplaceAll(textOf(code), "\r\n", "\n"); got != want {
			t.Errorf("text = %q, want %q", got, want)
		}
	}
}

// An unknown language, no language, and a block whose fence is still open (a reply
// streaming in) render as plain escaped code, exactly as without highlighting.
func TestHighlightFallsBackToPlain(t *testing.T) {
	for src, want := range map[string]string{
		"```nosuchlang\nx := <b>\n```\n": `<pre><code class="language-nosuchlang">x := &lt;b&gt;` + "\n</code></pre>",
		"```\nfunc f() {}\n```\n":        "<pre><code>func f() {}\n</code></pre>",
		"```go\nfunc f() {}\n":           `<pre><code class="language-go">func f() {}` + "\n</code></pre>",
		"- a\n\n  ```go\n  func f()\n":   `<pre><code class="language-go">func f()` + "\n</code></pre>",
	} {
		out := markdown.Render(src)
		if !strings.Contains(out, want) || strings.Contains(out, "<span") {
			t.Errorf("Render(%q) =\n%s\nwant plain %s", src, out, want)
		}
	}
	// Once the fence closes, the same block is highlighted.
	if out := markdown.Render("```go\nfunc f() {}\n```"); !strings.Contains(out, `<span class="kd">func</span>`) {
		t.Errorf("closed block not highlighted:\n%s", out)
	}
}

// With a link beside it the document goes through the sanitiser, which keeps the spans.
func TestHighlightSurvivesSanitizer(t *testing.T) {
	out := markdown.Render("[docs](https://example.com)\n\n```go\nfunc f() {}\n```\n")
	if !strings.Contains(out, `<span class="kd">func</span>`) || !strings.Contains(out, `rel="nofollow`) {
		t.Errorf("Render =\n%s\nwant the link sanitised and the spans kept", out)
	}
}
