package web

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// fold shows the first lines of a long text and keeps the rest whole behind the
// toggle: no byte is lost, and a cut inside one long line never splits a character.
func TestFoldLongText(t *testing.T) {
	lines := strings.Repeat("line\n", 50)
	long := strings.Repeat("数", 3000) // one line, 9,000 bytes
	for name, c := range map[string]struct {
		text     string
		wantRest bool
	}{
		"short":         {"a\nb", false},
		"many lines":    {lines, true},
		"one long line": {long, true},
		"just enough":   {strings.Repeat("x\n", foldLines-1) + "x", false},
	} {
		p := fold("label", c.text)
		if p.Head+p.Rest != c.text {
			t.Errorf("%s: head+rest is not the text", name)
		}
		if (p.Rest != "") != c.wantRest {
			t.Errorf("%s: rest %d bytes", name, len(p.Rest))
		}
		if !utf8.ValidString(p.Head) || !utf8.ValidString(p.Rest) {
			t.Errorf("%s: cut inside a character", name)
		}
		if strings.Count(p.Head, "\n") > foldLines || len(p.Head) > foldChars {
			t.Errorf("%s: head has %d lines, %d bytes", name, strings.Count(p.Head, "\n"), len(p.Head))
		}
	}
}
