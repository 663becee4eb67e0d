package markdown

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// ExtendTail returns Render(old+add) given html = Render(old), without
// rendering, for the two cases that make up most of a long reply: words added to the
// last line of a paragraph, list item, heading or table row, and text added inside an
// open fenced code block. ok is false when it cannot be sure; the caller renders then.
// (old and add are never empty when a render is due; old is the tail as last rendered.)
func ExtendTail(old, add []byte, html string) (string, bool) {
	if len(add) == 0 {
		return html, true
	}
	if s, ok := extendCode(old, add, html); ok {
		return s, true
	}
	return extendText(old, add, html)
}

// extendText handles add = spaces and words continuing the last line of old, where a
// word is plain (letters, digits, . , ! ?) or a complete emphasis of letters and digits,
// **like** *this*, maybe followed by . , ! or ? (see emphWord). Plain words open and
// close nothing: no emphasis, code span, link, autolink (no "www", ':' or '@') or
// entity, and, following whitespace, they do not change the flanking of a delimiter run
// before them. An emphasized word follows whitespace too, so its opening run can only
// open and its closing run, followed by a space, the end or punctuation, can only
// close; nothing but letters lies between them, so the closer pairs with that opener
// (the nearest one) and leaves every delimiter before it as it was. So the last block's
// inline content just grows, and the HTML grows at the end of that content, which must
// be plain text too: the HTML ends with that same run of plain characters followed only
// by block closing tags (so not inside a link or code).
func extendText(old, add []byte, html string) (string, bool) {
	// Only ' ' separates words here: a '\r' is a line ending too, and a trailing tab or
	// '\r' is dropped by Render, so any whitespace but ' ' goes to a full render.
	if bytes.ContainsAny(add, "\n\r\t\v\f") || !inlineWords(add) || containsFold(add, "www") {
		return "", false
	}
	if add[0] != ' ' && old[len(old)-1] != ' ' {
		return "", false // add would join the last word
	}
	line := old[bytes.LastIndexAny(old, "\r\n")+1:]
	if !inlineLine(line) {
		return "", false
	}
	// The last word of old, as plain text maybe closed by *, _, ~ or ` (emphasis,
	// strikethrough, code span), must be what the HTML's last block ends with, maybe
	// followed by the matching inline closing tags.
	trimmed := bytes.TrimRight(old, " ")
	word := bytes.TrimRight(trimmed, "*_~`")
	if len(trimmed)-len(word) > 3 {
		return "", false
	}
	run := len(word)
	for run > 0 && plainByte(word[run-1]) {
		run--
	}
	if run == len(word) {
		return "", false
	}
	body, closing := splitClosingTags(html)
	if closing == "" || !strings.HasSuffix(trimInlineClosers(body), string(word[run:])) {
		return "", false
	}
	grown := bytes.TrimRight(append(old[len(trimmed):len(old):len(old)], add...), " ")
	if len(grown) == 0 {
		return html, true // only trailing spaces, which render as nothing
	}
	var b strings.Builder
	b.Grow(len(body) + len(grown) + 32 + len(closing))
	b.WriteString(body)
	writeWords(&b, grown)
	b.WriteString(closing)
	return b.String(), true
}

// inlineWords reports whether b is spaces and words that are plain or emphWord.
func inlineWords(b []byte) bool {
	for _, w := range bytes.Fields(b) {
		if !plainWords(w) && emphWord(w) == 0 {
			return false
		}
	}
	return true
}

// emphWord returns the length of the delimiter runs (1 for *em*, 2 for **strong**) if w
// is a run of * or **, one or more letters and digits, the same run, and then only
// . , ! or ?, else 0.
func emphWord(w []byte) int {
	d := 0
	for d < len(w) && d < 3 && w[d] == '*' {
		d++
	}
	if d == 0 || d > 2 {
		return 0
	}
	i := d
	for i < len(w) && (w[i]|0x20 >= 'a' && w[i]|0x20 <= 'z' || w[i] >= '0' && w[i] <= '9') {
		i++
	}
	if i == d || i+d > len(w) || string(w[i:i+d]) != "**"[:d] {
		return 0
	}
	for _, c := range w[i+d:] {
		if c != '.' && c != ',' && c != '!' && c != '?' {
			return 0
		}
	}
	return d
}

