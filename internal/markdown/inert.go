package markdown

import (
	"strings"
	"unicode/utf8"
)

// inert returns what the sanitiser (policy) would make of html, goldmark's output,
// without running it, when html is in a small language that is inert by construction
// and on which the sanitiser changes nothing but the spelling of a few escapes. ok is
// false otherwise, and Render sanitises as before.
//
// The language: text that contains no '<', no control character but tab and newline
// (so no '\r', which the sanitiser's tokenizer rewrites) and no '&' but in &lt; &gt;
// &amp; and &quot;, and is valid UTF-8; and tags from allowedTags, or exactly
// <code class="language-X"> with X made of [A-Za-z0-9_+-] (which the policy allows),
// or <span class="C"> with C one of highlightClasses (highlight.go; the policy allows those).
// Nothing in it can be a link, an image, an event handler, a style, a script or any
// other element or attribute that does something: every tag is one of a fixed set of
// formatting tags, mostly without attributes, and no text can open a tag or an entity
// that decodes to anything but < > & ". So it is safe to insert as is, with or without
// the sanitiser.
//
// Byte-identical to the sanitiser: bluemonday tokenizes with golang.org/x/net/html and
// writes each allowed tag again, which for these tags (lower case, attributes in this
// order, values needing no escaping) gives the same bytes, and writes each text token
// as html.EscapeString of its decoded text, which escapes exactly & ' < > " (and \r,
// excluded above). So the text needs &quot; → &#34;, ' → &#39;, and a bare " or > would
// be escaped as &#34; and &gt;. Goldmark resolves other entities in the source to their
// characters, so a remaining "&name;" is not expected; it is left to the sanitiser.
// TestInertMatchesSanitizer checks the equality on many documents.
//
// Goldmark produces links, images (rendered as links), autolinks and <ol start>
// only with attributes outside this language, so those always go through the sanitiser.
func inert(html []byte) (string, bool) {
	var b strings.Builder
	b.Grow(len(html) + len(html)/16)
	last := 0 // html[last:i] is not yet copied
	for i := 0; i < len(html); {
		c := html[i]
		switch {
		case c == '<':
			n := tagLen(html[i:])
			if n == 0 {
				return "", false
			}
			i += n
			continue
		case c == '&':
			var rep string
			switch {
			case hasPrefix(html[i:], "&lt;"), hasPrefix(html[i:], "&gt;"):
				i += 4
				continue
			case hasPrefix(html[i:], "&amp;"):
				i += 5
				continue
			case hasPrefix(html[i:], "&quot;"):
				rep = "&#34;"
			default:
				return "", false
			}
			b.Write(html[last:i])
			b.WriteString(rep)
			i += len("&quot;")
			last = i
			continue
		case c == '\'' || c == '"' || c == '>':
			b.Write(html[last:i])
			switch c {
			case '\'':
				b.WriteString("&#39;")
			case '"':
				b.WriteString("&#34;")
			default:
				b.WriteString("&gt;")
			}
			i++
			last = i
			continue
		case c < ' ' && c != '\n' && c != '\t', c == 0x7f:
			return "", false
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(html[i:])
			if r == utf8.RuneError && n <= 1 {
				return "", false
			}
			i += n
			continue
		}
		i++
	}
	b.Write(html[last:])
	return b.String(), true
}

// allowedTags are the tags goldmark writes for markdown other than links and images,
// exactly as it writes them, that the policy keeps unchanged.
var allowedTags = func() map[string]bool {
	m := map[string]bool{
		"<hr>": true, "<br>": true,
		`<input checked="" disabled="" type="checkbox">`: true,
		`<input disabled="" type="checkbox">`:            true,
	}
	for _, t := range []string{"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li",
		"blockquote", "pre", "code", "em", "strong", "del",
		"table", "thead", "tbody", "tr", "th", "td"} {
		m["<"+t+">"] = true
		m["</"+t+">"] = true
	}
	m["</span>"] = true
	for _, c := range highlightClasses {
		m[`<span class="`+c+`">`] = true
	}
	for _, t := range []string{"th", "td"} {
		for _, a := range []string{"left", "right", "center"} {
			m["<"+t+` align="`+a+`">`] = true
		}
	}
	return m
}()

// tagLen returns the length of the allowed tag at the start of s, or 0.
func tagLen(s []byte) int {
	end := 0
	for j := 1; j < len(s) && j < 64; j++ {
		if s[j] == '>' {
			end = j + 1
			break
		}
		if s[j] == '<' {
			return 0
		}
	}
	if end == 0 {
		return 0
	}
	if allowedTags[string(s[:end])] { // no allocation: map lookup of a converted []byte
		return end
	}
	const open, closing = `<code class="language-`, `">`
	if end > len(open)+len(closing) && hasPrefix(s, open) && hasPrefix(s[end-2:], closing) {
		for _, c := range s[len(open) : end-2] {
			if !(c|0x20 >= 'a' && c|0x20 <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '+' || c == '-') {
				return 0
			}
		}
		return end
	}
	return 0
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}
