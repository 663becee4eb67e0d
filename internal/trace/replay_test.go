package trace_test

import (
	"strings"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/trace"
)

// SetModel changes the top-level model value and no other byte: not a "model" key
// nested in the messages, not the spacing around it.
func TestSetModel(t *testing.T) {
	cases := []struct{ in, model, want string }{
		{`{"model":"a","stream":true}`, "b", `{"model":"b","stream":true}`},
		{`{ "messages" : [{"role":"user","content":"x","model":"a"}] ,  "model" :  "a" , "n":1}`, "gpt-5",
			`{ "messages" : [{"role":"user","content":"x","model":"a"}] ,  "model" :  "gpt-5" , "n":1}`},
		{`{"tools":{"model":{"type":"string"}},"model":"a\u00e9"}`, `qu"ote`, `{"tools":{"model":{"type":"string"}},"model":"qu\"ote"}`},
		{"{\n\t\"model\":\n\t\"old\"\n}", "new", "{\n\t\"model\":\n\t\"new\"\n}"},
	}
	for _, c := range cases {
		got, err := trace.SetModel([]byte(c.in), c.model)
		if err != nil || string(got) != c.want {
			t.Errorf("SetModel(%s, %q) = %s, %v; want %s", c.in, c.model, got, err, c.want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"messages":[]}`, `{"model":7}`, `{"model":"a"`, `not json`} {
		if _, err := trace.SetModel([]byte(bad), "m"); !errs.Is(err, errs.Invalid) {
			t.Errorf("SetModel(%q) error %v, want Invalid", bad, err)
		}
	}
}

// Each side of a word diff joins back to its text, and shared words are kept.
func TestWordDiff(t *testing.T) {
	cases := []struct{ a, b, want string }{
		{"the sum is 42", "the sum is 42", "=the sum is 42"},
		{"the sum is 42", "the total is 42", "=the |-sum|+total|= is 42"},
		{"", "new text", "+new text"},
		{"old text", "", "-old text"},
		{"a b c", "a c", "=a |-b |=c"},
	}
	for _, c := range cases {
		parts := trace.WordDiff(c.a, c.b)
		var shown, left, right []string
		for _, p := range parts {
			shown = append(shown, string(p.Op)+p.Text)
			if p.Op != '+' {
				left = append(left, p.Text)
			}
			if p.Op != '-' {
				right = append(right, p.Text)
			}
		}
		if got := strings.Join(shown, "|"); got != c.want {
			t.Errorf("WordDiff(%q, %q) = %s, want %s", c.a, c.b, got, c.want)
		}
		if strings.Join(left, "") != c.a || strings.Join(right, "") != c.b {
			t.Errorf("WordDiff(%q, %q) does not join back: %q / %q", c.a, c.b, left, right)
		}
	}
	// Past the table bound the middle is one removal and one insertion, still exact.
	a, b := strings.Repeat("x ", 1500), strings.Repeat("y ", 1500)
	parts := trace.WordDiff("start "+a+"end", "start "+b+"end")
	if len(parts) != 4 || parts[1].Text != strings.TrimSuffix(a, " ") || parts[2].Text != strings.TrimSuffix(b, " ") {
		t.Errorf("large diff: %d parts, first %.20q", len(parts), parts[0].Text)
	}
}