// writeWords writes the HTML of b, spaces and words as inlineWords accepts them.
func writeWords(sb *strings.Builder, b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '*')
		if i < 0 {
			sb.Write(b)
			return
		}
		sb.Write(b[:i])
		end := i + bytes.IndexByte(b[i:], ' ')
		if end < i {
			end = len(b)
		}
		w := b[i:end]
		d := emphWord(w)
		tag := "em>"
		if d == 2 {
			tag = "strong>"
		}
		inner := bytes.TrimRight(w, ".,!?")
		sb.WriteString("<" + tag)
		sb.Write(inner[d : len(inner)-d])
		sb.WriteString("</" + tag)
		sb.Write(w[len(inner):])
		b = b[end:]
	}
}

// inlineLine reports whether a line is plain inline text, maybe after a list marker,
// starting with a letter (or ** or __ and a letter): not a fence, heading, quote, table
// row, link reference definition, thematic break or setext underline.
func inlineLine(line []byte) bool {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	switch {
	case i+1 < len(line) && (line[i] == '-' || line[i] == '*' || line[i] == '+') && line[i+1] == ' ':
		i += 2
	case i < len(line) && line[i] >= '0' && line[i] <= '9':
		j := i
		for j < len(line) && j-i < 9 && line[j] >= '0' && line[j] <= '9' {
			j++
		}
		if j+1 >= len(line) || (line[j] != '.' && line[j] != ')') || line[j+1] != ' ' {
			return false
		}
		i = j + 2
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if i+2 < len(line) && (line[i] == '*' || line[i] == '_') && line[i+1] == line[i] {
		i += 2
	}
	return i < len(line) && (line[i]|0x20 >= 'a' && line[i]|0x20 <= 'z')
}

func plainByte(c byte) bool {
	return c|0x20 >= 'a' && c|0x20 <= 'z' || c >= '0' && c <= '9' || c == '.' || c == ',' || c == '!' || c == '?'
}

func plainWords(b []byte) bool {
	for _, c := range b {
		if c != ' ' && !plainByte(c) {
			return false
		}
	}
	return true
}

func containsFold(b []byte, lower string) bool {
	return bytes.Contains(bytes.ToLower(b), []byte(lower))
}

// trimInlineClosers removes the closing tags of emphasis, strikethrough and code spans,
// and literal delimiters, from the end of html.
func trimInlineClosers(html string) string {
	for {
		t := strings.TrimRight(html, "*_~`")
		for _, tag := range []string{"</em>", "</strong>", "</del>", "</code>"} {
			t = strings.TrimSuffix(t, tag)
		}
		if t == html {
			return html
		}
		html = t
	}
}

// splitClosingTags splits html into a body and its trailing run of closing tags of blocks
// whose text is inline content (p, li, lists, quotes, headings, tables).
func splitClosingTags(html string) (body, closing string) {
	end := len(html)
	for {
		s := strings.TrimSuffix(html[:end], "\n")
		i := strings.LastIndex(s, "</")
		if i < 0 || !strings.HasSuffix(s, ">") {
			break
		}
		switch s[i+2 : len(s)-1] {
		case "p", "li", "ul", "ol", "blockquote", "td", "th", "tr", "tbody", "thead", "table",
			"h1", "h2", "h3", "h4", "h5", "h6":
			end = i
			continue
		}
		break
	}
	return html[:end], html[end:]
}

// extendCode handles text added inside a fenced code block that old leaves open, opened
// at the start of a line and not closed by add. Code is shown verbatim, escaped, with a
// newline after its last line. The HTML must end with exactly that code element.
func extendCode(old, add []byte, html string) (string, bool) {
	const closing = "</code></pre></div>\n"
	if !strings.HasSuffix(html, closing) || !codeText(add) {
		return "", false
	}
	start := openFenceContent(old)
	if start < 0 {
		return "", false
	}
	// No line of the grown last line or of add may look like a closing fence.
	seg := append(old[bytes.LastIndexByte(old, '\n')+1:len(old):len(old)], add...)
	for line := range bytes.Lines(seg) {
		t := bytes.TrimLeft(line, " \t")
		if len(t) > 0 && (t[0] == '`' || t[0] == '~') {
			return "", false
		}
	}
	body := html[:len(html)-len(closing)]
	code := old[start:]
	if len(code) > 0 && code[len(code)-1] != '\n' {
		// The renderer adds a newline after the last line.
		if !strings.HasSuffix(body, "\n") {
			return "", false
		}
		body = body[:len(body)-1]
	}
	open, ok := cutEscaped(body, code)
	if !ok || !strings.HasSuffix(open, ">") ||
		strings.LastIndex(open, "<") != strings.LastIndex(open, "<code") {
		return "", false
	}
	// body = open + escaped code (+ newline); the result has code + add instead.
	var b strings.Builder
	b.Grow(len(html) + len(add) + len(add)/4 + 1)
	b.WriteString(body)
	writeEscaped(&b, add)
	if add[len(add)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(closing)
	return b.String(), true
}

// htmlEscapes is how html.EscapeString, and so Render in code blocks, escapes each byte it
// changes (TestEscapes).
var htmlEscapes = [256]string{'&': "&amp;", '\'': "&#39;", '<': "&lt;", '>': "&gt;", '"': "&#34;"}

// cutEscaped returns s without its suffix html.EscapeString(b), if it has that suffix,
// without allocating.
func cutEscaped(s string, b []byte) (string, bool) {
	for len(b) > 0 {
		i := bytes.LastIndexAny(b, "&'<>\"")
		plain := b[i+1:]
		if len(plain) > len(s) || s[len(s)-len(plain):] != string(plain) {
			return "", false
		}
		s = s[:len(s)-len(plain)]
		if i < 0 {
			break
		}
		e := htmlEscapes[b[i]]
		if !strings.HasSuffix(s, e) {
			return "", false
		}
		s, b = s[:len(s)-len(e)], b[:i]
	}
	return s, true
}

func writeEscaped(sb *strings.Builder, b []byte) {
	last := 0
	for i, c := range b {
		if e := htmlEscapes[c]; e != "" {
			sb.Write(b[last:i])
			sb.WriteString(e)
			last = i + 1
		}
	}
	sb.Write(b[last:])
}

// codeText reports whether b is text that the renderer copies into code unchanged but
// for escaping: valid UTF-8 without control characters other than tab and newline.
func codeText(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' && c != '\n' || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}

// openFenceContent returns where the content of a fenced code block starts if src ends
// inside one that was opened at column 0, else -1. The fence rules follow
// SplitStable: up to three spaces of indentation, ``` or ~~~ (a backtick fence's
// info has no backtick), closed by a run of at least as many of the same character.
func openFenceContent(src []byte) int {
	var (
		fence   byte
		n       int
		content = -1
	)
	for pos := 0; pos < len(src); {
		nl := bytes.IndexByte(src[pos:], '\n')
		if nl < 0 {
			break // the unfinished last line cannot open a fence; a closer is caught later
		}
		line := bytes.TrimRight(src[pos:pos+nl], " \t\r")
		pos += nl + 1
		ind := 0
		for ind < len(line) && line[ind] == ' ' {
			ind++
		}
		if ind > 3 {
			continue
		}
		rest := line[ind:]
		run := 0
		for run < len(rest) && (rest[run] == '`' || rest[run] == '~') && rest[run] == rest[0] {
			run++
		}
		switch {
		case fence != 0:
			if run >= n && run == len(rest) && rest[0] == fence {
				fence = 0
			}
		case run >= 3 && !(rest[0] == '`' && bytes.IndexByte(rest[run:], '`') >= 0):
			fence, n = rest[0], run
			content = -1
			if ind == 0 {
				content = pos
			}
		}
	}
	if fence == 0 {
		return -1
	}
	return content
}
