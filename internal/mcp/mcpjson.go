package mcp

// Import and export of the common "mcpServers" JSON format, the one Claude Desktop,
// Claude Code, Cursor and many other tools read:
//
//	{"mcpServers": {
//	  "fs":     {"command": "npx", "args": ["-y", "..."], "env": {"K": "v"}, "cwd": "/srv"},
//	  "remote": {"url": "https://example.com/mcp", "type": "http", "headers": {"Authorization": "Bearer t"}}
//	}}
//
// Atrium adds "disabled" (as Cline does), "allowTools", "denyTools",
// "callTimeoutMs", "sandbox" ({"enabled": true, "readPaths": […],
// "writePaths": […], "network": false}), "roots" (file:// URIs), "progressMaxMs" and
// "samplingAlways"; other tools ignore them. A paste is all or nothing: any error
// and ParseServersJSON returns no servers, so the caller applies nothing.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"atrium/internal/errs"
	"atrium/internal/jsonpos"
)

// RedactedValue stands for a secret (an env value, a header value, the bearer token)
// in an export without secrets. ParseServersJSON passes it through unchanged; on
// import it means "keep the stored secret of the server with the same name".
const RedactedValue = "REDACTED"

// jsonServer is one server in the export, in the order its keys are written.
type jsonServer struct {
	Command        string            `json:"command,omitempty"`
	Args           []string          `json:"args,omitempty"`
	SecretArgs     []int             `json:"secretArgs,omitempty"` // Atrium's: indexes of args that are secrets
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Type           string            `json:"type,omitempty"`
	URL            string            `json:"url,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Disabled       bool              `json:"disabled,omitempty"`
	AllowTools     []string          `json:"allowTools,omitempty"`
	DenyTools      []string          `json:"denyTools,omitempty"`
	CallTimeoutMS  int64             `json:"callTimeoutMs,omitempty"`
	Sandbox        *jsonSandbox      `json:"sandbox,omitempty"`
	OAuth          *jsonOAuth        `json:"oauth,omitempty"`
	Roots          []string          `json:"roots,omitempty"`
	ProgressMaxMS  int64             `json:"progressMaxMs,omitempty"`
	SamplingAlways bool              `json:"samplingAlways,omitempty"`
}

// jsonOAuth is a remote server's hand-registered OAuth client and scopes. The tokens
// an authorisation yields are never part of it.
type jsonOAuth struct {
	ClientID     string   `json:"clientId,omitempty"`
	ClientSecret string   `json:"clientSecret,omitempty"`
	Scopes       []string `json:"scopes,omitempty"`
}

// jsonSandbox is a stdio server's sandbox settings (ServerConfig.Sandbox and its paths).
type jsonSandbox struct {
	Enabled    bool     `json:"enabled"`
	ReadPaths  []string `json:"readPaths,omitempty"`
	WritePaths []string `json:"writePaths,omitempty"`
	Network    bool     `json:"network"`
}

// ExportServersJSON writes cfgs in the mcpServers format: indented, servers and map
// keys sorted, so the same configuration always gives the same bytes. Without
// secrets every env value, header value and the bearer token is RedactedValue
// (empty values stay empty). A bearer token is written as an
// "Authorization: Bearer <token>" header. Two servers with one name are errs.Invalid.
func ExportServersJSON(cfgs []ServerConfig, withSecrets bool) ([]byte, error) {
	secret := func(v string) string {
		if withSecrets || v == "" {
			return v
		}
		return RedactedValue
	}
	out := make(map[string]jsonServer, len(cfgs))
	for _, c := range cfgs {
		if _, dup := out[c.Name]; dup {
			return nil, errs.E(errs.Invalid, "two MCP servers are named %q", c.Name)
		}
		s := jsonServer{
			Disabled:       !c.Enabled,
			AllowTools:     c.AllowTools,
			DenyTools:      c.DenyTools,
			CallTimeoutMS:  c.CallTimeout.Milliseconds(),
			Roots:          c.Roots,
			ProgressMaxMS:  c.ProgressMax.Milliseconds(),
			SamplingAlways: c.SamplingAlways,
		}
		if c.Sandbox || c.Network || len(c.ReadPaths) > 0 || len(c.WritePaths) > 0 {
			s.Sandbox = &jsonSandbox{Enabled: c.Sandbox, ReadPaths: c.ReadPaths, WritePaths: c.WritePaths, Network: c.Network}
		}
		u, args := c.URL, c.Args
		if !withSecrets {
			u, args = RedactCredentials(c)
		}
		if c.Transport == TransportStdio {
			s.Command, s.Args, s.Cwd, s.SecretArgs = c.Command, args, c.Dir, c.SecretArgs
			if len(c.Env) > 0 {
				s.Env = make(map[string]string, len(c.Env))
				for k, v := range c.Env {
					s.Env[k] = secret(v)
				}
			}
		} else {
			s.Type, s.URL = string(c.Transport), u
			if len(c.Headers) > 0 || c.BearerToken != "" {
				s.Headers = make(map[string]string, len(c.Headers)+1)
				for k, v := range c.Headers {
					s.Headers[k] = secret(v)
				}
			}
			if c.OAuthClientID != "" || len(c.OAuthScopes) > 0 {
				s.OAuth = &jsonOAuth{ClientID: c.OAuthClientID, ClientSecret: secret(c.OAuthClientSecret), Scopes: c.OAuthScopes}
			}
			if c.BearerToken != "" {
				for k := range s.Headers {
					if strings.EqualFold(k, "Authorization") {
						delete(s.Headers, k)
					}
				}
				s.Headers["Authorization"] = "Bearer " + secret(c.BearerToken)
			}
		}
		out[c.Name] = s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep & < > in URLs and args readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"mcpServers": out}); err != nil {
		return nil, fmt.Errorf("mcp: export servers: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseServersJSON reads servers in the mcpServers format, with or without the
// {"mcpServers": ...} wrapper (without it, every value must look like a server: an
// object with "command" or "url"). Servers come back in the order they appear, with
// ID 0. Unknown fields are ignored; RedactedValue is passed through as it is.
//
// Transport: "command" means stdio; "url" means streamable HTTP, or SSE when "type"
// or "transport" says "sse" or the URL path ends in /sse. An "Authorization: Bearer
// <t>" header becomes BearerToken. Names are lower-cased and other characters
// replaced by '-' when the result is a valid, unique name.
//
// Every error is errs.Invalid with a message for the user: malformed JSON as
// "line L, column C: <what>", a bad server as `server "name" (line L): <what>`
// (all such problems, joined by "; "); then each server must pass
// ServerConfig.Validate, whose message is prefixed with "line L: ". On any error no
// servers are returned.
func ParseServersJSON(data []byte) ([]ServerConfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errs.E(errs.Invalid, "the JSON is empty; paste an object like {\"mcpServers\": {...}}")
	}
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		return nil, syntaxError(data, err)
	}
	p := parser{data: data}
	top, ok := p.object(0, len(data))
	if !ok {
		return nil, p.at(skipSpace(data, 0), "expected a JSON object like {\"mcpServers\": {...}}")
	}
	servers, err := p.serversObject(top)
	if err != nil {
		return nil, err
	}

	var cfgs []ServerConfig
	var keyOf []member // the server key of each cfg, for messages
	seen := map[string]member{}
	for _, m := range servers {
		if prev, dup := seen[m.key]; dup {
			p.fail(`server %q appears twice (lines %d and %d)`, m.key, p.line(prev.keyOff), p.line(m.keyOff))
			continue
		}
		seen[m.key] = m
		if cfg, ok := p.server(m); ok {
			cfgs = append(cfgs, cfg)
			keyOf = append(keyOf, m)
		}
	}
	// Names after normalisation must still be unique.
	named := map[string]member{}
	for i, c := range cfgs {
		m := keyOf[i]
		if prev, dup := named[c.Name]; dup {
			p.fail(`servers %q (line %d) and %q (line %d) would both be named %q; rename one`,
				prev.key, p.line(prev.keyOff), m.key, p.line(m.keyOff), c.Name)
			continue
		}
		named[c.Name] = m
	}
	if len(p.problems) == 0 {
		for i, c := range cfgs {
			if err := c.Validate(); err != nil {
				p.fail("line %d: %s", p.line(keyOf[i].keyOff), errs.Message(err))
			}
		}
	}
	if len(p.problems) > 0 {
		return nil, errs.E(errs.Invalid, "%s", strings.Join(p.problems, "; "))
	}
	if cfgs == nil {
		cfgs = []ServerConfig{}
	}
	return cfgs, nil
}

// syntaxError turns a decoding error into "line L, column C: <what>".
func syntaxError(data []byte, err error) error { return jsonpos.Error(data, err) }

// member is one key of a JSON object with its value and where both start.
type member struct {
	key    string
	keyOff int
	val    json.RawMessage
	valOff int
}

// parser reads an already syntax-checked document and collects problems.
type parser struct {
	data     []byte
	problems []string
}

// object returns the members of the object that spans data[start:end], or false
// if the value there is not an object.
func (p *parser) object(start, end int) ([]member, bool) {
	off := skipSpace(p.data, start)
	if off >= end || p.data[off] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(p.data[off:end]))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	var ms []member
	for dec.More() {
		keyOff := off + int(dec.InputOffset())
		keyOff = skipSpace(p.data, keyOff)
		if keyOff < end && p.data[keyOff] == ',' {
			keyOff = skipSpace(p.data, keyOff+1)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		valOff := skipSpace(p.data, off+int(dec.InputOffset()))
		if valOff < end && p.data[valOff] == ':' {
			valOff = skipSpace(p.data, valOff+1)
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, false
		}
		ms = append(ms, member{key: key, keyOff: keyOff, val: val, valOff: valOff})
	}
	return ms, true
}

// serversObject finds the servers: the "mcpServers" member, or the whole object
// when every value looks like a server.
func (p *parser) serversObject(top []member) ([]member, error) {
	for _, m := range top {
		if m.key == "mcpServers" {
			servers, ok := p.object(m.valOff, m.valOff+len(m.val))
			if !ok {
				return nil, p.at(m.valOff, `"mcpServers" must be an object of servers, like {"name": {"command": ...}}`)
			}
			return servers, nil
		}
	}
	for _, m := range top {
		var probe map[string]json.RawMessage
		if json.Unmarshal(m.val, &probe) != nil || (probe["command"] == nil && probe["url"] == nil) {
			return nil, p.at(skipSpace(p.data, 0), `expected an object like {"mcpServers": {"name": {"command": ...}}}; found no "mcpServers" key, and %q is not a server`, m.key)
		}
	}
	return top, nil
}

// serverFields are the fields ParseServersJSON reads from one server.
type serverFields struct {
	Command, Cwd, URL, Type, Transport string
	Args, AllowTools, DenyTools        []string
	SecretArgs                         []int
	Env, Headers                       map[string]string
	Disabled                           bool
	CallTimeoutMS, ProgressMaxMS       int64
	Sandbox                            *jsonSandbox
	OAuth                              *jsonOAuth
	Roots                              []string
	SamplingAlways                     bool
}

// server reads one server; on a problem it records it and returns false.
func (p *parser) server(m member) (ServerConfig, bool) {
	fields, isObj := p.object(m.valOff, m.valOff+len(m.val))
	if !isObj {
		p.failServer(m, `must be an object with "command" or "url"`)
		return ServerConfig{}, false
	}
	var f serverFields
	ok := true
	for _, fm := range fields {
		var dst any
		var want string
		switch fm.key {
		case "command":
			dst, want = &f.Command, "a string"
		case "cwd":
			dst, want = &f.Cwd, "a string"
		case "url":
			dst, want = &f.URL, "a string"
		case "type":
			dst, want = &f.Type, "a string"
		case "transport":
			dst, want = &f.Transport, "a string"
		case "args":
			dst, want = &f.Args, "an array of strings"
		case "secretArgs":
			dst, want = &f.SecretArgs, "an array of argument indexes (from 0)"
		case "allowTools":
			dst, want = &f.AllowTools, "an array of tool names"
		case "denyTools":
			dst, want = &f.DenyTools, "an array of tool names"
		case "env":
			dst, want = &f.Env, `an object of strings, like {"NAME": "value"}`
		case "headers":
			dst, want = &f.Headers, `an object of strings, like {"Name": "value"}`
		case "disabled":
			dst, want = &f.Disabled, "true or false"
		case "callTimeoutMs":
			dst, want = &f.CallTimeoutMS, "a whole number of milliseconds"
		case "oauth":
			dst, want = &f.OAuth, `an object like {"clientId": "…", "clientSecret": "…", "scopes": ["read"]}`
		case "roots":
			dst, want = &f.Roots, `an array of file:// URIs`
		case "progressMaxMs":
			dst, want = &f.ProgressMaxMS, "a whole number of milliseconds"
		case "samplingAlways":
			dst, want = &f.SamplingAlways, "true or false"
		case "sandbox":
			dst, want = &f.Sandbox, `an object like {"enabled": true, "readPaths": ["/srv/data"], "writePaths": [], "network": false}`
		default:
			continue // unknown fields are other tools' business
		}
		if string(fm.val) == "null" {
			continue
		}
		if err := json.Unmarshal(fm.val, dst); err != nil {
			p.failField(m, fm, "must be %s", want)
			ok = false
		}
	}
	if !ok {
		return ServerConfig{}, false
	}

	c := ServerConfig{Enabled: !f.Disabled, AllowTools: f.AllowTools, DenyTools: f.DenyTools,
		CallTimeout: time.Duration(f.CallTimeoutMS) * time.Millisecond,
		ProgressMax: time.Duration(f.ProgressMaxMS) * time.Millisecond, Roots: f.Roots, SamplingAlways: f.SamplingAlways}
	if sb := f.Sandbox; sb != nil {
		c.Sandbox, c.ReadPaths, c.WritePaths, c.Network = sb.Enabled, sb.ReadPaths, sb.WritePaths, sb.Network
	}
	name, err := normaliseName(m.key)
	if err != "" {
		p.failServer(m, "%s", err)
		ok = false
	}
	c.Name = name
	if f.CallTimeoutMS < 0 {
		p.failServer(m, `"callTimeoutMs" must not be negative`)
		ok = false
	}

	kind := f.Type
	if kind == "" {
		kind = f.Transport
	}
	var declared Transport
	switch strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(kind)) {
	case "":
	case "stdio":
		declared = TransportStdio
	case "http", "streamablehttp":
		declared = TransportHTTP
	case "sse":
		declared = TransportSSE
	default:
		p.failServer(m, `unknown type %q (use "stdio", "http" or "sse")`, kind)
		return ServerConfig{}, false
	}

	switch {
	case f.Command != "" && f.URL != "":
		p.failServer(m, `has both "command" and "url"; a server is either local (command) or remote (url)`)
		return ServerConfig{}, false
	case f.Command == "" && f.URL == "":
		p.failServer(m, `needs "command" (a local server) or "url" (a remote one)`)
		return ServerConfig{}, false
	case f.Command != "":
		if declared != "" && declared != TransportStdio {
			p.failServer(m, `type %q needs "url", not "command"`, kind)
			return ServerConfig{}, false
		}
		c.Transport, c.Command, c.Args, c.Env, c.Dir, c.SecretArgs = TransportStdio, f.Command, f.Args, f.Env, f.Cwd, f.SecretArgs
	default:
		if declared == TransportStdio {
			p.failServer(m, `type "stdio" needs "command", not "url"`)
			return ServerConfig{}, false
		}
		u, err := url.Parse(f.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.failServer(m, `"url" must be an http:// or https:// address, not %q`, f.URL)
			return ServerConfig{}, false
		}
		c.Transport = declared
		if c.Transport == "" {
			c.Transport = TransportHTTP
			if strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/sse") {
				c.Transport = TransportSSE
			}
		}
		c.URL = f.URL
		for k, v := range f.Headers {
			if !strings.EqualFold(k, "Authorization") {
				continue
			}
			if scheme, token, found := strings.Cut(strings.TrimSpace(v), " "); found && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(token) != "" {
				c.BearerToken = strings.TrimSpace(token)
				delete(f.Headers, k)
			}
		}
		if len(f.Headers) > 0 {
			c.Headers = f.Headers
		}
		if o := f.OAuth; o != nil {
			c.OAuthClientID, c.OAuthClientSecret, c.OAuthScopes = o.ClientID, o.ClientSecret, o.Scopes
		}
	}
	return c, ok
}

// normaliseName lower-cases a server key and replaces characters other than a-z,
// 0-9, '-' and '_' with '-'. It returns a message when the result is still not a
// valid name.
func normaliseName(key string) (string, string) {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(key)) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := b.String()
	if !nameRE.MatchString(name) {
		return "", "the name must be 1 to 32 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"
	}
	return name, ""
}

func (p *parser) fail(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

func (p *parser) failServer(m member, format string, args ...any) {
	p.fail(`server %q (line %d): %s`, m.key, p.line(m.keyOff), fmt.Sprintf(format, args...))
}

func (p *parser) failField(m, field member, format string, args ...any) {
	p.fail(`server %q, field %q (line %d): %s`, m.key, field.key, p.line(field.keyOff), fmt.Sprintf(format, args...))
}

// at returns an errs.Invalid "line L, column C: <what>" for byte offset off.
func (p *parser) at(off int, format string, args ...any) error {
	return jsonpos.At(p.data, off, format, args...)
}

func (p *parser) line(off int) int { return jsonpos.Line(p.data, off) }

func skipSpace(data []byte, off int) int {
	for off < len(data) && (data[off] == ' ' || data[off] == '\t' || data[off] == '\r' || data[off] == '\n') {
		off++
	}
	return off
}
