package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/tools"
)

const personSchema = `{
	"type": "object",
	"properties": {
		"name": {"type": "string"},
		"age": {"type": "number"},
		"tags": {"type": "array", "items": {"type": "string"}}
	},
	"required": ["name"],
	"additionalProperties": false
}`

func echoTool(name string) tools.Tool {
	return tools.Tool{
		Name:        name,
		Description: "When to use: tests. What it does: echoes. Parameters: name, age.",
		Schema:      json.RawMessage(personSchema),
		Execute: func(ctx context.Context, call tools.Call) (string, error) {
			return `{"got":` + string(call.Args) + `}`, nil
		},
	}
}

func mustRegister(tb testing.TB, r *tools.Registry, t tools.Tool) {
	tb.Helper()
	if err := r.Register(t); err != nil {
		tb.Fatalf("register %s: %v", t.Name, err)
	}
}

// errorShape decodes an error Content and checks it has exactly error and detail.
func errorShape(t *testing.T, res tools.Result) (code, detail string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(res.Content), &m); err != nil {
		t.Fatalf("content %q is not JSON: %v", res.Content, err)
	}
	if len(m) != 2 {
		t.Errorf("content %s: want exactly error and detail", res.Content)
	}
	code, _ = m["error"].(string)
	detail, _ = m["detail"].(string)
	if !res.IsError || res.Code != code {
		t.Errorf("IsError=%v Code=%q, content error %q", res.IsError, res.Code, code)
	}
	return code, detail
}

