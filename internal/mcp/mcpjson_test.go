package mcp_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/mcp"
)

const claudeDesktop = `{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "GitHub Tools": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret"},
      "cwd": "/srv/gh",
      "autoApprove": ["get_me"]
    }
  },
  "globalShortcut": "Ctrl+Space"
}`

func TestParseServersJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []mcp.ServerConfig
	}{
		{"claude desktop", claudeDesktop, []mcp.ServerConfig{
			{Name: "filesystem", Transport: "stdio", Enabled: true, Command: "npx",
				Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"}},
			{Name: "github-tools", Transport: "stdio", Enabled: true, Command: "docker",
				Args: []string{"run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"},
				Env:  map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret"}, Dir: "/srv/gh"},
		}},
		{"remote http and sse", `{"mcpServers": {
			"plain":      {"url": "https://example.com/mcp"},
			"streamable": {"url": "https://example.com/mcp", "type": "streamable-http"},
			"camel":      {"url": "http://localhost:8080/mcp", "transport": "streamableHttp"},
			"typed-sse":  {"url": "https://example.com/events", "type": "sse"},
			"path-sse":   {"url": "https://example.com/v1/sse/"},
			"off":        {"url": "https://example.com/mcp", "disabled": true}
		}}`, []mcp.ServerConfig{
			{Name: "plain", Transport: "http", Enabled: true, URL: "https://example.com/mcp"},
			{Name: "streamable", Transport: "http", Enabled: true, URL: "https://example.com/mcp"},
			{Name: "camel", Transport: "http", Enabled: true, URL: "http://localhost:8080/mcp"},
			{Name: "typed-sse", Transport: "sse", Enabled: true, URL: "https://example.com/events"},
			{Name: "path-sse", Transport: "sse", Enabled: true, URL: "https://example.com/v1/sse/"},
			{Name: "off", Transport: "http", Enabled: false, URL: "https://example.com/mcp"},
		}},
		{"bearer token", `{"mcpServers": {
			"api": {"url": "https://api.example.com/mcp", "headers": {"authorization": "bearer tok-123", "X-Team": "blue"}},
			"basic": {"url": "https://b.example.com/mcp", "headers": {"Authorization": "Basic dXNlcjpwdw=="}},
			"kept": {"url": "https://k.example.com/mcp", "headers": {"Authorization": "Bearer REDACTED"}}
		}}`, []mcp.ServerConfig{
			{Name: "api", Transport: "http", Enabled: true, URL: "https://api.example.com/mcp",
				BearerToken: "tok-123", Headers: map[string]string{"X-Team": "blue"}},
			{Name: "basic", Transport: "http", Enabled: true, URL: "https://b.example.com/mcp",
				Headers: map[string]string{"Authorization": "Basic dXNlcjpwdw=="}},
			{Name: "kept", Transport: "http", Enabled: true, URL: "https://k.example.com/mcp", BearerToken: mcp.RedactedValue},
		}},
		{"bare object without the wrapper", `{"fs": {"command": "mcp-fs"}, "web": {"url": "https://w.example.com/mcp"}}`, []mcp.ServerConfig{
			{Name: "fs", Transport: "stdio", Enabled: true, Command: "mcp-fs"},
			{Name: "web", Transport: "http", Enabled: true, URL: "https://w.example.com/mcp"},
		}},
		{"atrium fields", `{"mcpServers": {"fs": {"command": "mcp-fs", "allowTools": ["read"], "callTimeoutMs": 15000, "args": null}}}`,
			[]mcp.ServerConfig{{Name: "fs", Transport: "stdio", Enabled: true, Command: "mcp-fs",
				AllowTools: []string{"read"}, CallTimeout: 15 * time.Second}}},
		{"no servers", `{"mcpServers": {}}`, []mcp.ServerConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mcp.ParseServersJSON([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestParseServersJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"bad JSON", "{\n  \"mcpServers\": {\n    \"fs\": {},,\n  }\n}",
			"line 3, column 14: invalid character ',' looking for beginning of object key string"},
		{"column counts characters", "{\"mcpServers\": {\"é\": {\"command\": x}}}",
			"line 1, column 34: invalid character 'x' looking for beginning of value"},
		{"unexpected end", "{\n  \"mcpServers\": {\n    \"fs\": {\"command\": \"npx\"}\n",
			"line 3, column 29: unexpected end of JSON input"},
		{"empty", " \n", "the JSON is empty"},
		{"not an object", "\n [1, 2]", "line 2, column 2: expected a JSON object"},
		{"mcpServers not an object", "{\n  \"mcpServers\": [\"fs\"]\n}", `line 2, column 17: "mcpServers" must be an object`},
		{"bare object with a non-server", `{"fs": {"command": "x"}, "theme": "dark"}`, `found no "mcpServers" key, and "theme" is not a server`},
		{"type error", "{\"mcpServers\": {\n  \"fs\": {\n    \"command\": \"npx\",\n    \"args\": \"x\"\n  }\n}}",
			`server "fs", field "args" (line 4): must be an array of strings`},
		{"env values must be strings", "{\"mcpServers\": {\"fs\": {\"command\": \"npx\", \"env\": {\"PORT\": 8080}}}}",
			`server "fs", field "env" (line 1): must be an object of strings`},
		{"server not an object", "{\"mcpServers\": {\n\"fs\": \"npx\"}}", `server "fs" (line 2): must be an object`},
		{"missing command and url", "{\"mcpServers\": {\n  \"ok\": {\"command\": \"x\"},\n  \"empty\": {\"env\": {}}\n}}",
			`server "empty" (line 3): needs "command" (a local server) or "url" (a remote one)`},
		{"both command and url", `{"mcpServers": {"fs": {"command": "x", "url": "https://x.example.com"}}}`,
			`server "fs" (line 1): has both "command" and "url"`},
		{"url not http", `{"mcpServers": {"fs": {"url": "file:///tmp/sock"}}}`,
			`server "fs" (line 1): "url" must be an http:// or https:// address, not "file:///tmp/sock"`},
		{"sse with a command", `{"mcpServers": {"fs": {"command": "x", "type": "sse"}}}`, `server "fs" (line 1): type "sse" needs "url"`},
		{"unknown type", `{"mcpServers": {"fs": {"url": "https://x.example.com", "type": "websocket"}}}`, `server "fs" (line 1): unknown type "websocket"`},
		{"bad name", "{\"mcpServers\": {\n\n  \"_private\": {\"command\": \"x\"}}}",
			`server "_private" (line 3): the name must be 1 to 32 characters of a-z, 0-9, '-' and '_', starting with a letter or digit`},
		{"name too long", `{"mcpServers": {"` + strings.Repeat("a", 33) + `": {"command": "x"}}}`, `the name must be 1 to 32 characters`},
		{"duplicate after normalisation", "{\"mcpServers\": {\n  \"My Server\": {\"command\": \"a\"},\n  \"my-server\": {\"command\": \"b\"}\n}}",
			`servers "My Server" (line 2) and "my-server" (line 3) would both be named "my-server"; rename one`},
		{"duplicate key", "{\"mcpServers\": {\n  \"fs\": {\"command\": \"a\"},\n  \"fs\": {\"command\": \"b\"}\n}}",
			`server "fs" appears twice (lines 2 and 3)`},
		{"checked by Validate too", "{\"mcpServers\": {\n  \"fs\": {\"command\": \"x\", \"callTimeoutMs\": 60000}}}",
			`line 2: Server "fs": the call timeout must be between`},
		{"every problem is reported", "{\"mcpServers\": {\n  \"a\": {},\n  \"b\": {\"args\": 1}\n}}",
			`server "a" (line 2): needs "command" (a local server) or "url" (a remote one); server "b", field "args" (line 3): must be an array of strings`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mcp.ParseServersJSON([]byte(tc.in))
			if err == nil {
				t.Fatalf("no error; got %+v", got)
			}
			if got != nil {
				t.Errorf("servers returned with an error: %+v", got)
			}
			if errs.Code(err) != errs.Invalid {
				t.Errorf("code %s, want invalid (%v)", errs.Code(err), err)
			}
			if msg := errs.Message(err); !strings.Contains(msg, tc.want) {
				t.Errorf("message\n  %s\ndoes not contain\n  %s", msg, tc.want)
			}
		})
	}
}

func TestExportServersJSON(t *testing.T) {
	cfgs := []mcp.ServerConfig{
		{Name: "web", Transport: "sse", Enabled: false, URL: "https://w.example.com/sse?a=1&b=2",
			Headers: map[string]string{"X-Team": "blue", "X-Key": "k"}, BearerToken: "tok",
			DenyTools: []string{"delete"}, CallTimeout: 25 * time.Second},
		{Name: "fs", Transport: "stdio", Enabled: true, Command: "npx", Args: []string{"-y", "server-filesystem", "/tmp"},
			Env: map[string]string{"TOKEN": "s3cret", "EMPTY": ""}, Dir: "/srv", AllowTools: []string{"read_file"}},
		{Name: "api", Transport: "http", Enabled: true, URL: "https://api.example.com/mcp",
			Roots: []string{"file:///srv/a"}, ProgressMax: 2 * time.Minute, SamplingAlways: true},
	}

	t.Run("format", func(t *testing.T) {
		out, err := mcp.ExportServersJSON(cfgs, false)
		if err != nil {
			t.Fatal(err)
		}
		want := `{
  "mcpServers": {
    "api": {
      "type": "http",
      "url": "https://api.example.com/mcp",
      "roots": [
        "file:///srv/a"
      ],
      "progressMaxMs": 120000,
      "samplingAlways": true
    },
    "fs": {
      "command": "npx",
      "args": [
        "-y",
        "server-filesystem",
        "/tmp"
      ],
      "env": {
        "EMPTY": "",
        "TOKEN": "REDACTED"
      },
      "cwd": "/srv",
      "allowTools": [
        "read_file"
      ]
    },
    "web": {
      "type": "sse",
      "url": "https://w.example.com/sse?a=1&b=2",
      "headers": {
        "Authorization": "Bearer REDACTED",
        "X-Key": "REDACTED",
        "X-Team": "REDACTED"
      },
      "disabled": true,
      "denyTools": [
        "delete"
      ],
      "callTimeoutMs": 25000
    }
  }
}
`
		if string(out) != want {
			t.Errorf("got\n%s", out)
		}
		if strings.Contains(string(out), "s3cret") || strings.Contains(string(out), "tok\"") || strings.Contains(string(out), "blue") {
			t.Errorf("a secret leaked:\n%s", out)
		}
	})

	t.Run("round trip with secrets", func(t *testing.T) {
		out, err := mcp.ExportServersJSON(cfgs, true)
		if err != nil {
			t.Fatal(err)
		}
		got, err := mcp.ParseServersJSON(out)
		if err != nil {
			t.Fatal(err)
		}
		want := []mcp.ServerConfig{cfgs[2], cfgs[1], cfgs[0]} // sorted by name
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got\n%+v\nwant\n%+v", got, want)
		}
	})

	t.Run("round trip without secrets", func(t *testing.T) {
		out, err := mcp.ExportServersJSON(cfgs, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := mcp.ParseServersJSON(out)
		if err != nil {
			t.Fatal(err)
		}
		fs, web := cfgs[1], cfgs[0]
		fs.Env = map[string]string{"TOKEN": mcp.RedactedValue, "EMPTY": ""}
		web.Headers = map[string]string{"X-Team": mcp.RedactedValue, "X-Key": mcp.RedactedValue}
		web.BearerToken = mcp.RedactedValue
		want := []mcp.ServerConfig{cfgs[2], fs, web}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got\n%+v\nwant\n%+v", got, want)
		}
	})

	t.Run("duplicate names", func(t *testing.T) {
		_, err := mcp.ExportServersJSON([]mcp.ServerConfig{cfgs[0], cfgs[0]}, true)
		if errs.Code(err) != errs.Invalid {
			t.Errorf("got %v, want invalid", err)
		}
	})
}

// FuzzParseServersJSON checks that any input gives servers or an errs.Invalid,
// never a panic, and that whatever parses survives an export round trip.
func FuzzParseServersJSON(f *testing.F) {
	f.Add([]byte(claudeDesktop))
	f.Add([]byte(`{"a": {"url": "https://x.example.com/sse", "headers": {"Authorization": "Bearer t"}}}`))
	f.Add([]byte("{\n \"mcpServers\": {\"x\": {\"command\": 1}},,"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgs, err := mcp.ParseServersJSON(data)
		if err != nil {
			if errs.Code(err) != errs.Invalid || cfgs != nil {
				t.Fatalf("code %s, servers %v: %v", errs.Code(err), cfgs, err)
			}
			return
		}
		out, err := mcp.ExportServersJSON(cfgs, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mcp.ParseServersJSON(out); err != nil {
			t.Fatalf("export does not parse back: %v\n%s", err, out)
		}
	})
}
