package markdown

import (
	"fmt"
	stdhtml "html"
	"strings"
	"testing"
)

// TestEscapes checks extendCode's escaping against html.EscapeString.
func TestEscapes(t *testing.T) {
	for _, s := range []string{"", "x", "a\n", "<b> & \"q\" 'r' \t\n", "\u65e5\u672c & <", "&amp;"} {
		want := stdhtml.EscapeString(s)
		var sb strings.Builder
		writeEscaped(&sb, []byte(s))
		if sb.String() != want {
			t.Errorf("writeEscaped(%q) = %q, want %q", s, sb.String(), want)
		}
		for _, pre := range []string{"", "<code>", "&amp;", "x"} {
			if got, ok := cutEscaped(pre+want, []byte(s)); !ok || got != pre {
				t.Errorf("cutEscaped(%q, %q) = %q, %v; want %q, true", pre+want, s, got, ok, pre)
			}
		}
		if s != "" {
			if _, ok := cutEscaped(want[:len(want)-1]+"?", []byte(s)); ok {
				t.Errorf("cutEscaped accepts a wrong escape of %q", s)
			}
			if _, ok := cutEscaped(s[1:], []byte(s)); ok && want != s[1:] {
				t.Errorf("cutEscaped accepts a short text for %q", s)
			}
		}
	}
}

// BenchmarkTailRender is what one markdown.Render of a tail costs by size: a fixed part
// (5–10µs here) that makes one render per token costly, and why ExtendTail exists.
func BenchmarkTailRender(b *testing.B) {
	for _, n := range []int{5, 200, 1200} {
		src := strings.Repeat("word ", n/5)
		b.Run(fmt.Sprintf("paragraph-bytes=%d", n), func(b *testing.B) {
			for b.Loop() {
				Render(src)
			}
		})
	}
	code := "```go\n" + strings.Repeat("\tx := compute(a, b) // step 1\n", 40)
	b.Run("code-lines=40", func(b *testing.B) {
		for b.Loop() {
			Render(code)
		}
	})
	// The tail right after its code block closed, as the hub re-renders it until
	// SplitStable moves past the block: highlighted, first time (uncached) and again.
	closed := code + "```\n\nAnd then"
	b.Run("closed-code-lines=40", func(b *testing.B) {
		for b.Loop() {
			Render(closed)
		}
	})
	b.Run("closed-code-lines=40-uncached", func(b *testing.B) {
		for b.Loop() {
			highlighted.mu.Lock()
			highlighted.spans = nil
			highlighted.mu.Unlock()
			Render(closed)
		}
	})
}
