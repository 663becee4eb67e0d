package mcp

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/errs"
)

// ready returns the connection of the ready server called name, or
// errs.NotFound for an unknown server and errs.Unavailable for one that is
// not ready.
func (s *Supervisor) ready(name string) (*server, *conn, error) {
	srv, err := s.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	c, _ := srv.readyConn()
	if c == nil {
		return nil, nil, errs.E(errs.Unavailable, "The MCP server %q is not ready (%s).", name, srv.status().State)
	}
	return srv, c, nil
}

// callError turns a failed request into an errs.Error: a broken connection
// also tells the server's goroutine to reconnect.
func (srv *server) callError(c *conn, err error, what string) error {
	if isTransportError(err) {
		c.signalLost(err)
		return errs.Wrap(errs.Unavailable, err, "The MCP server %q is unavailable.", srv.cfg.Name)
	}
	return errs.Wrap(errs.Unavailable, err, "The MCP server %q could not %s: %s", srv.cfg.Name, what,
		capString(srv.redact(err.Error()), 300))
}

// Resources lists a ready server's resources, asking the server now.
func (s *Supervisor) Resources(ctx context.Context, server string) ([]Resource, error) {
	srv, c, err := s.ready(server)
	if err != nil {
		return nil, err
	}
	if c.client.GetServerCapabilities().Resources == nil {
		return []Resource{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.RequestTimeout)
	defer cancel()
	res, err := c.client.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil {
		return nil, srv.callError(c, err, "list its resources")
	}
	out := make([]Resource, 0, len(res.Resources))
	for _, r := range res.Resources {
		out = append(out, Resource{Server: server, URI: r.URI, Name: r.Name, Description: r.Description, MimeType: r.MIMEType})
	}
	return out, nil
}

// ReadResource reads one resource of a ready server: text contents are
// joined (and cut at MaxResultBytes), binary contents are counted in
// BlobBytes only.
func (s *Supervisor) ReadResource(ctx context.Context, server, uri string) (ResourceContent, error) {
	srv, c, err := s.ready(server)
	if err != nil {
		return ResourceContent{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.RequestTimeout)
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	res, err := c.client.ReadResource(ctx, req)
	if err != nil {
		return ResourceContent{}, srv.callError(c, err, "read "+uri)
	}
	out := ResourceContent{URI: uri}
	var texts []string
	for _, rc := range res.Contents {
		var mime, text, blob string
		switch v := rc.(type) {
		case mcp.TextResourceContents:
			mime, text = v.MIMEType, v.Text
		case *mcp.TextResourceContents:
			mime, text = v.MIMEType, v.Text
		case mcp.BlobResourceContents:
			mime, blob = v.MIMEType, v.Blob
		case *mcp.BlobResourceContents:
			mime, blob = v.MIMEType, v.Blob
		default:
			continue
		}
		if out.MimeType == "" {
			out.MimeType = mime
		}
		if blob != "" {
			out.BlobBytes += base64Len(blob)
		} else {
			texts = append(texts, text)
		}
	}
	out.Text = capResult(strings.Join(texts, "\n"))
	return out, nil
}

// Prompts returns the prompts of every ready server, by server then name, as
// listed at the last (re)connect or list_changed.
func (s *Supervisor) Prompts() []Prompt {
	s.mu.Lock()
	srvs := slices.Collect(maps.Values(s.servers))
	s.mu.Unlock()
	var out []Prompt
	for _, srv := range srvs {
		srv.mu.Lock()
		if srv.conn != nil {
			out = append(out, srv.prompts...)
		}
		srv.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Prompt) int {
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// GetPrompt renders a prompt of a ready server and returns its messages
// joined as text (with "user:"/"assistant:" labels when both roles appear).
func (s *Supervisor) GetPrompt(ctx context.Context, server, name string, args map[string]string) (string, error) {
	srv, c, err := s.ready(server)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, s.RequestTimeout)
	defer cancel()
	req := mcp.GetPromptRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.client.GetPrompt(ctx, req)
	if err != nil {
		return "", srv.callError(c, err, "render the prompt "+name)
	}
	mixed := false
	for _, m := range res.Messages {
		if m.Role != mcp.RoleUser {
			mixed = true
		}
	}
	parts := make([]string, 0, len(res.Messages))
	for _, m := range res.Messages {
		text := renderContent(m.Content)
		if mixed {
			text = string(m.Role) + ": " + text
		}
		parts = append(parts, text)
	}
	return capResult(strings.Join(parts, "\n\n")), nil
}

func convertPrompt(server string, p mcp.Prompt) Prompt {
	out := Prompt{Server: server, Name: p.Name, Description: p.Description}
	for _, a := range p.Arguments {
		out.Arguments = append(out.Arguments, PromptArg{Name: a.Name, Description: a.Description, Required: a.Required})
	}
	return out
}
