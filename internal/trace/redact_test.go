package trace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/store/storetest"
	"atrium/internal/trace"
)

func TestRedactorString(t *testing.T) {
	r := trace.NewRedactor()
	r.AddSecret("cfg-secret-0042")
	r.AddSecret("abc") // too short: ignored
	r.AddSecret("  cfg-secret-0042  ")
	for _, tc := range []struct{ in, want string }{
		{"plain text, nothing to hide: abc", "plain text, nothing to hide: abc"},
		{"the bearer of bad news", "the bearer of bad news"},
		{"send a Bearer token.", "send a Bearer token."},
		{"Bearer abc.def", "Bearer [REDACTED]"},
		{"header was Authorization: Bearer abc.def, sadly", "header was Authorization: Bearer [REDACTED], sadly"},
		{"x-api-key: zzz123 next", "x-api-key: [REDACTED] next"},
		{"api_key=qwerty&x=1", "api_key=[REDACTED]&x=1"},
		{"my key is sk-proj-AbCdEf0123456789xyz, ok?", "my key is [REDACTED], ok?"},
		{"key sk-ant-api03-abcdefghijklmnop0123 end", "key [REDACTED] end"},
		{"task-abcdefghijklmnopqrstuvwxyz stays", "task-abcdefghijklmnopqrstuvwxyz stays"},
		{"risk-free", "risk-free"},
		{"use cfg-secret-0042 twice: cfg-secret-0042", "use [REDACTED] twice: [REDACTED]"},
		{"Bearer cfg-secret-0042", "Bearer [REDACTED]"},
	} {
		if got := r.String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRedactorJSON(t *testing.T) {
	r := trace.NewRedactor()
	r.AddSecret("cfg-secret-0042")
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"nil", nil, ""},
		{"headers keep their shape", http.Header{"Authorization": {"Bearer x"}, "Content-Type": {"application/json"}},
			`{"Authorization":["[REDACTED]"],"Content-Type":["application/json"]}`},
		{"keys any case", json.RawMessage(`{"API_KEY":"x","Api-Key":"y","X-Api-Key":"z","password":null,"Token":7,"secret":true}`),
			`{"API_KEY":"[REDACTED]","Api-Key":"[REDACTED]","Token":"[REDACTED]","X-Api-Key":"[REDACTED]","password":null,"secret":"[REDACTED]"}`},
		{"a schema property named token stays a schema",
			json.RawMessage(`{"properties":{"token":{"type":"string"}},"required":["token"],"type":"object"}`),
			`{"properties":{"token":{"type":"string"}},"required":["token"],"type":"object"}`},
		{"numbers keep their text", json.RawMessage(`{"n":12345678901234567890,"f":1.50}`), `{"f":1.50,"n":12345678901234567890}`},
		{"strings inside", []any{"<b>&</b>", "Bearer abc.def", map[string]string{"note": "was cfg-secret-0042"}},
			`["<b>&</b>","Bearer [REDACTED]",{"note":"was [REDACTED]"}]`},
		{"secret as a key", map[string]int{"cfg-secret-0042": 1}, `{"[REDACTED]":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.JSON(tc.in)
			mustNil(t, err)
			if string(got) != tc.want {
				t.Errorf("JSON = %s\nwant   %s", got, tc.want)
			}
		})
	}
	if _, err := r.JSON(func() {}); err == nil {
		t.Error("JSON of a func succeeded")
	}
}

// TestRedactionInStoredRows puts every kind of secret into spans and run errors
// and then scans the raw columns.
func TestRedactionInStoredRows(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const (
		apiKey   = "prov-key-7c1e9a55d0"  // a configured provider key without a recognisable shape
		mcpToken = "mcp-token-e3b0c44298" // a configured MCP server token
		fieldVal = "plain-field-value-81" // the value of an api_key field
		pwVal    = "hunter2-hunter2"
		bearer   = "abc.def"
		skKey    = "sk-proj-Zq9Xw8Vu7Ts6Rq5Po4Nm"
	)
	f.red.AddSecret(apiKey)
	f.red.AddSecret(mcpToken)

	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	req := llm.Request{Model: "m", Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "my key is " + skKey + " and the header was Bearer " + bearer},
	}}
	header := http.Header{"Authorization": {"Bearer " + apiKey}, "X-Api-Key": {apiKey}, "Content-Type": {"application/json"}}
	s, err := run.Span(ctx, trace.KindModelRequest, "m", trace.ModelRequest{
		Request: req,
		HTTP:    trace.NewHTTPRequest("POST", "https://u:"+pwVal+"@api.example/v1/chat?key="+apiKey+"&v=2", header, []byte(`{"model":"m"}`)),
	})
	mustNil(t, err)
	mustNil(t, s.End(ctx, "", fmt.Errorf("upstream: invalid key %s", apiKey), 0, 0, nil))

	tool, err := run.Span(ctx, trace.KindToolCall, "mcp__fetch",
		json.RawMessage(`{"api_key":"`+fieldVal+`","nested":{"Password":"`+pwVal+`"},"list":["Bearer `+bearer+`"],"env":"TOKEN=`+mcpToken+`"}`))
	mustNil(t, err)
	mustNil(t, tool.End(ctx, "", nil, 0, 0, map[string]string{"result": "fetched with " + mcpToken}))
	mustNil(t, run.Record(ctx, trace.KindError, "Bearer "+bearer, nil, time.Time{}, "", errors.New("Authorization: Bearer "+bearer), 0, 0))
	mustNil(t, run.End(ctx, "", fmt.Errorf("provider said: key %s rejected", skKey), 0, 0, 1))

	// Every stored text of every span and run, read raw rather than through
	// the recorder, so that nothing in between could hide a secret.
	stored := storetest.Strings(t, f.db, `SELECT COALESCE(data, '') FROM spans UNION ALL SELECT error FROM spans
		UNION ALL SELECT name FROM spans UNION ALL SELECT error FROM runs UNION ALL SELECT model FROM runs`)
	all := strings.Join(stored, "\n")
	for _, secret := range []string{apiKey, mcpToken, fieldVal, pwVal, bearer, skKey, "Zq9Xw8Vu7Ts6Rq5Po4Nm"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q is stored:\n%s", secret, all)
		}
	}
	for _, want := range []string{`"Authorization":["[REDACTED]"]`, `"api_key":"[REDACTED]"`, "upstream: invalid key [REDACTED]",
		"provider said: key [REDACTED] rejected", `"Content-Type":["application/json"]`, "https://api.example/v1/chat?key=%5BREDACTED%5D&v=2"} {
		if !strings.Contains(all, want) {
			t.Errorf("stored rows lack %s:\n%s", want, all)
		}
	}
}

// Long base64 runs (attached images) pass through byte for byte and are not scanned,
// while credentials around them, or shaped like them, are still replaced.
func TestRedactSkipsImageBase64(t *testing.T) {
	r := trace.NewRedactor()
	run := strings.Repeat("QUtleUtFWWtleQ+/", 200) // base64 with "key" and "KEY" in it
	token := strings.Repeat("abcDEF123", 200)      // a long bearer token: still a credential
	in := `{"auth":"Bearer ` + token + `","url":"data:image/png;base64,` + run + `==","k":"sk-abcdefghijklmnopqrstuv","data":"` + run + `"}`
	got := r.String(in)
	want := `{"auth":"Bearer [REDACTED]","url":"data:image/png;base64,` + run + `==","k":"[REDACTED]","data":"` + run + `"}`
	if got != want {
		t.Errorf("redacted =\n%.300s…\nwant\n%.300s…", got, want)
	}
}
