package markdown

import (
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/alecthomas/chroma/v2"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Syntax highlighting of fenced code blocks that name a language (```go). The block
// keeps goldmark's markup, <pre><code class="language-go">, and its text is split into
// <span class="k">…</span> runs with chroma's short class names: classes only, no inline
// style (the CSP forbids them), coloured by the light and dark rules in assets/app.css.
// Copy copies pre.innerText, which is the code unchanged.
//
// Only a block whose closing fence has arrived is highlighted. While a reply streams,
// the open block at its end stays plain, so ExtendTail can keep appending escaped text
// to it without rendering; the block is highlighted once, when its fence closes. (A
// reply that never closes its fence stays plain, as before.) A block without a language
// stays plain: guessing costs a pass of every lexer and often guesses wrong on prose.

// maxHighlight bounds the code chroma's regexp lexers see (about 0.1 ms a line of Go on a
// loaded machine, BenchmarkTailRender/closed-code-lines=40-uncached); a larger block stays plain.
const maxHighlight = 16 << 10

// closedAttr is the attribute fenceTracker sets on a FencedCodeBlock whose closing
// fence was parsed (never rendered: renderFencedCode writes the block itself).
const closedAttr = "atrium-closed"

// fenceTracker wraps goldmark's fenced-code parser to record an explicit closing fence,
// which the AST does not keep.
type fenceTracker struct{ parser.BlockParser }

func (f fenceTracker) Continue(node ast.Node, reader text.Reader, pc parser.Context) parser.State {
	st := f.BlockParser.Continue(node, reader, pc)
	if st&parser.Close != 0 {
		node.SetAttributeString(closedAttr, true)
	}
	return st
}

// withFenceTracker returns vs with goldmark's fenced-code parser replaced by fenceTracker.
func withFenceTracker(vs []util.PrioritizedValue) []util.PrioritizedValue {
	fenced := parser.NewFencedCodeBlockParser()
	for i, v := range vs {
		if reflect.TypeOf(v.Value) == reflect.TypeOf(fenced) {
			vs[i] = util.Prioritized(fenceTracker{fenced}, v.Priority)
		}
	}
	return vs
}

// codeHighlighter renders fenced code blocks, highlighted when closed and in a known language.
type codeHighlighter struct{}

func (codeHighlighter) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindFencedCodeBlock, renderFencedCode)
}

func renderFencedCode(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.FencedCodeBlock)
	// The same bytes as goldmark's own renderer, plus the spans.
	_, _ = w.WriteString("<pre><code")
	language := n.Language(source)
	if language != nil {
		_, _ = w.WriteString(` class="language-`)
		html.DefaultWriter.Write(w, language)
		_ = w.WriteByte('"')
	}
	_ = w.WriteByte('>')
	lines := n.Lines()
	var code []byte
	for i := range lines.Len() {
		seg := lines.At(i)
		code = append(code, seg.Value(source)...)
	}
	_, closed := n.AttributeString(closedAttr)
	if !closed || language == nil || len(code) > maxHighlight || !highlight(w, string(language), code) {
		html.DefaultWriter.RawWrite(w, code)
	}
	_, _ = w.WriteString("</code></pre>\n")
	return ast.WalkSkipChildren, nil
}

// highlight writes code as escaped text in class spans and reports whether it did; it
// writes nothing and returns false for an unknown language or when the tokens would not
// spell out code exactly.
func highlight(w util.BufWriter, language string, code []byte) bool {
	key := language + "\x00" + string(code)
	spans, ok := highlighted.get(key)
	if !ok {
		spans, ok = highlightSpans(language, code)
		highlighted.put(key, spans, ok)
	}
	if ok {
		_, _ = w.WriteString(spans)
	}
	return ok
}

// highlighted remembers recent results: the lexers cost most of a Render of code (a
// regexp engine per token), and the same block is rendered again and again: while the
// tail after it streams in, in the final render of the reply, and on every page load.
var highlighted = &spanCache{max: 8 << 20}

// spanCache is a map from language and code to the spans, emptied when it holds more
// than max bytes (simpler than an LRU, and a full miss costs only the lexing again).
type spanCache struct {
	mu    sync.Mutex
	max   int
	size  int
	spans map[string]cached
}

type cached struct {
	spans string
	ok    bool
}

func (c *spanCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, hit := c.spans[key]
	if !hit {
		return "", false
	}
	return v.spans, v.ok
}

func (c *spanCache) put(key, spans string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size += len(key) + len(spans); c.size > c.max || c.spans == nil {
		c.spans, c.size = map[string]cached{}, len(key)+len(spans)
	}
	c.spans[key] = cached{spans, ok}
}

// highlightSpans returns code as escaped text in class spans, or false for an unknown
// language or when the tokens would not spell out code exactly.
func highlightSpans(language string, code []byte) (string, bool) {
	lexer := lexers.Get(language)
	if lexer == nil {
		return "", false
	}
	tokens, ok := tokenise(lexer, string(code))
	if !ok {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(code) * 3)
	// Adjacent tokens of one class share a span.
	for i := 0; i < len(tokens); {
		class := tokenClass(tokens[i].Type)
		j := i + 1
		for j < len(tokens) && tokenClass(tokens[j].Type) == class {
			j++
		}
		if class != "" {
			b.WriteString(`<span class="`)
			b.WriteString(class)
			b.WriteString(`">`)
		}
		for _, t := range tokens[i:j] {
			b.Write(util.EscapeHTML([]byte(t.Value)))
		}
		if class != "" {
			b.WriteString("</span>")
		}
		i = j
	}
	return b.String(), true
}

// tokenise runs lexer over code; ok is false if it fails, panics, or its tokens do not
// add up to code (some lexers normalise line endings or add a final newline), so that
// what is shown and copied is always the code as written.
func tokenise(lexer chroma.Lexer, code string) (tokens []chroma.Token, ok bool) {
	defer func() {
		if recover() != nil {
			tokens, ok = nil, false
		}
	}()
	it, err := lexer.Tokenise(&chroma.TokeniseOptions{State: "root"}, code)
	if err != nil {
		return nil, false
	}
	n := 0
	for t := it(); t != chroma.EOF; t = it() {
		if n+len(t.Value) > len(code) || code[n:n+len(t.Value)] != t.Value {
			return nil, false
		}
		n += len(t.Value)
		tokens = append(tokens, t)
	}
	return tokens, n == len(code)
}

// tokenClass is the CSS class of a token type: chroma's short name for it or for the
// nearest type above it that has one, or "" for plain text, whitespace and errors.
func tokenClass(t chroma.TokenType) string {
	for _, c := range []chroma.TokenType{t, t.SubCategory(), t.Category()} {
		if c == chroma.Text || c == chroma.TextWhitespace || c <= 0 {
			return ""
		}
		if class, ok := chroma.StandardTypes[c]; ok {
			return class
		}
	}
	return ""
}

// highlightClasses are the classes tokenClass can return, sorted: what the policy and
// inert allow on <span>, and what assets/app.css colours.
var highlightClasses = func() []string {
	seen := map[string]bool{}
	for t := range chroma.StandardTypes {
		if c := tokenClass(t); c != "" {
			seen[c] = true
		}
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}()
