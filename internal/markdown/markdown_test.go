package markdown_test

import (
	"strings"
	"testing"

	"atrium/internal/markdown"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// elements returns the element nodes of a rendered fragment, in document order.
func elements(t *testing.T, fragment string) []*html.Node {
	t.Helper()
	ctx := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	nodes, err := html.ParseFragment(strings.NewReader(fragment), ctx)
	if err != nil {
		t.Fatalf("parse %q: %v", fragment, err)
	}
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return out
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func TestRenderBlocks(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // substrings of the output
	}{
		{"heading", "# Title\n\n## Sub", []string{"<h1>Title</h1>", "<h2>Sub</h2>"}},
		{"list", "- one\n- two\n\n1. first\n2. second", []string{"<ul>\n<li>one</li>\n<li>two</li>\n</ul>", "<ol>\n<li>first</li>"}},
		{"task list", "- [x] done\n- [ ] todo", []string{`<input checked="" disabled="" type="checkbox"> done`, `<input disabled="" type="checkbox"> todo`}},
		{"table", "| a | b |\n|:--|--:|\n| 1 | 2 |", []string{"<table>", `<th align="left">a</th>`, `<td align="right">2</td>`}},
		{"strikethrough", "~~gone~~", []string{"<del>gone</del>"}},
		{"code with copy button", "```\nfmt.Println(1 < 2)\n```", []string{
			`<div class="code"><button type="button" class="copy" data-copy>Copy</button><pre><code>fmt.Println(1 &lt; 2)` + "\n</code></pre></div>",
		}},
		{"indented code", "    x := 1\n", []string{`<div class="code"><button type="button" class="copy" data-copy>Copy</button><pre><code>x := 1` + "\n</code></pre></div>"}},
		{"autolink", "see https://example.com/a?b=1", []string{`<a href="https://example.com/a?b=1"`, `target="_blank"`}},
		{"inline code", "use `<b>`", []string{"<code>&lt;b&gt;</code>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := markdown.Render(tt.src)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Render(%q) =\n%s\nwant it to contain\n%s", tt.src, got, w)
				}
			}
		})
	}
}

func TestRenderEmpty(t *testing.T) {
	if got := markdown.Render(""); got != "" {
		t.Errorf("Render(\"\") = %q, want empty", got)
	}
}

func TestRenderLinks(t *testing.T) {
	got := markdown.Render("[site](https://example.com) [mail](mailto:a@example.com)")
	var links int
	for _, n := range elements(t, got) {
		if n.Data != "a" {
			continue
		}
		links++
		href, _ := attr(n, "href")
		rel, _ := attr(n, "rel")
		for _, tok := range []string{"nofollow", "noreferrer"} {
			if !strings.Contains(rel, tok) {
				t.Errorf("link %s: rel=%q lacks %s", href, rel, tok)
			}
		}
		if strings.HasPrefix(href, "https:") {
			if target, _ := attr(n, "target"); target != "_blank" || !strings.Contains(rel, "noopener") {
				t.Errorf("link %s: target=%q rel=%q, want _blank and noopener", href, target, rel)
			}
		}
	}
	if links != 2 {
		t.Errorf("got %d links in %s, want 2", links, got)
	}
}