func TestDispatchErrors(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	r := tools.NewRegistry(nil, nil)
	mustRegister(t, r, echoTool("person"))
	mustRegister(t, r, echoTool("off"))
	if err := r.SetEnabled("off", false); err != nil {
		t.Fatal(err)
	}
	exec := func(name string, fn func(ctx context.Context, call tools.Call) (string, error)) {
		tool := echoTool(name)
		tool.Schema = json.RawMessage(`{"type":"object"}`)
		tool.Execute = fn
		mustRegister(t, r, tool)
	}
	exec("fails_for_model", func(context.Context, tools.Call) (string, error) {
		return "", &tools.Error{Detail: "city \"Atlantis\" not found"}
	})
	exec("fails_wrapped", func(context.Context, tools.Call) (string, error) {
		return "", fmt.Errorf("lookup: %w", tools.Errorf("quota exceeded, try tomorrow"))
	})
	exec("fails_internally", func(context.Context, tools.Call) (string, error) {
		return "", errors.New("open /home/atrium/secret.key: permission denied; token=sk-123")
	})
	exec("panics", func(context.Context, tools.Call) (string, error) {
		panic("runtime secret at /home/atrium/main.go:42")
	})
	exec("ignores_ctx", func(context.Context, tools.Call) (string, error) {
		<-release
		return "late", nil
	})
	r.SetTimeoutForTest("ignores_ctx", 50*time.Millisecond)
	exec("honours_ctx", func(ctx context.Context, _ tools.Call) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	r.SetTimeoutForTest("honours_ctx", 50*time.Millisecond)

	long := strings.Repeat("x", 400)
	cases := []struct {
		name, tool, args string
		code, detail     string
	}{
		{"unknown tool", "x", `{}`, "unknown_tool", `no tool named "x"`},
		{"disabled tool", "off", `{"name":"a"}`, "tool_disabled", `the tool "off" is disabled`},
		{"not JSON", "person", `{"name":`, "invalid_arguments", "arguments are not valid JSON: unexpected end of input"},
		{"not JSON either", "person", `name=a`, "invalid_arguments", "arguments are not valid JSON: invalid character 'a' in literal null (expecting 'u')"},
		{"trailing data", "person", `{"name":"a"} {}`, "invalid_arguments", "arguments are not valid JSON: invalid character after top-level value"},
		{"not an object", "person", `[1]`, "invalid_arguments", "arguments: expected object, got array"},
		{"wrong type", "person", `{"name":"a","age":"7"}`, "invalid_arguments", "age: expected number, got string"},
		{"missing required", "person", `{}`, "invalid_arguments", "name: is required"},
		{"empty means {}", "person", ``, "invalid_arguments", "name: is required"},
		{"extra property", "person", `{"name":"a","x":1}`, "invalid_arguments", "x: is not an allowed property"},
		{"nested", "person", `{"name":"a","tags":["ok",3]}`, "invalid_arguments", "tags.1: expected string, got number"},
		{"two problems", "person", `{"age":"7"}`, "invalid_arguments", "age: expected number, got string (and 1 more problem)"},
		{"executor *Error", "fails_for_model", `{}`, "execution_failed", `city "Atlantis" not found`},
		{"wrapped *Error", "fails_wrapped", `{}`, "execution_failed", "quota exceeded, try tomorrow"},
		{"other error hidden", "fails_internally", `{}`, "execution_failed", "the tool failed"},
		{"panic hidden", "panics", `{}`, "execution_failed", "the tool failed"},
		{"timeout, ctx ignored", "ignores_ctx", `{}`, "timeout", `tool "ignores_ctx" did not finish within 50ms`},
		{"timeout, ctx honoured", "honours_ctx", `{}`, "timeout", `tool "honours_ctx" did not finish within 50ms`},
		{"long name capped", long, `{}`, "unknown_tool", `no tool named "` + long[:61] + `…"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res := r.Dispatch(context.Background(), "s1", 7, llm.ToolCall{ID: "c1", Name: tc.tool, Arguments: tc.args})
			code, detail := errorShape(t, res)
			if code != tc.code || detail != tc.detail {
				t.Errorf("got %s / %q, want %s / %q", code, detail, tc.code, tc.detail)
			}
			if len(detail) > 300 || strings.ContainsAny(detail, "\n") {
				t.Errorf("detail not one short line: %q", detail)
			}
			for _, leak := range []string{"/home", "secret", "sk-123", "goroutine", ".go:"} {
				if strings.Contains(res.Content, leak) {
					t.Errorf("content leaks %q: %s", leak, res.Content)
				}
			}
			if el := time.Since(start); el > time.Second {
				t.Errorf("took %s", el)
			}
			if res.Duration <= 0 || res.Duration > time.Second {
				t.Errorf("Duration %s", res.Duration)
			}
		})
	}
}

func TestDispatchDetailIsCapped(t *testing.T) {
	r := tools.NewRegistry(nil, nil)
	tool := echoTool("enum")
	tool.Schema = json.RawMessage(`{"type":"object","properties":{"v":{"enum":["` +
		strings.Repeat("a", 200) + `","` + strings.Repeat("b", 200) + `"]}}}`)
	mustRegister(t, r, tool)
	res := r.Dispatch(context.Background(), "s", 1, llm.ToolCall{Name: "enum", Arguments: `{"v":"c"}`})
	code, detail := errorShape(t, res)
	if code != "invalid_arguments" || len(detail) > 300 || !strings.HasPrefix(detail, "v: value must be one of") {
		t.Errorf("got %s %q (%d bytes)", code, detail, len(detail))
	}
}

func TestDispatchCanceled(t *testing.T) {
	r := tools.NewRegistry(nil, nil)
	tool := echoTool("wait")
	tool.Execute = func(ctx context.Context, _ tools.Call) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}
	mustRegister(t, r, tool)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	res := r.Dispatch(ctx, "s", 1, llm.ToolCall{Name: "wait", Arguments: `{"name":"a"}`})
	if code, _ := errorShape(t, res); code != "canceled" {
		t.Errorf("got %s", res.Content)
	}
}

func TestDispatchBadThenCorrected(t *testing.T) {
	r := tools.NewRegistry(nil, nil)
	var calls atomic.Int32
	var got tools.Call
	tool := echoTool("person")
	tool.Execute = func(ctx context.Context, call tools.Call) (string, error) {
		calls.Add(1)
		got = call
		return `{"ok":true}`, nil
	}
	mustRegister(t, r, tool)
	ctx := context.Background()

	bad := r.Dispatch(ctx, "s9", 42, llm.ToolCall{ID: "1", Name: "person", Arguments: `{"name":"Ann","age":"forty"}`})
	if code, detail := errorShape(t, bad); code != "invalid_arguments" || detail != "age: expected number, got string" {
		t.Fatalf("bad call: %s", bad.Content)
	}
	if calls.Load() != 0 {
		t.Fatal("executor ran for invalid arguments")
	}
	good := r.Dispatch(ctx, "s9", 42, llm.ToolCall{ID: "2", Name: "person", Arguments: `{"name":"Ann","age":40}`})
	if good.IsError || good.Code != "" || good.Content != `{"ok":true}` {
		t.Fatalf("corrected call: %+v", good)
	}
	if calls.Load() != 1 || got.SessionID != "s9" || got.OwnerID != 42 || string(got.Args) != `{"name":"Ann","age":40}` {
		t.Errorf("executor got %+v (calls %d)", got, calls.Load())
	}
}

func TestRegister(t *testing.T) {
	with := func(f func(*tools.Tool)) tools.Tool {
		tool := echoTool("t")
		f(&tool)
		return tool
	}
	cases := []struct {
		name string
		tool tools.Tool
		code string // "" = accepted
	}{
		{"ok", with(func(*tools.Tool) {}), ""},
		{"mcp style name", with(func(t *tools.Tool) { t.Name = "files__read-file_2" }), ""},
		{"64 chars", with(func(t *tools.Tool) { t.Name = strings.Repeat("a", 64) }), ""},
		{"65 chars", with(func(t *tools.Tool) { t.Name = strings.Repeat("a", 65) }), errs.Invalid},
		{"empty name", with(func(t *tools.Tool) { t.Name = "" }), errs.Invalid},
		{"space", with(func(t *tools.Tool) { t.Name = "a b" }), errs.Invalid},
		{"dot", with(func(t *tools.Tool) { t.Name = "a.b" }), errs.Invalid},
		{"non-ASCII", with(func(t *tools.Tool) { t.Name = "wetter_ä" }), errs.Invalid},
		{"timeout 10s", with(func(t *tools.Tool) { t.Timeout = 10 * time.Second }), ""},
		{"timeout 30s", with(func(t *tools.Tool) { t.Timeout = 30 * time.Second }), ""},
		{"timeout 9s", with(func(t *tools.Tool) { t.Timeout = 9 * time.Second }), errs.Invalid},
		{"timeout 31s", with(func(t *tools.Tool) { t.Timeout = 31 * time.Second }), errs.Invalid},
		{"negative timeout", with(func(t *tools.Tool) { t.Timeout = -time.Second }), errs.Invalid},
		{"no description", with(func(t *tools.Tool) { t.Description = " " }), errs.Invalid},
		{"no executor", with(func(t *tools.Tool) { t.Execute = nil }), errs.Invalid},
		{"no schema", with(func(t *tools.Tool) { t.Schema = nil }), errs.Invalid},
		{"schema not JSON", with(func(t *tools.Tool) { t.Schema = json.RawMessage(`{"type":`) }), errs.Invalid},
		{"schema not object", with(func(t *tools.Tool) { t.Schema = json.RawMessage(`{"type":"string"}`) }), errs.Invalid},
		{"schema bad keyword value", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"nope"}}}`)
		}), errs.Invalid},
		{"schema bad pattern", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`)
		}), errs.Invalid},
		{"schema file $ref", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`)
		}), errs.Invalid},
		{"schema remote $ref", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`)
		}), errs.Invalid},
		{"schema local $ref", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"number"}}}`)
		}), ""},
		{"undeclared draft-07 tuple items", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"p":{"type":"array","items":[{"type":"string"}]}}}`)
		}), ""},
		{"declared 2020-12 with tuple items", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"p":{"type":"array","items":[{"type":"string"}]}}}`)
		}), errs.Invalid},
		{"draft-07 schema", with(func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"number"}}}`)
		}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tools.NewRegistry(nil, nil).Register(tc.tool)
			switch {
			case tc.code == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.code != "" && !errs.Is(err, tc.code):
				t.Errorf("got %v, want code %s", err, tc.code)
			}
		})
	}
}

