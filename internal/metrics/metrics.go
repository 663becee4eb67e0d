// Package metrics exposes Atrium's Prometheus metrics. It is one more consumer of
// the agent's run events (an agent.Sink, next to the websocket hub and the trace
// recorder), plus gauges read at scrape time (MCP server states, open websockets).
// Labels are bounded: tool and model names come from the configuration, never
// from a user's text.
package metrics

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"atrium/internal/agent"
)

// Gauges are read at every scrape; a nil func leaves its family out.
type Gauges struct {
	MCPStates   func() map[string]int // servers by state
	OpenSockets func() int            // chat websockets open
}

// Metrics holds the families and the registry that serves them.
type Metrics struct {
	reg          *prometheus.Registry
	toolCalls    *prometheus.CounterVec
	modelLatency *prometheus.HistogramVec
	firstToken   *prometheus.HistogramVec
	tokens       *prometheus.CounterVec
	contextToks  *prometheus.HistogramVec
	memoryTurns  *prometheus.CounterVec
	runs         *prometheus.CounterVec
}

// latency buckets, in seconds: a local model's first token to a long reply.
var latencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80}

// New registers the families (and the Go runtime's) in a registry of their own.
func New(g Gauges) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "atrium_tool_calls_total",
		Help: "Tool calls by tool, MCP server (builtin for Atrium's own) and outcome (ok or the error code)."},
		[]string{"tool", "server", "outcome"})
	m.modelLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "atrium_model_latency_seconds",
		Help: "Duration of a model call, request to last byte, by model.", Buckets: latencyBuckets}, []string{"model"})
	m.firstToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "atrium_model_first_token_seconds",
		Help: "Time from a model request to its first text or reasoning delta, by model.", Buckets: latencyBuckets}, []string{"model"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "atrium_model_tokens_total",
		Help: "Tokens the providers reported, by model and direction (input or output)."}, []string{"model", "direction"})
	m.contextToks = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "atrium_context_tokens",
		Help:    "Tokens per context zone (pinned, summary, history, tools, total) of each model step.",
		Buckets: prometheus.ExponentialBuckets(64, 2, 12)}, []string{"zone"})
	m.memoryTurns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "atrium_memory_turns_total",
		Help: "Turns with a memory lookup, by whether at least one memory it found was in the context sent (hit rate = hit=\"true\" / all)."},
		[]string{"hit"})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "atrium_runs_total",
		Help: "Finished runs (turns) by status."}, []string{"status"})
	m.reg.MustRegister(m.toolCalls, m.modelLatency, m.firstToken, m.tokens, m.contextToks, m.memoryTurns, m.runs,
		prometheus.NewGoCollector())
	if g.OpenSockets != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "atrium_websockets_open",
			Help: "Chat websockets open now."}, func() float64 { return float64(g.OpenSockets()) }))
	}
	if g.MCPStates != nil {
		m.reg.MustRegister(&stateCollector{states: g.MCPStates, desc: prometheus.NewDesc("atrium_mcp_servers",
			"MCP servers by state.", []string{"state"}, nil)})
	}
	return m
}

// stateCollector reports the MCP servers' states at scrape time.
type stateCollector struct {
	states func() map[string]int
	desc   *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for state, n := range c.states() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}

// Publish implements agent.Sink: counters and histograms only, no I/O, so it
// costs the run a few map lookups.
func (m *Metrics) Publish(ev agent.Event) {
	switch ev.Kind {
	case agent.EventModelResponse:
		m.modelLatency.WithLabelValues(ev.Model).Observe(ev.Duration.Seconds())
		if ev.Response != nil {
			m.tokens.WithLabelValues(ev.Model, "input").Add(float64(ev.Response.Usage.InputTokens))
			m.tokens.WithLabelValues(ev.Model, "output").Add(float64(ev.Response.Usage.OutputTokens))
		}
		if ev.FirstToken > 0 {
			m.firstToken.WithLabelValues(ev.Model).Observe(ev.FirstToken.Seconds())
		}
	case agent.EventToolResult:
		if ev.ToolCall == nil || ev.Result == nil {
			return
		}
		server, outcome := "builtin", "ok"
		if srv, _, ok := strings.Cut(ev.ToolCall.Name, "__"); ok {
			server = srv
		}
		if ev.Result.IsError {
			outcome = ev.Result.Code
			if outcome == "" {
				outcome = "error"
			}
		}
		m.toolCalls.WithLabelValues(ev.ToolCall.Name, server, outcome).Inc()
	case agent.EventContext:
		if ev.Report != nil {
			for _, z := range ev.Report.Zones {
				m.contextToks.WithLabelValues(z.Name).Observe(float64(z.Tokens))
			}
		}
	case agent.EventRunEnded:
		if t := ev.Totals; t != nil {
			m.runs.WithLabelValues(runStatus(t.Status)).Inc()
			if t.MemoryLookup {
				m.memoryTurns.WithLabelValues(boolLabel(t.MemoryUsed)).Inc()
			}
		}
	}
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// runStatus bounds the status label to the final message's statuses.
func runStatus(s string) string {
	switch s {
	case "complete", "stopped", "error":
		return s
	}
	return "other"
}

// Handler serves the metrics; with a token set it answers 401 unless the
// request carries "Authorization: Bearer <token>".
func (m *Metrics) Handler(token string) http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
