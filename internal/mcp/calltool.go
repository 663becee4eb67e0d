package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/tools"
)

// MaxResultBytes bounds a tool result handed to the registry; the context
// engine cuts further.
const MaxResultBytes = 256 << 10

// maxDescription bounds a tool description taken from a server.
const maxDescription = 2000

// registered is what the registry holds for one of the server's tools.
type registered struct {
	mcpName, description, schema string
	timeout, maxRun              time.Duration
}

// syncToolsLocked makes the registry hold exactly the server's exposed tools
// of list. Tools whose definition did not change are left in place, so that
// a list_changed never hides them even briefly. A tool whose name cannot be
// made valid, whose schema does not compile, or whose name is taken is
// skipped and logged. Call with s.mu held.
func (s *server) syncToolsLocked(list []mcp.Tool) {
	type wanted struct {
		def  registered
		info ToolInfo
	}
	want := map[string]wanted{}
	var order []string
	for _, t := range list {
		if !s.cfg.exposes(t.Name) {
			continue
		}
		name := s.cfg.Name + "__" + sanitizeToolName(t.Name)
		if _, dup := want[name]; dup {
			s.log.Warn("mcp: tool skipped: its name clashes with another tool of the server", "tool", t.Name)
			continue
		}
		schema, err := toolSchema(t)
		if err != nil {
			s.log.Warn("mcp: tool skipped: unusable input schema", "tool", t.Name, "err", err)
			continue
		}
		desc := strings.TrimSpace(t.Description)
		if desc == "" {
			desc = strings.TrimSpace(t.Title)
		}
		if desc == "" {
			desc = "the tool " + t.Name
		}
		want[name] = wanted{
			def: registered{
				mcpName:     t.Name,
				description: capString(s.cfg.Name+": "+desc, maxDescription),
				schema:      string(schema),
				timeout:     s.cfg.callTimeout(),
				maxRun:      s.cfg.progressMax(),
			},
			info: ToolInfo{Name: t.Name, Description: desc},
		}
		order = append(order, name)
	}

	for name := range s.registered {
		if _, ok := want[name]; !ok {
			s.sup.reg.Unregister(name)
			delete(s.registered, name)
		}
	}
	s.tools = nil
	for _, name := range order {
		w := want[name]
		if old, ok := s.registered[name]; !ok || old != w.def {
			t := tools.Tool{
				Name:        name,
				Description: w.def.description,
				Schema:      json.RawMessage(w.def.schema),
				Timeout:     w.def.timeout,
				MaxRun:      w.def.maxRun,
				Execute:     s.executor(w.def.mcpName),
			}
			var err error
			if ok {
				// Changed: replaced in one step, so that a call meanwhile never finds
				// no tool (it got unknown_tool between an unregister and a register).
				err = s.sup.reg.Replace(t)
			} else {
				err = s.sup.reg.Register(t)
			}
			if err != nil {
				s.log.Warn("mcp: tool skipped", "tool", w.def.mcpName, "err", err)
				if ok {
					s.sup.reg.Unregister(name)
					delete(s.registered, name)
				}
				continue
			}
			if s.registered == nil {
				s.registered = map[string]registered{}
			}
			s.registered[name] = w.def
		}
		s.tools = append(s.tools, w.info)
	}
	s.hideLocked(false) // tools kept from before a reconnect are offered again
}

// sanitizeToolName maps an MCP tool name onto the registry's alphabet
// [a-zA-Z0-9_-]; anything else becomes "_". The registry rejects names over 64
// bytes, and the tool is then skipped.
func sanitizeToolName(n string) string {
	b := []byte(n)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// toolSchema returns the tool's input schema as the registry wants it: an
// object schema with "type":"object" at the top.
func toolSchema(t mcp.Tool) (json.RawMessage, error) {
	raw := t.RawInputSchema
	if raw == nil {
		var err error
		if raw, err = json.Marshal(t.InputSchema); err != nil {
			return nil, err
		}
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	switch typ := m["type"].(type) {
	case nil:
		m["type"] = "object"
	case string:
		if typ == "" {
			m["type"] = "object"
		} else if typ != "object" {
			return nil, fmt.Errorf("top-level type is %q, not \"object\"", typ)
		}
	default:
		return nil, fmt.Errorf("top-level type is not \"object\"")
	}
	return json.Marshal(m)
}

// executor calls the MCP tool on whatever connection is ready at call time.
func (s *server) executor(mcpName string) func(context.Context, tools.Call) (string, error) {
	return func(ctx context.Context, call tools.Call) (string, error) {
		c, since := s.usableConn(ctx)
		if c == nil {
			return "", s.unavailable(since)
		}
		token, in := s.track(ctx, call)
		defer s.untrack(token)
		ctx = context.WithValue(ctx, inflightKey{}, in) // reaches the server's requests on this call's HTTP stream
		req := mcp.CallToolRequest{}
		req.Params.Name = mcpName
		req.Params.Arguments = json.RawMessage(call.Args)
		req.Params.Meta = &mcp.Meta{ProgressToken: token}
		s.calls.Add(1)
		var seen string
		if c.oauth != nil {
			seen = s.accessToken(ctx)
		}
		res, err := c.client.CallTool(ctx, req)
		if isAuthRequired(err) && c.oauth != nil && ctx.Err() == nil {
			// The server refused the token before running the call: refresh it (or
			// take the one another call's refresh got) and try once more; if that
			// fails the connection is lost and the card asks to re-authorise.
			if s.refreshGrant(ctx, seen) == nil {
				res, err = c.client.CallTool(ctx, req)
			}
		}
		if errors.Is(err, transport.ErrSessionTerminated) && ctx.Err() == nil {
			// The server restarted and forgot the session, so it did not run the call:
			// reconnect (a new initialize) and try once more.
			c.signalLost(err)
			if next := s.awaitNewConn(ctx, c); next != nil {
				c = next
				res, err = c.client.CallTool(ctx, req)
			}
		}
		s.calls.Add(-1)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err() // the registry reports the timeout or cancellation
			}
			var isc *insufficientScope
			if errors.As(err, &isc) {
				scope := strings.Join(isc.scopes, " ")
				if s.needScope(ctx, isc.scopes) {
					c.signalLost(err) // the card asks an admin to re-authorise
					return "", &tools.Error{Detail: s.cfg.Name + ": the server needs more access for this call (scope: " + scope + "); an admin must re-authorise the server in Settings → MCP, then try again"}
				}
				return "", &tools.Error{Detail: s.cfg.Name + ": the server refused the call for lack of scope (" + scope + ") that Atrium cannot grant it"}
			}
			if isTransportError(err) {
				c.signalLost(err)
				return "", s.unavailable(s.sup.Now())
			}
			return "", &tools.Error{Detail: s.cfg.Name + ": " + s.redact(err.Error())}
		}
		out := renderContents(res.Content)
		if len(res.Content) == 0 && res.StructuredContent != nil {
			if b, err := json.Marshal(res.StructuredContent); err == nil {
				out = string(b)
			}
		}
		out = capResult(out)
		if res.IsError {
			if strings.TrimSpace(out) == "" {
				out = "the tool reported an error"
			}
			return "", &tools.Error{Detail: out}
		}
		return out, nil
	}
}

