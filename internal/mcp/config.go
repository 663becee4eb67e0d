// Package mcp connects Atrium to MCP servers (stdio, streamable HTTP and SSE)
// with github.com/mark3labs/mcp-go. A Supervisor keeps one long-lived
// connection per enabled server, health-checks it, reconnects or restarts it
// with capped exponential backoff, and publishes the server's tools into the
// tool registry as "<server>__<tool>" while, and only while, it is ready.
//
// Import and export of the common {"mcpServers": …} JSON format lives in
// mcpjson.go.
package mcp

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"atrium/internal/errs"
	"atrium/internal/sandbox"
	"atrium/internal/tools"
)

// Transport is how Atrium talks to a server.
type Transport string

const (
	TransportStdio Transport = "stdio" // a local child process
	TransportHTTP  Transport = "http"  // streamable HTTP
	TransportSSE   Transport = "sse"   // the older HTTP+SSE transport
)

// ServerConfig is one configured MCP server.
type ServerConfig struct {
	ID          int64
	Name        string // ^[a-z0-9][a-z0-9_-]{0,31}$ — tools are registered as "<name>__<tool>"
	Transport   Transport
	Command     string // stdio
	Args        []string
	SecretArgs  []int             // indexes of Args an admin marked secret: sealed, redacted, REDACTED in exports
	Env         map[string]string // stdio: the child gets only these plus PATH and HOME
	Dir         string
	URL         string // http, sse
	Headers     map[string]string
	BearerToken string
	// OAuth (remote servers that answer 401): a client registered by hand with the
	// provider, when its authorization server offers no dynamic registration, and the
	// scopes to ask for ("" = what the server's 401 or metadata names). The grant itself
	// (tokens) is not configuration: it lives in OAuthStore.
	OAuthClientID     string
	OAuthClientSecret string
	OAuthScopes       []string
	Enabled           bool
	AllowTools        []string      // if non-empty only these tools are exposed
	DenyTools         []string      // these are never exposed
	CallTimeout       time.Duration // 0 → 20s (10–30s, the tool registry's bounds)

	// Sandbox runs a stdio server under Landlock (internal/sandbox): besides the system
	// directories it may read ReadPaths, change WritePaths, its Dir and a private HOME,
	// and open TCP connections only with Network. Off for servers saved before it existed.
	Sandbox    bool
	ReadPaths  []string
	WritePaths []string
	Network    bool

	// Roots are the file:// URIs offered to the server as its roots (roots/list);
	// advice to the server about where to work, not a limit (the sandbox is one).
	// A change reaches a running server as notifications/roots/list_changed.
	Roots []string
	// SamplingAlways runs the server's sampling requests against the chat's model
	// without asking each time ("always for this server"); off by default.
	SamplingAlways bool
	// ProgressMax is how long a call that keeps reporting progress may run in all:
	// 0 → DefaultProgressMax; CallTimeout–tools.MaxMaxRun.
	ProgressMax time.Duration
}

// DefaultProgressMax is how long a call that keeps reporting progress may run, unless
// the server's settings say otherwise.
const DefaultProgressMax = 5 * time.Minute

