package tools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/tools"
)

// FuzzToolArguments sends model-written arguments to the schema-checked echo tool and
// the built-in calculator and datetime: whatever comes in, the answer is a result (never
// a panic) whose content is JSON, and an error carries a known code; what reaches the
// echo tool's executor has passed its schema.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{
		`{"name":"ada","age":36,"tags":["x"]}`, `{"name":1}`, `{}`, ``, `[`, `null`, `"x"`,
		`{"name":"a","extra":true}`, `{"expression":"2^10 + sqrt(16) * (3 % 2)"}`,
		`{"expression":"1/0"}`, `{"expression":"((((((((1))))))))"}`, `{"expression":"9^9^9^9"}`,
		`{"time_zone":"Asia/Shanghai"}`, `{"time_zone":"../../etc/passwd"}`, "{\"name\":\"\u0000\"}",
		`{"name":"a","age":1e999}`, `{"a":{"b":{"c":[[[[[]]]]]}}}`,
	} {
		for _, tool := range []string{"echo", "calculator", "datetime"} {
			f.Add(tool, s)
		}
	}
	r := tools.NewRegistry(nil, nil)
	mustRegister(f, r, echoTool("echo"))
	if err := tools.RegisterBuiltins(r, func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }, nil); err != nil {
		f.Fatal(err)
	}
	codes := map[string]bool{tools.CodeUnknownTool: true, tools.CodeDisabled: true, tools.CodeInvalidArguments: true,
		tools.CodeExecutionFailed: true, tools.CodeTimeout: true, tools.CodeCanceled: true, tools.CodeUnavailable: true}
	f.Fuzz(func(t *testing.T, name, args string) {
		res := r.Dispatch(context.Background(), "s1", 1, llm.ToolCall{ID: "c1", Name: name, Arguments: args})
		if !json.Valid([]byte(res.Content)) {
			t.Fatalf("%s(%q): content is not JSON: %q", name, args, res.Content)
		}
		if res.IsError != (res.Code != "") || (res.IsError && !codes[res.Code]) {
			t.Fatalf("%s(%q): IsError %v with code %q", name, args, res.IsError, res.Code)
		}
		if name == "echo" && !res.IsError {
			var got struct {
				Got map[string]any `json:"got"`
			}
			dec := json.NewDecoder(strings.NewReader(res.Content))
			dec.UseNumber() // 1e999 is valid JSON but no float64
			if err := dec.Decode(&got); err != nil || got.Got["name"] == nil {
				t.Fatalf("echo(%q) reached the executor without a name: %s", args, res.Content)
			}
		}
	})
}