func TestRegistryLifecycle(t *testing.T) {
	r := tools.NewRegistry(nil, nil)
	ctx := context.Background()
	for _, n := range []string{"b", "c", "a"} {
		mustRegister(t, r, echoTool(n))
	}
	if err := r.Register(echoTool("b")); !errs.Is(err, errs.Conflict) {
		t.Errorf("collision: got %v, want conflict", err)
	}
	if err := r.SetEnabled("nope", true); !errs.Is(err, errs.NotFound) {
		t.Errorf("SetEnabled unknown: %v", err)
	}
	if err := r.SetEnabled("b", false); err != nil {
		t.Fatal(err)
	}
	names := func() string {
		var s []string
		for _, t := range r.Enabled() {
			s = append(s, t.Name)
		}
		return strings.Join(s, ",")
	}
	if got := names(); got != "a,c" {
		t.Errorf("Enabled = %s", got)
	}
	r.SetEnabled("b", true)
	if got := names(); got != "a,b,c" {
		t.Errorf("Enabled = %s", got)
	}
	specs := r.Specs(r.Enabled())
	if len(specs) != 3 || specs[0].Name != "a" || !strings.HasPrefix(specs[0].Description, "When to use:") ||
		string(specs[0].Parameters) != personSchema {
		t.Errorf("specs: %+v", specs)
	}
	if res := r.Dispatch(ctx, "s", 1, llm.ToolCall{Name: "c", Arguments: `{"name":"x"}`}); res.IsError || res.Content != `{"got":{"name":"x"}}` {
		t.Errorf("dispatch c: %+v", res)
	}
	r.Unregister("c")
	r.Unregister("never-registered")
	if res := r.Dispatch(ctx, "s", 1, llm.ToolCall{Name: "c", Arguments: `{}`}); res.Code != "unknown_tool" {
		t.Errorf("after Unregister: %+v", res)
	}
	mustRegister(t, r, echoTool("c")) // the name is free again
}

