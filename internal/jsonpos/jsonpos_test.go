package jsonpos_test

import (
	"encoding/json"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/jsonpos"
)

func TestError(t *testing.T) {
	type entry struct {
		Kind string `json:"kind"`
	}
	cases := []struct {
		name, data, want string
		into             any
	}{
		{"syntax", "{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7: invalid character '2' after object key", new(json.RawMessage)},
		{"unexpected end", "{\n  \"a\": [1,", "line 2, column 10: unexpected end of JSON input", new(json.RawMessage)},
		{"wide characters count once", "{\"é€\": x}", "line 1, column 8: invalid character 'x' looking for beginning of value", new(json.RawMessage)},
		{"number for a string", "[\n {\"kind\": 42}]", `line 2, column 11: "kind" must be a string, not number`, new([]entry)},
		{"string for a list", `{"kind": "x"}`, `line 1, column 1: a value must be a list, not object`, new([]entry)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := jsonpos.Error([]byte(c.data), json.Unmarshal([]byte(c.data), c.into))
			if errs.Code(err) != errs.Invalid || errs.Message(err) != c.want {
				t.Errorf("got %q (%s), want %q", errs.Message(err), errs.Code(err), c.want)
			}
		})
	}
}