// maxRoots bounds a server's roots.
const maxRoots = 32

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Validate checks c and returns an errs.Invalid whose message can be shown to
// the user as is.
func (c ServerConfig) Validate() error {
	if !nameRE.MatchString(c.Name) {
		return errs.E(errs.Invalid, "The server name %q must be 1–32 characters of a–z, 0–9, _ and -, starting with a letter or digit.", c.Name)
	}
	if strings.Contains(c.Name, "__") {
		return errs.E(errs.Invalid, "The server name %q must not contain \"__\": it separates the server from the tool in tool names.", c.Name)
	}
	switch c.Transport {
	case TransportStdio:
		if strings.TrimSpace(c.Command) == "" {
			return errs.E(errs.Invalid, "Server %q: a stdio server needs a command.", c.Name)
		}
		if c.URL != "" {
			return errs.E(errs.Invalid, "Server %q: a stdio server has no URL.", c.Name)
		}
		for _, i := range c.SecretArgs {
			if i < 0 || i >= len(c.Args) {
				return errs.E(errs.Invalid, "Server %q: secret argument %d does not exist (there are %d arguments).", c.Name, i+1, len(c.Args))
			}
		}
		for k := range c.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return errs.E(errs.Invalid, "Server %q: %q is not a valid environment variable name.", c.Name, k)
			}
		}
	case TransportHTTP, TransportSSE:
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errs.E(errs.Invalid, "Server %q: the URL must be an http:// or https:// address.", c.Name)
		}
		if c.Command != "" {
			return errs.E(errs.Invalid, "Server %q: an HTTP server has no command.", c.Name)
		}
		for k, v := range c.Headers {
			if !validHeaderName(k) || strings.ContainsAny(v, "\r\n\x00") {
				return errs.E(errs.Invalid, "Server %q: the header %q is not valid.", c.Name, k)
			}
		}
		if strings.ContainsAny(c.BearerToken, "\r\n\x00 ") {
			return errs.E(errs.Invalid, "Server %q: the bearer token must not contain spaces or line breaks.", c.Name)
		}
		if strings.ContainsAny(c.OAuthClientID+c.OAuthClientSecret+strings.Join(c.OAuthScopes, ""), "\r\n\x00 ") {
			return errs.E(errs.Invalid, "Server %q: the OAuth client ID, secret and scopes must not contain spaces or line breaks.", c.Name)
		}
		if c.OAuthClientSecret != "" && c.OAuthClientID == "" {
			return errs.E(errs.Invalid, "Server %q: an OAuth client secret needs its client ID.", c.Name)
		}
	default:
		return errs.E(errs.Invalid, "Server %q: the transport must be stdio, http or sse.", c.Name)
	}
	if c.Transport != TransportStdio && len(c.SecretArgs) > 0 {
		return errs.E(errs.Invalid, "Server %q: only a local (stdio) server has arguments.", c.Name)
	}
	if c.Transport == TransportStdio && (c.OAuthClientID != "" || c.OAuthClientSecret != "" || len(c.OAuthScopes) > 0) {
		return errs.E(errs.Invalid, "Server %q: only a remote (HTTP or SSE) server uses OAuth.", c.Name)
	}
	if (c.Sandbox || c.Network || len(c.ReadPaths) > 0 || len(c.WritePaths) > 0) && c.Transport != TransportStdio {
		return errs.E(errs.Invalid, "Server %q: only a local (stdio) server can be sandboxed.", c.Name)
	}
	for _, p := range append(slices.Clone(c.ReadPaths), c.WritePaths...) {
		if err := sandbox.CheckPath(p); err != nil {
			return errs.E(errs.Invalid, "Server %q: %s.", c.Name, err)
		}
	}
	if c.Sandbox && c.Dir != "" {
		if err := sandbox.CheckPath(c.Dir); err != nil {
			return errs.E(errs.Invalid, "Server %q: the working directory of a sandboxed server: %s.", c.Name, err)
		}
	}
	if c.CallTimeout != 0 && (c.CallTimeout < tools.MinTimeout || c.CallTimeout > tools.MaxTimeout) {
		return errs.E(errs.Invalid, "Server %q: the call timeout must be between %s and %s.", c.Name, tools.MinTimeout, tools.MaxTimeout)
	}
	if c.ProgressMax != 0 && (c.ProgressMax < c.callTimeout() || c.ProgressMax > tools.MaxMaxRun) {
		return errs.E(errs.Invalid, "Server %q: the longest run with progress must be between the call timeout (%s) and %s.", c.Name, c.callTimeout(), tools.MaxMaxRun)
	}
	if len(c.Roots) > maxRoots {
		return errs.E(errs.Invalid, "Server %q: at most %d roots.", c.Name, maxRoots)
	}
	for _, r := range c.Roots {
		if err := checkRoot(r); err != nil {
			return errs.E(errs.Invalid, "Server %q: the root %q %s.", c.Name, capString(r, 200), err)
		}
	}
	if len(c.AllowTools) > 0 && len(c.DenyTools) > 0 {
		return errs.E(errs.Invalid, "Server %q: use either an allow-list or a deny-list of tools, not both.", c.Name)
	}
	return nil
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Secrets returns the values to redact in traces and logs: env values, header
// values, the bearer token and the credentials in the URL and arguments, longest first (so that a secret containing
// another is redacted whole).
func (c ServerConfig) Secrets() []string {
	var out []string
	add := func(v string) {
		if strings.TrimSpace(v) != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, v := range c.Env {
		add(v)
	}
	for _, v := range c.Headers {
		add(v)
	}
	add(c.BearerToken)
	add(c.OAuthClientSecret)
	for _, v := range credentialValues(c) {
		add(v)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// callTimeout is the registry timeout for the server's tools.
func (c ServerConfig) callTimeout() time.Duration {
	switch {
	case c.CallTimeout == 0:
		return tools.DefaultTimeout
	case c.CallTimeout < tools.MinTimeout:
		return tools.MinTimeout
	case c.CallTimeout > tools.MaxTimeout:
		return tools.MaxTimeout
	}
	return c.CallTimeout
}

// progressMax is the registry's MaxRun for the server's tools.
func (c ServerConfig) progressMax() time.Duration {
	if c.ProgressMax == 0 {
		return max(DefaultProgressMax, c.callTimeout())
	}
	return min(max(c.ProgressMax, c.callTimeout()), tools.MaxMaxRun)
}

// checkRoot reports what is wrong with a root URI: it must be file:// with an
// absolute, clean path and nothing else.
func checkRoot(r string) error {
	u, err := url.Parse(r)
	switch {
	case err != nil || u.Scheme != "file":
		return errors.New("is not a file:// URI")
	case u.Host != "" && u.Host != "localhost":
		return errors.New("names a host; use file:///path")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "":
		return errors.New("must be a plain file:///path")
	case !path.IsAbs(u.Path) || path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") && u.Path != "/":
		return errors.New("must name an absolute, clean path")
	case strings.ContainsAny(r, "\x00\r\n"):
		return errors.New("contains a control character")
	}
	return nil
}

// exposes reports whether the allow and deny lists let the MCP tool through.
func (c ServerConfig) exposes(tool string) bool {
	if slices.Contains(c.DenyTools, tool) {
		return false
	}
	return len(c.AllowTools) == 0 || slices.Contains(c.AllowTools, tool)
}

// redact replaces each of secrets in s with RedactedValue.
func redact(s string, secrets []string) string {
	for _, v := range secrets {
		if v != "" {
			s = strings.ReplaceAll(s, v, RedactedValue)
		}
	}
	return s
}

// SandboxPolicy is what a sandboxed server may touch beyond the system directories.
// home, when not empty, is its private writable HOME.
func (c ServerConfig) SandboxPolicy(home string) sandbox.Policy {
	p := sandbox.Policy{ReadOnly: slices.Clone(c.ReadPaths), ReadWrite: slices.Clone(c.WritePaths), Network: c.Network}
	for _, d := range []string{c.Dir, home} {
		if d != "" && !slices.Contains(p.ReadWrite, d) {
			p.ReadWrite = append(p.ReadWrite, d)
		}
	}
	return p
}

func (c ServerConfig) String() string {
	return fmt.Sprintf("%s (%s)", c.Name, c.Transport)
}