func TestDispatchConcurrent(t *testing.T) {
	r := tools.NewRegistry(nil, nil)
	mustRegister(t, r, echoTool("p"))
	done := make(chan bool)
	for i := range 8 {
		go func() {
			ok := true
			for j := range 50 {
				args := fmt.Sprintf(`{"name":"n%d","age":%d}`, i, j)
				if j%2 == 1 {
					args = `{"age":"x","name":"n"}`
				}
				res := r.Dispatch(context.Background(), "s", 1, llm.ToolCall{Name: "p", Arguments: args})
				ok = ok && res.IsError == (j%2 == 1)
				if i == 0 && j == 25 {
					r.SetEnabled("q", false) // concurrent writes to the registry
				}
			}
			done <- ok
		}()
	}
	mustRegister(t, r, echoTool("q"))
	for range 8 {
		if !<-done {
			t.Error("a call got the wrong outcome")
		}
	}
}

// BenchmarkToolDispatch measures validation and bookkeeping for one call: a
// small schema and an executor that does nothing.
func BenchmarkToolDispatch(b *testing.B) {
	r := tools.NewRegistry(nil, nil)
	tool := echoTool("person")
	tool.Execute = func(context.Context, tools.Call) (string, error) { return `{}`, nil }
	mustRegister(b, r, tool)
	call := llm.ToolCall{ID: "c1", Name: "person", Arguments: `{"name":"Ann","age":40,"tags":["a","b"]}`}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Dispatch(ctx, "s", 1, call); res.IsError {
			b.Fatal(res.Content)
		}
	}
}

// TestReplaceNeverLeavesAGap: a tool whose definition changes (an MCP server's new
// schema) is replaced in one step: calls racing the change get the old or the new
// tool, never unknown_tool, and the tool keeps its enabled state.
func TestReplaceNeverLeavesAGap(t *testing.T) {
	r := tools.NewRegistry(nil, nil)
	mustRegister(t, r, echoTool("p"))
	if err := r.Replace(echoTool("nope")); !errs.Is(err, errs.NotFound) {
		t.Errorf("Replace of an unknown tool: %v", err)
	}
	bad := echoTool("p")
	bad.Schema = json.RawMessage(`{"type":"string"}`)
	if err := r.Replace(bad); !errs.Is(err, errs.Invalid) {
		t.Errorf("Replace with a bad schema: %v", err)
	}
	stop := make(chan struct{})
	unknown := make(chan tools.Result, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(unknown)
				return
			default:
			}
			if res := r.Dispatch(context.Background(), "s", 1, llm.ToolCall{Name: "p", Arguments: `{"name":"x"}`}); res.Code == tools.CodeUnknownTool {
				unknown <- res
				close(unknown)
				return
			}
		}
	}()
	for i := range 2000 {
		next := echoTool("p")
		next.Description = fmt.Sprintf("When to use: tests, version %d. What it does: echoes.", i)
		if err := r.Replace(next); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if res, ok := <-unknown; ok {
		t.Errorf("a call during the replacements got %+v", res)
	}
	if err := r.SetEnabled("p", false); err != nil {
		t.Fatal(err)
	}
	if err := r.Replace(echoTool("p")); err != nil {
		t.Fatal(err)
	}
	if len(r.Enabled()) != 0 {
		t.Error("Replace enabled a disabled tool")
	}
}
