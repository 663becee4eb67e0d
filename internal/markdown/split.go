package markdown

import "strings"

// SplitStable returns the byte offset k such that src[:k] consists of finished
// top-level blocks: Render(src[:k]) will not change however the text continues, and
// Render(src[:k]) + Render(src[k:]) is the same HTML as Render(src) for ordinary
// replies. A streamer renders src[:k] once and re-renders only src[k:] per update.
//
// k is the start of a non-blank line that follows a blank line outside any
// ``` or ~~~ fence, and that cannot continue the block before it: it is not indented
// and does not start with a list marker (either could belong to the list above); an
// unfinished line counts once its first character is a letter, which settles both. It
// is conservative: when unsure it returns a smaller offset, down to 0. Link reference
// definitions are not tracked, so a render of the whole text at the end is still
// needed. SplitStable is monotonic: if p is a prefix of s, SplitStable(p) <= SplitStable(s).
func SplitStable(src string) int {
	var (
		stable     int
		afterBlank bool // the previous complete line was blank, outside a fence
		fenceChar  byte // 0 when not inside a fence
		fenceLen   int
		fenceInd   int
	)
	for pos := 0; pos < len(src); {
		nl := strings.IndexByte(src[pos:], '\n')
		if nl < 0 {
			// An unfinished line decides nothing yet, unless it starts with a letter:
			// then it is not indented, not a list marker and not a fence, whatever
			// follows, so it starts a new block just as the whole line would.
			if afterBlank && fenceChar == 0 && asciiLetter(src[pos]) {
				stable = pos
			}
			break
		}
		line := strings.TrimSuffix(src[pos:pos+nl], "\r")
		start := pos
		pos += nl + 1

		ind, rest := indent(line)
		if fenceChar != 0 {
			if ind <= fenceInd+3 && closesFence(rest, fenceChar, fenceLen) {
				fenceChar = 0
			}
			continue
		}
		if rest == "" {
			afterBlank = true
			continue
		}
		if afterBlank && ind == 0 && !listMarker(rest) {
			stable = start
		}
		afterBlank = false
		if c, n, ok := opensFence(rest); ok {
			fenceChar, fenceLen, fenceInd = c, n, ind
		}
	}
	return stable
}

// indent returns the width of the leading whitespace (a tab counts as 4) and the rest
// of the line with trailing whitespace removed.
func indent(line string) (int, string) {
	w := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case ' ':
			w++
		case '\t':
			w += 4 - w%4
		default:
			return w, strings.TrimRight(line[i:], " \t")
		}
	}
	return w, ""
}

func opensFence(s string) (byte, int, bool) {
	if len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return 0, 0, false
	}
	c := s[0]
	n := run(s, c)
	if n < 3 {
		return 0, 0, false
	}
	if c == '`' && strings.IndexByte(s[n:], '`') >= 0 {
		return 0, 0, false // ```like this``` is a code span, not a fence
	}
	return c, n, true
}

func closesFence(s string, c byte, n int) bool {
	m := run(s, c)
	return m >= n && m == len(s)
}

func run(s string, c byte) int {
	n := 0
	for n < len(s) && s[n] == c {
		n++
	}
	return n
}

// listMarker reports whether s starts like a list item: "-", "*" or "+", or up to
// nine digits and "." or ")", followed by a space, a tab or the end of the line.
func listMarker(s string) bool {
	i := 0
	switch {
	case s[0] == '-' || s[0] == '*' || s[0] == '+':
		i = 1
	case s[0] >= '0' && s[0] <= '9':
		for i < len(s) && i < 10 && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i > 9 || i == len(s) || (s[i] != '.' && s[i] != ')') {
			return false
		}
		i++
	default:
		return false
	}
	return i == len(s) || s[i] == ' ' || s[i] == '\t'
}

func asciiLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
