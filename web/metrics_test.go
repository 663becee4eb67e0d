package web_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
)

const metricsToken = "metrics-token-0123456789"

func scrape(t testing.TB, env *testEnv, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.ts.URL+"/metrics", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// /metrics is off by default; with -metrics-token it answers only that bearer
// token, and a tool-using turn shows in the families the issue lists.
func TestMetrics(t *testing.T) {
	off := newTestEnv(t)
	off.setup()
	if code, _ := scrape(t, off, "Bearer "+metricsToken); code != http.StatusNotFound {
		t.Errorf("metrics off: %d, want 404", code)
	}

	env := newTestEnvConfig(t, app.Options{}, func(c *config.Config) { c.MetricsToken = metricsToken })
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"remote"}, "transport": {"http"}, "url": {"http://127.0.0.1:1/mcp"}}),
		http.StatusSeeOther)
	id := admin.newSession()
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", metricsToken, "Bearer " + metricsToken + "x"} {
		if code, body := scrape(t, env, auth); code != http.StatusUnauthorized || strings.Contains(body, "atrium_") {
			t.Errorf("auth %q: %d", auth, code)
		}
	}
	env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}},
			Usage: &llm.Usage{InputTokens: 120, OutputTokens: 8}},
		llmtest.Reply{Text: llmtest.Words("It is 42."), Usage: &llm.Usage{InputTokens: 150, OutputTokens: 5}},
	)
	ws := admin.dial(id)
	ws.send("What is 6*7?")
	ws.until(finalMarker)
	want := []string{
		`atrium_tool_calls_total{outcome="ok",server="builtin",tool="calculator"} 1`,
		`atrium_model_latency_seconds_count{model="fake-model"} 2`,
		`atrium_model_first_token_seconds_count{model="fake-model"} 1`,
		`atrium_model_tokens_total{direction="input",model="fake-model"} 270`,
		`atrium_model_tokens_total{direction="output",model="fake-model"} 13`,
		`atrium_context_tokens_count{zone="total"} 2`,
		`atrium_memory_turns_total{hit="false"} 1`,
		`atrium_runs_total{status="complete"} 1`,
		`atrium_websockets_open 1`,
	}
	// The run ends (atrium_runs_total) just after the final frame.
	var body string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, body = scrape(t, env, "Bearer "+metricsToken); strings.Contains(body, want[len(want)-2]) {
			break
		}
	}
	// An MCP server that cannot be reached counts in its state.
	if !regexp.MustCompile(`(?m)^atrium_mcp_servers\{state="(connecting|failed)"\} 1$`).MatchString(body) {
		t.Errorf("the unreachable MCP server is not counted by state:\n%s", body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("missing %s", w)
		}
	}
	if t.Failed() {
		t.Logf("%s", body)
	}
}

// BenchmarkMetricsScrape is one authorised GET /metrics over real HTTP after
// 200 tool-using turns' worth of events.
func BenchmarkMetricsScrape(b *testing.B) {
	env := newTestEnvConfig(b, app.Options{}, func(c *config.Config) { c.MetricsToken = metricsToken })
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	ws := admin.dial(id)
	for range 20 {
		env.llm.Enqueue(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
			llmtest.Reply{Text: llmtest.Words("It is 42.")},
		)
		ws.send("What is 6*7?")
		ws.until(finalMarker)
	}
	for b.Loop() {
		if code, _ := scrape(b, env, "Bearer "+metricsToken); code != http.StatusOK {
			b.Fatal(code)
		}
	}
}
