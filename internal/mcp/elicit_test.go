package mcp_test

import (
	"fmt"
	"strings"
	"testing"

	"atrium/internal/mcp"
)

func obj(props map[string]any, required ...string) map[string]any {
	r := []any{}
	for _, x := range required {
		r = append(r, x)
	}
	return map[string]any{"type": "object", "properties": props, "required": r}
}

// Hostile or unsupported schemas are refused with a message the server can act on.
func TestParseFormRefuses(t *testing.T) {
	many := map[string]any{}
	for i := range 51 {
		many[fmt.Sprintf("f%d", i)] = map[string]any{"type": "string"}
	}
	manyOptions := []any{}
	for i := range 101 {
		manyOptions = append(manyOptions, fmt.Sprint(i))
	}
	for _, tc := range []struct {
		name   string
		schema any
		want   string
	}{
		{"huge", obj(map[string]any{"a": map[string]any{"type": "string", "description": strings.Repeat("x", 70<<10)}}), "at most 65536"},
		{"nested object", obj(map[string]any{"a": map[string]any{"type": "object", "properties": map[string]any{"b": map[string]any{"type": "string"}}}}), "nested object"},
		{"deep array", obj(map[string]any{"a": map[string]any{"type": "array", "items": map[string]any{"type": "object"}}}), "other than enum strings"},
		{"too many fields", obj(many), "at most 50"},
		{"too many options", obj(map[string]any{"a": map[string]any{"type": "string", "enum": manyOptions}}), "at most 100"},
		{"unknown type", obj(map[string]any{"a": map[string]any{"type": "null"}}), `type "null"`},
		{"unknown format", obj(map[string]any{"a": map[string]any{"type": "string", "format": "ipv4"}}), `format "ipv4"`},
		{"not an object", map[string]any{"type": "string"}, `"type": "object"`},
		{"required missing", obj(map[string]any{"a": map[string]any{"type": "string"}}, "b"), `"b" is not among`},
		{"long name", obj(map[string]any{strings.Repeat("n", 65): map[string]any{"type": "string"}}), "1–64 characters"},
		{"non-string enum", obj(map[string]any{"a": map[string]any{"type": "string", "enum": []any{1, 2}}}), "not a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcp.ParseForm(tc.schema)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one with %q", err, tc.want)
			}
		})
	}
}

// Long texts are cut, and the answer is checked against the schema.
func TestFormAnswer(t *testing.T) {
	f, err := mcp.ParseForm(obj(map[string]any{
		"email": map[string]any{"type": "string", "format": "email", "title": strings.Repeat("T", 2000)},
		"day":   map[string]any{"type": "string", "format": "date"},
		"n":     map[string]any{"type": "number", "minimum": 1.5},
		"i":     map[string]any{"type": "integer", "maximum": 3},
		"ok":    map[string]any{"type": "boolean", "default": true},
		"pick":  map[string]any{"type": "string", "oneOf": []any{map[string]any{"const": "a", "title": "Apple"}, map[string]any{"const": "b"}}},
		"many":  map[string]any{"type": "array", "minItems": 2, "items": map[string]any{"enum": []any{"x", "y", "z"}}},
		"short": map[string]any{"type": "string", "maxLength": 3},
	}, "email"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Fields) != 8 || f.Fields[0].Name != "email" || len(f.Fields[0].Title) != 500 {
		t.Fatalf("fields %+v", f.Fields)
	}
	_, problems := f.Answer(map[string][]string{"email": {"not an address"}, "day": {"31.12.2020"}, "n": {"1"}, "i": {"2.5"},
		"pick": {"c"}, "many": {"x"}, "short": {"abcd"}})
	for name, want := range map[string]string{"email": "email address", "day": "YYYY-MM-DD", "n": "At least 1.5", "i": "whole number",
		"pick": "listed options", "many": "at least 2", "short": "At most 3 characters"} {
		if !strings.Contains(problems[name], want) {
			t.Errorf("%s: problem %q, want %q", name, problems[name], want)
		}
	}
	if _, p := f.Answer(map[string][]string{}); p["email"] != "Required." || len(p) != 1 {
		t.Errorf("empty form: %v", p)
	}
	got, problems := f.Answer(map[string][]string{"email": {"ada@example.com"}, "day": {"2020-12-31"}, "n": {"2"}, "i": {"3"},
		"pick": {"a"}, "many": {"x", "z"}, "short": {"abc"}})
	if problems != nil {
		t.Fatalf("problems %v", problems)
	}
	want := map[string]any{"email": "ada@example.com", "day": "2020-12-31", "n": 2.0, "i": int64(3), "ok": false, "pick": "a",
		"many": []string{"x", "z"}, "short": "abc"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answer %v, want %v", got, want)
	}
}