// TestRenderIsInert feeds hostile input and checks that no active content survives.
func TestRenderIsInert(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		wantText string // must appear escaped, as text
	}{
		{"script block", "<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"},
		{"script inline", "hi <script>alert(1)</script> there", "&lt;script&gt;"},
		{"img onerror", `<img src=x onerror="alert(1)">`, "&lt;img src=x onerror="},
		{"img onerror inline", `text <img src=x onerror=alert(1)>`, "&lt;img"},
		{"javascript link", "[x](javascript:alert(1))", "x"},
		{"javascript link entity", "[x](jav&#x61;script:alert(1))", "x"},
		{"javascript autolink", "<javascript:alert(1)>", ""},
		{"data link", "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)", "x"},
		{"relative link", "[x](/admin/users)", "x"},
		{"image", "![alt](javascript:alert(1))", "alt"},
		{"raw pre", "<pre>x</pre>", "&lt;pre&gt;x&lt;/pre&gt;"},
		{"iframe", "<iframe src=https://evil.example></iframe>", "&lt;iframe"},
		{"style", "<style>body{display:none}</style>", "&lt;style&gt;"},
		{"html comment", "<!-- hidden -->", "&lt;!-- hidden --&gt;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := markdown.Render(tt.src)
			if !strings.Contains(got, tt.wantText) {
				t.Errorf("Render(%q) = %s, want text %q", tt.src, got, tt.wantText)
			}
			for _, n := range elements(t, got) {
				switch n.Data {
				case "script", "img", "iframe", "style", "object", "embed":
					t.Errorf("Render(%q) = %s: has a <%s> element", tt.src, got, n.Data)
				}
				if n.Data == "pre" && (n.Parent == nil || n.Parent.Data != "div") {
					t.Errorf("Render(%q) = %s: a <pre> the model typed became an element", tt.src, got)
				}
				for _, a := range n.Attr {
					v := strings.ToLower(strings.TrimSpace(a.Val))
					if strings.HasPrefix(a.Key, "on") || a.Key == "style" || a.Key == "src" {
						t.Errorf("Render(%q) = %s: attribute %s survived", tt.src, got, a.Key)
					}
					if (a.Key == "href" || a.Key == "src") && !strings.HasPrefix(v, "http:") && !strings.HasPrefix(v, "https:") && !strings.HasPrefix(v, "mailto:") {
						t.Errorf("Render(%q) = %s: %s=%q", tt.src, got, a.Key, a.Val)
					}
				}
			}
		})
	}
}

func TestImagesBecomeLinks(t *testing.T) {
	got := markdown.Render("![a cat](https://example.com/cat.png)")
	want := `<a href="https://example.com/cat.png"`
	if !strings.Contains(got, want) || strings.Contains(got, "<img") {
		t.Errorf("Render(image) = %s, want a link %s and no <img>", got, want)
	}
}

func TestSplitStable(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // src[:SplitStable(src)]
	}{
		{"empty", "", ""},
		{"one paragraph", "hello\nworld", ""},
		{"one paragraph and blank", "hello\n\n", ""},
		{"two paragraphs", "one\n\ntwo\n", "one\n\n"},
		{"unfinished next line", "one\n\ntw", "one\n\n"},
		{"unfinished next line, not a letter", "one\n\n-", ""},
		{"unfinished next line, digit", "one\n\n1", ""},
		{"unfinished next line, indented", "one\n\n  tw", ""},
		{"unfinished line in a fence", "```\na\n\ntw", ""},
		{"three paragraphs", "one\n\ntwo\n\nthree", "one\n\ntwo\n\n"},
		{"three paragraphs, last line done", "one\n\ntwo\n\nthree\n", "one\n\ntwo\n\n"},
		{"several blank lines", "one\n\n\n\ntwo\n", "one\n\n\n\n"},
		{"whitespace-only blank", "one\n  \t\ntwo\n", "one\n  \t\n"},
		{"crlf", "one\r\n\r\ntwo\r\n", "one\r\n\r\n"},
		{"open fence", "intro\n\n```go\na\n\nb\n", "intro\n\n"},
		{"open fence with blank then text", "intro\n\n```\ncode\n\nmore\n\nstill code\n", "intro\n\n"},
		{"closed fence", "```\na\n\nb\n```\n\nafter\n", "```\na\n\nb\n```\n\n"},
		{"tilde fence", "~~~\na\n\nb\n", ""},
		{"tilde fence not closed by backticks", "~~~\na\n```\n\nb\n", ""},
		{"longer fence needs longer close", "````\n```\n\nx\n", ""},
		{"closing fence with info is not a close", "```\na\n```go\n\nx\n", ""},
		{"code span is not a fence", "```x``` y\n\nz\n", "```x``` y\n\n"},
		{"indented fence in a list", "- item\n\n    ```\n    a\n\n    b\n    ```\n\nafter\n", "- item\n\n    ```\n    a\n\n    b\n    ```\n\n"},
		{"list item continues", "- a\n\n  more a\n", ""},
		{"next list item", "- a\n\n- b\n", ""},
		{"next ordered item", "1. a\n\n2) b\n", ""},
		{"after a list", "- a\n- b\n\nnext\n", "- a\n- b\n\n"},
		{"thematic break is not a list", "para\n\n---\n", "para\n\n"},
		{"indented code continues", "    a\n\n    b\n", ""},
		{"heading", "# T\n\ntext\n", "# T\n\n"},
		{"table", "| a |\n|---|\n| 1 |\n\nok\n", "| a |\n|---|\n| 1 |\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := markdown.SplitStable(tt.src)
			if got := tt.src[:k]; got != tt.want {
				t.Errorf("SplitStable(%q) = %d (%q), want %q", tt.src, k, got, tt.want)
			}
		})
	}
}

