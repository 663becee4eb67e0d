// Package markdown turns model output into HTML that is safe to insert into a page.
//
// Render is the whole pipeline: goldmark (CommonMark + GFM tables, strikethrough,
// autolinks and task lists) with raw HTML treated as plain text, then a bluemonday
// policy (skipped when goldmark's output is provably inert and the policy would not
// change it; see inert), then a "Copy" button around every code block. Fenced code
// blocks that name a language are highlighted with CSS classes (highlight.go). SplitStable supports
// incremental rendering while a reply streams in.
//
// All functions are safe for concurrent use.
package markdown

import (
	"bytes"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/util"
)

var (
	md     = newMarkdown()
	policy = newPolicy()
)

// Copy-button wrapper placed around each <pre> after sanitising. The sanitiser has
// escaped any "<pre>" the model typed, so every literal "<pre>" left is one goldmark made.
const (
	preOpen      = "<pre>"
	preClose     = "</pre>"
	wrappedOpen  = `<div class="code"><button type="button" class="copy" data-copy>Copy</button><pre>`
	wrappedClose = "</pre></div>"
)

// Render converts markdown to sanitised HTML. Raw HTML in src is shown as text, links
// open in a new tab with rel="nofollow noopener noreferrer", only http, https and
// mailto URLs survive, and images become plain links (so a reply cannot make the
// browser fetch a URL by itself). The result is safe to insert as raw HTML.
func Render(src string) string {
	if src == "" {
		return ""
	}
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 64<<10 {
			buf.Reset()
			bufPool.Put(buf)
		}
	}()
	buf.Grow(len(src) + len(src)/2)
	if err := md.Convert([]byte(src), buf); err != nil {
		// goldmark only fails when the writer fails, and bytes.Buffer does not;
		// fall back to escaped text rather than losing the reply.
		return "<p>" + escapeText(src) + "</p>\n"
	}
	out, ok := inert(buf.Bytes())
	if !ok {
		out = string(policy.SanitizeBytes(buf.Bytes()))
	}
	return wrapCode(out)
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

var codeWrapper = strings.NewReplacer(preOpen, wrappedOpen, preClose, wrappedClose)

func wrapCode(s string) string {
	if !strings.Contains(s, preOpen) {
		return s
	}
	return codeWrapper.Replace(s)
}

func escapeText(s string) string { return string(util.EscapeHTML([]byte(s))) }

func newMarkdown() goldmark.Markdown {
	// Without the raw-HTML block and inline parsers, "<script>" is ordinary text and
	// goldmark escapes it like any other text; the sanitiser is the second line.
	blocks := withFenceTracker(without(parser.DefaultBlockParsers(), parser.NewHTMLBlockParser()))
	inlines := without(parser.DefaultInlineParsers(), parser.NewRawHTMLParser())
	p := parser.NewParser(
		parser.WithBlockParsers(blocks...),
		parser.WithInlineParsers(inlines...),
		parser.WithParagraphTransformers(parser.DefaultParagraphTransformers()...),
	)
	return goldmark.New(
		goldmark.WithParser(p),
		goldmark.WithExtensions(
			extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
			extension.Strikethrough,
			extension.NewLinkify(),
			extension.TaskList,
		),
		goldmark.WithRendererOptions(
			renderer.WithNodeRenderers(util.Prioritized(imageAsLink{}, 100), util.Prioritized(codeHighlighter{}, 100)),
		),
	)
}

// without returns vs minus the parsers of the same concrete type as drop.
func without(vs []util.PrioritizedValue, drop any) []util.PrioritizedValue {
	t := reflect.TypeOf(drop)
	out := vs[:0]
	for _, v := range vs {
		if reflect.TypeOf(v.Value) != t {
			out = append(out, v)
		}
	}
	return out
}

// imageAsLink renders ![alt](url) as a link to url labelled with alt.
type imageAsLink struct{}

func (imageAsLink) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindImage, renderImage)
}

func renderImage(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Image)
	if insideLink(n) { // no nested <a>: just the alt text
		return ast.WalkContinue, nil
	}
	if entering {
		_, _ = w.WriteString(`<a href="`)
		dest := util.URLEscape(n.Destination, true)
		if !html.IsDangerousURL(dest) {
			_, _ = w.Write(util.EscapeHTML(dest))
		}
		_, _ = w.WriteString(`">`)
		if !n.HasChildren() {
			_, _ = w.Write(util.EscapeHTML(dest))
		}
	} else {
		_, _ = w.WriteString("</a>")
	}
	return ast.WalkContinue, nil
}

func insideLink(n ast.Node) bool {
	for p := n.Parent(); p != nil; p = p.Parent() {
		if p.Kind() == ast.KindLink || p.Kind() == ast.KindAutoLink {
			return true
		}
	}
	return false
}

func newPolicy() *bluemonday.Policy {
	p := bluemonday.UGCPolicy()
	p.AllowRelativeURLs(false)
	p.AllowURLSchemes("http", "https", "mailto")
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[a-zA-Z0-9_+-]+$`)).OnElements("code")
	// Syntax highlighting (highlight.go): exactly the classes it writes.
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^(` + strings.Join(highlightClasses, "|") + `)$`)).OnElements("span")
	// GFM task lists.
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^$`)).OnElements("input")
	return p
}