// renderContents joins text contents with newlines; images, audio and
// resources become one line of metadata JSON each, never their base64 data.
func renderContents(cs []mcp.Content) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(renderContent(c))
	}
	return b.String()
}

func renderContent(c mcp.Content) string {
	switch v := c.(type) {
	case mcp.TextContent:
		return v.Text
	case *mcp.TextContent:
		return v.Text
	case mcp.ImageContent:
		return metaJSON(map[string]any{"type": "image", "mimeType": v.MIMEType, "bytes": base64Len(v.Data)})
	case *mcp.ImageContent:
		return metaJSON(map[string]any{"type": "image", "mimeType": v.MIMEType, "bytes": base64Len(v.Data)})
	case mcp.AudioContent:
		return metaJSON(map[string]any{"type": "audio", "mimeType": v.MIMEType, "bytes": base64Len(v.Data)})
	case *mcp.AudioContent:
		return metaJSON(map[string]any{"type": "audio", "mimeType": v.MIMEType, "bytes": base64Len(v.Data)})
	case mcp.ResourceLink:
		return metaJSON(map[string]any{"type": "resource_link", "uri": v.URI, "name": v.Name, "mimeType": v.MIMEType})
	case *mcp.ResourceLink:
		return metaJSON(map[string]any{"type": "resource_link", "uri": v.URI, "name": v.Name, "mimeType": v.MIMEType})
	case mcp.EmbeddedResource:
		return renderResource(v.Resource)
	case *mcp.EmbeddedResource:
		return renderResource(v.Resource)
	}
	// Something newer than this code knows: keep its type only.
	var head struct {
		Type string `json:"type"`
	}
	if b, err := json.Marshal(c); err == nil {
		_ = json.Unmarshal(b, &head)
	}
	return metaJSON(map[string]any{"type": head.Type})
}

func renderResource(r mcp.ResourceContents) string {
	switch v := r.(type) {
	case mcp.TextResourceContents:
		return metaJSON(map[string]any{"type": "resource", "uri": v.URI, "mimeType": v.MIMEType, "text": v.Text})
	case *mcp.TextResourceContents:
		return metaJSON(map[string]any{"type": "resource", "uri": v.URI, "mimeType": v.MIMEType, "text": v.Text})
	case mcp.BlobResourceContents:
		return metaJSON(map[string]any{"type": "resource", "uri": v.URI, "mimeType": v.MIMEType, "bytes": base64Len(v.Blob)})
	case *mcp.BlobResourceContents:
		return metaJSON(map[string]any{"type": "resource", "uri": v.URI, "mimeType": v.MIMEType, "bytes": base64Len(v.Blob)})
	}
	return metaJSON(map[string]any{"type": "resource"})
}

func metaJSON(m map[string]any) string {
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	b, _ := json.Marshal(m) // keys sorted; values are strings and ints
	return string(b)
}

// base64Len is the decoded size of base64 data, without decoding it.
func base64Len(s string) int {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	return base64.RawStdEncoding.DecodedLen(len(s))
}

// capResult cuts s to MaxResultBytes on a rune boundary, saying so.
func capResult(s string) string {
	if len(s) <= MaxResultBytes {
		return s
	}
	note := fmt.Sprintf("\n[result cut: %d of %d bytes shown]", MaxResultBytes, len(s))
	return capString(s, MaxResultBytes) + note
}

// capString cuts s to at most n bytes on a rune boundary.
func capString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