// TestSplitStableMonotonic feeds a reply one byte at a time, as a stream would.
func TestSplitStableMonotonic(t *testing.T) {
	last := 0
	for i := range len(sample) + 1 {
		k := markdown.SplitStable(sample[:i])
		if k < last {
			t.Fatalf("SplitStable went back from %d to %d at %d", last, k, i)
		}
		if k > i {
			t.Fatalf("SplitStable(src[:%d]) = %d", i, k)
		}
		last = k
	}
	if last == 0 {
		t.Fatal("SplitStable never advanced on the sample")
	}
}

// TestSplitRenderConcat checks the property the streamer relies on: at every split
// point, rendering the stable head and the tail separately gives the same HTML as
// rendering the whole, and the streamed pieces add up to the final render.
func TestSplitRenderConcat(t *testing.T) {
	inputs := map[string]string{
		"paragraphs": "First paragraph with *emphasis*.\n\nSecond one\nspans lines.\n\nThird.\n",
		"code":       "Intro:\n\n```go\nfunc main() {\n\n\tprintln(1)\n}\n```\n\nAfter the code.\n\n~~~\nx\n\ny\n~~~\n\nEnd.\n",
		"mixed":      sample,
	}
	for name, src := range inputs {
		t.Run(name, func(t *testing.T) {
			whole := markdown.Render(src)
			var streamed strings.Builder
			done, splits := 0, 0
			for i := range len(src) + 1 {
				k := markdown.SplitStable(src[:i])
				if k > done {
					streamed.WriteString(markdown.Render(src[done:k]))
					done = k
					splits++
				}
			}
			for k := range checked(src) {
				if got := markdown.Render(src[:k]) + markdown.Render(src[k:]); got != whole {
					t.Fatalf("split at %d of %q:\n%s\n---- want ----\n%s", k, src, got, whole)
				}
			}
			streamed.WriteString(markdown.Render(src[done:]))
			if streamed.String() != whole {
				t.Fatalf("streamed pieces:\n%s\n---- want ----\n%s", streamed.String(), whole)
			}
			if splits == 0 {
				t.Fatal("no split points found")
			}
		})
	}
}

// checked returns the distinct split points seen while src streams in.
func checked(src string) map[int]bool {
	ks := map[int]bool{}
	for i := range len(src) + 1 {
		ks[markdown.SplitStable(src[:i])] = true
	}
	return ks
}

var sample = func() string {
	var b strings.Builder
	b.WriteString("# Plan\n\nHere is **how** to do it, step by step.\n\n")
	for i := range 12 {
		b.WriteString("## Step\n\nSome prose explaining the step in a sentence or two, with `code` and a [link](https://example.com/docs).\n\n")
		b.WriteString("- first point\n- second point\n  continued\n- third\n\n")
		if i%2 == 0 {
			b.WriteString("```go\nfunc step() error {\n\tif err := do(); err != nil {\n\n\t\treturn fmt.Errorf(\"step: %w\", err)\n\t}\n\treturn nil\n}\n```\n\n")
		} else {
			b.WriteString("| name | value |\n|------|------:|\n| a    | 1     |\n| b    | 2     |\n\n")
		}
	}
	b.WriteString("That's all.\n")
	return b.String()
}()

func BenchmarkRender(b *testing.B) {
	src := sample[:min(len(sample), 4096)]
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		markdown.Render(src)
	}
}

// BenchmarkRenderUncached is BenchmarkRender with the highlighting cache emptied each
// time: the first render of a reply's code blocks.
func BenchmarkRenderUncached(b *testing.B) {
	src := sample[:min(len(sample), 4096)]
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		markdown.ForgetHighlights()
		markdown.Render(src)
	}
}

func BenchmarkSplitStable(b *testing.B) {
	b.SetBytes(int64(len(sample)))
	for b.Loop() {
		markdown.SplitStable(sample)
	}
}
