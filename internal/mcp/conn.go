package mcp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/sandbox"
)

// killGrace is how long a stdio child's process group has between SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// conn is one connection to a server (for stdio: one child process).
type conn struct {
	client *client.Client
	cancel context.CancelFunc // ends the connection's context

	lost   chan error              // cap 1: the connection broke (a call's transport error, SSE stream lost)
	relist chan struct{}           // cap 1: the server said a list changed
	check  chan struct{}           // cap 1: the event stream ended; see whether the server still answers
	oauth  *transport.OAuthHandler // remote servers connected with an OAuth grant; else nil
	sse    *sseRequests            // legacy SSE: answers the server's requests

	// stdio only
	cmd        *exec.Cmd
	pgid       int           // the child's process group
	stderrR    *os.File      // read end of the child's stderr
	stderrDone chan struct{} // closed when the child's stderr reached EOF
	children   *ChildFile    // where the child's group is recorded (nil: nowhere)

	closeOnce sync.Once
}

func (c *conn) signalLost(err error) {
	select {
	case c.lost <- err:
	default:
	}
}

func (c *conn) signalCheck() {
	select {
	case c.check <- struct{}{}:
	default:
	}
}

func (c *conn) signalRelist() {
	select {
	case c.relist <- struct{}{}:
	default:
	}
}

// close ends the connection. A stdio child's process group gets SIGTERM, then
// SIGKILL if the child has not exited within killGrace; close returns once the
// child is reaped. HTTP connections are closed in the background (a DELETE
// for the session, bounded by the transport).
func (c *conn) close() {
	c.closeOnce.Do(func() {
		if c.pgid == 0 {
			if c.client != nil {
				go c.client.Close()
			}
			c.cancel()
			return
		}
		_ = syscall.Kill(-c.pgid, syscall.SIGTERM)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = c.client.Close() // closes stdin and reaps the child
		}()
		select {
		case <-closed:
		case <-time.After(killGrace):
			_ = syscall.Kill(-c.pgid, syscall.SIGKILL)
			<-closed
		}
		// Whatever else is left in the group (grandchildren that ignored SIGTERM).
		_ = syscall.Kill(-c.pgid, syscall.SIGKILL)
		c.children.ended(c.pgid)
		c.cancel()
		// Let the last stderr lines in; a grandchild holding the pipe must not hold us.
		select {
		case <-c.stderrDone:
		case <-time.After(500 * time.Millisecond):
		}
		c.stderrR.Close()
		<-c.stderrDone
	})
}

// catalog is what a server offers, as listed after (re)connecting.
type catalog struct {
	tools     []mcp.Tool
	resources int
	prompts   []Prompt
}

// connect starts a connection, handshakes and lists the server's tools,
// resources and prompts, all within ConnectTimeout. On error everything it
// started is closed.
func (s *server) connect() (*conn, catalog, error) {
	cctx, cancel := context.WithCancel(s.ctx)
	c := &conn{cancel: cancel, lost: make(chan error, 1), relist: make(chan struct{}, 1), check: make(chan struct{}, 1)}
	t0 := time.Now()
	var err error
	switch s.cfg.Transport {
	case TransportStdio:
		err = s.startStdio(cctx, c)
	case TransportHTTP, TransportSSE:
		err = s.startHTTP(cctx, c)
	default:
		err = fmt.Errorf("unknown transport %q", s.cfg.Transport)
	}
	if err != nil {
		c.close()
		return nil, catalog{}, err
	}
	c.client.OnNotification(func(n mcp.JSONRPCNotification) {
		switch n.Method {
		case mcp.MethodNotificationToolsListChanged,
			mcp.MethodNotificationResourcesListChanged,
			mcp.MethodNotificationPromptsListChanged:
			c.signalRelist()
		case string(mcp.MethodNotificationProgress):
			s.onProgress(n)
		}
	})

	ictx, icancel := context.WithTimeout(cctx, s.sup.ConnectTimeout)
	defer icancel()
	t1 := time.Now()
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "atrium", Version: "1"}
	if _, err := c.client.Initialize(ictx, req); err != nil {
		if isAuthRequired(err) || isInsufficientScope(err) {
			c.close()
			return nil, catalog{}, fmt.Errorf("initialize: %w", err) // the caller asks for authorisation
		}
		return nil, catalog{}, s.startFailed(c, ictx, "initialize", err)
	}
	t2 := time.Now()
	cat, err := s.list(ictx, c)
	if err != nil {
		if isAuthRequired(err) || isInsufficientScope(err) {
			// Some servers let initialize through and want a token (or more scope) for the rest.
			c.close()
			return nil, catalog{}, fmt.Errorf("list tools: %w", err)
		}
		return nil, catalog{}, s.startFailed(c, ictx, "list tools", err)
	}
	tm := &connectTimings{Start: t1.Sub(t0), Initialize: t2.Sub(t1), List: time.Since(t2)}
	s.timings.Store(tm)
	s.log.Debug("mcp: connected", "start", tm.Start, "initialize", tm.Initialize, "list", tm.List)
	return c, cat, nil
}

// startFailed closes c and explains why a start-up step failed, naming a
// stdio child's exit and its last stderr line when there is one.
func (s *server) startFailed(c *conn, ctx context.Context, step string, err error) error {
	timedOut := ctx.Err() != nil && s.ctx.Err() == nil
	broken := isTransportError(err) // rather than an error answer from a live server
	c.close()
	if timedOut {
		err = fmt.Errorf("%s: no answer within %s", step, s.sup.ConnectTimeout)
	} else {
		// mcp-go repeats itself ("transport error: failed to send request: failed to send request: Post …").
		msg := strings.ReplaceAll(err.Error(), "failed to send request: failed to send request: ", "failed to send request: ")
		err = fmt.Errorf("%s: %s", step, msg)
	}
	if s.stderr == nil {
		return err
	}
	msg := err.Error()
	if broken && !timedOut && c.cmd != nil && c.cmd.ProcessState != nil {
		msg = fmt.Sprintf("the server process exited (%s) during %s", c.cmd.ProcessState, step)
	}
	if lines := s.stderr.snapshot(); len(lines) > 0 {
		msg += "; last stderr line: " + lines[len(lines)-1]
	}
	return errors.New(msg)
}

// list fetches the server's tools, resources and prompts. A transport error
// fails the listing; a server that answers a list with an error (or does not
// declare the capability) simply offers none of that kind.
func (s *server) list(ctx context.Context, c *conn) (catalog, error) {
	var cat catalog
	caps := c.client.GetServerCapabilities()
	// The three lists are asked for at once: a restart waits for the slowest, not the sum.
	var wg sync.WaitGroup
	var terr, rerr, perr error
	if caps.Tools != nil {
		wg.Go(func() {
			res, err := c.client.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				if isTransportError(err) || ctx.Err() != nil {
					terr = err
					return
				}
				s.log.Warn("mcp: listing tools failed", "err", s.redact(err.Error()))
				return
			}
			cat.tools = res.Tools
			s.rawSchemas(ctx, c, cat.tools)
		})
	}
	if caps.Resources != nil {
		wg.Go(func() {
			res, err := c.client.ListResources(ctx, mcp.ListResourcesRequest{})
			if err != nil {
				if isTransportError(err) || ctx.Err() != nil {
					rerr = err
					return
				}
				s.log.Warn("mcp: listing resources failed", "err", s.redact(err.Error()))
				return
			}
			cat.resources = len(res.Resources)
		})
	}
	if caps.Prompts != nil {
		wg.Go(func() {
			res, err := c.client.ListPrompts(ctx, mcp.ListPromptsRequest{})
			if err != nil {
				if isTransportError(err) || ctx.Err() != nil {
					perr = err
					return
				}
				s.log.Warn("mcp: listing prompts failed", "err", s.redact(err.Error()))
				return
			}
			for _, p := range res.Prompts {
				cat.prompts = append(cat.prompts, convertPrompt(s.cfg.Name, p))
			}
		})
	}
	wg.Wait()
	for _, err := range []error{terr, rerr, perr} {
		if err != nil {
			return catalog{}, err
		}
	}
	return cat, nil
}

// rawSchemas puts each tool's input schema back as the server sent it. mcp-go parses
// schemas into a struct that keeps only type, properties, required, $defs and
// additionalProperties, so a top-level anyOf/oneOf/allOf or $schema (the draft) was
// lost: a tool requiring one of two fields accepted {}, and a draft-07 tool with tuple
// items did not compile as 2020-12. The list is asked for again and read raw; on any
// failure the parsed schemas stay. Only on the initialize-handshake protocols: the
// stateless one needs request metadata that mcp-go adds internally.
func (s *server) rawSchemas(ctx context.Context, c *conn, tools []mcp.Tool) {
	if mcp.IsModernProtocol(c.client.ProtocolVersion()) || len(tools) == 0 {
		return
	}
	raw := map[string]json.RawMessage{}
	cursor := ""
	for page := 0; page < 100; page++ {
		req := transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, Method: string(mcp.MethodToolsList),
			ID: mcp.NewRequestId(fmt.Sprintf("atrium-schemas-%d", rawListID.Add(1)))}
		if cursor != "" {
			req.Params = map[string]any{"cursor": cursor}
		}
		resp, err := c.client.GetTransport().SendRequest(ctx, req)
		if err != nil || resp.Error != nil {
			return
		}
		var res struct {
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
			NextCursor string `json:"nextCursor"`
		}
		if json.Unmarshal(resp.Result, &res) != nil {
			return
		}
		for _, t := range res.Tools {
			if len(t.InputSchema) > 0 && t.InputSchema[0] == '{' {
				raw[t.Name] = t.InputSchema
			}
		}
		if res.NextCursor == "" || res.NextCursor == cursor {
			break
		}
		cursor = res.NextCursor
	}
	for i := range tools {
		if r, ok := raw[tools[i].Name]; ok {
			tools[i].RawInputSchema = r
			tools[i].InputSchema = mcp.ToolInputSchema{}
		}
	}
}

// rawListID numbers rawSchemas' requests apart from mcp-go's own (integer) ids.
var rawListID atomic.Int64

// startStdio spawns the child in its own process group with only the
// configured env plus PATH and HOME, and its stderr going into the server's
// ring. ctx owns the child's life.
func (s *server) startStdio(ctx context.Context, c *conn) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stderr pipe: %w", err)
	}
	command, args, env := s.cfg.Command, s.cfg.Args, childEnv(nil, s.cfg.Env)
	if s.cfg.Sandbox {
		if command, args, env, err = s.sandboxed(); err != nil {
			r.Close()
			w.Close()
			return err
		}
	}
	var cmd *exec.Cmd
	cmdFunc := func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
		cmd = exec.CommandContext(ctx, command, args...)
		cmd.Env = env
		cmd.Dir = s.cfg.Dir
		cmd.Stderr = w
		cmd.SysProcAttr = sysProcAttr()
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = killGrace
		return cmd, nil
	}
	tr := transport.NewStdioWithOptions(command, env, args,
		transport.WithCommandFunc(cmdFunc), transport.WithCommandLogger(newTransportLog(s.log, s.secrets)))
	cl := s.newClient(tr)
	err = cl.Start(ctx)
	w.Close() // the child has its own copy; EOF on r now means the child (and its group) let go
	if err != nil {
		r.Close()
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // drop mcp-go's "failed to start command"
		}
		return fmt.Errorf("start %q: %w", s.cfg.Command, err)
	}
	s.answerRequests(ctx, cl, c.sse)
	c.client = cl
	c.cmd = cmd
	c.pgid = cmd.Process.Pid
	c.children = s.sup.Children
	c.children.started(c.pgid)
	c.stderrR = r
	c.stderrDone = make(chan struct{})
	go func() {
		defer close(c.stderrDone)
		s.stderr.drain(r)
	}()
	return nil
}

// childEnv is the environment of a stdio child: PATH and HOME from Atrium's
// own, then defaults, then the configured variables (which may override them).
// Nothing else is inherited, so provider keys and the master key never reach a child.
func childEnv(defaults, cfg map[string]string) []string {
	env := map[string]string{}
	for _, k := range []string{"PATH", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	maps.Copy(env, defaults)
	maps.Copy(env, cfg)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// sandboxed returns the command line and environment that start the server through
// Atrium's sandbox-exec, with a private HOME and TMPDIR it may write to.
func (s *server) sandboxed() (string, []string, []string, error) {
	if s.sup.SelfExe == "" {
		return "", nil, nil, errors.New("sandbox: Atrium's own executable is unknown, so it cannot start the server sandboxed")
	}
	var home string
	defaults := map[string]string{}
	if s.sup.SandboxDir != "" {
		home = filepath.Join(s.sup.SandboxDir, s.cfg.Name)
		if err := os.MkdirAll(filepath.Join(home, "tmp"), 0o700); err != nil {
			return "", nil, nil, fmt.Errorf("sandbox: private home: %w", err)
		}
		defaults["HOME"], defaults["TMPDIR"] = home, filepath.Join(home, "tmp")
	}
	self, args := sandbox.Args(s.sup.SelfExe, s.cfg.SandboxPolicy(home), s.cfg.Command, s.cfg.Args)
	return self, args, childEnv(defaults, s.cfg.Env), nil
}

// startHTTP opens a streamable HTTP or SSE connection with the configured
// headers and bearer token.
func (s *server) startHTTP(ctx context.Context, c *conn) error {
	hc := newHTTPClient()
	headers := maps.Clone(s.cfg.Headers)
	if headers == nil {
		headers = map[string]string{}
	}
	if s.cfg.BearerToken != "" {
		headers["Authorization"] = "Bearer " + s.cfg.BearerToken
	}
	var oauth *transport.OAuthConfig
	if _, hasAuth := headers["Authorization"]; !hasAuth {
		g, ok, err := s.sup.OAuth.grantFor(ctx, s.cfg)
		if err != nil {
			return fmt.Errorf("oauth grant: %w", err)
		}
		if ok && g.Token != nil {
			oc := s.sup.oauthConfig(s.cfg, g)
			oauth = &oc
		}
	}
	var tr transport.Interface
	var err error
	if s.cfg.Transport == TransportSSE {
		c.sse = &sseRequests{next: scopeGate{hc.Transport}, ctx: ctx, log: s.log}
		hc.Transport = c.sse
		opts := []transport.ClientOption{
			transport.WithHTTPClient(hc),
			transport.WithHeaders(headers),
			transport.WithEndpointTimeout(s.sup.ConnectTimeout),
			transport.WithResponseTimeout(maxCallTimeout),
			transport.WithSSELogger(newTransportLog(s.log, s.secrets))}
		if oauth != nil {
			opts = append(opts, transport.WithOAuth(*oauth))
		}
		var sse *transport.SSE
		sse, err = transport.NewSSE(s.cfg.URL, opts...)
		if err == nil {
			sse.SetConnectionLostHandler(func(err error) { c.signalLost(fmt.Errorf("event stream lost: %w", err)) })
			c.oauth = sse.GetOAuthHandler()
			tr = sse
		}
	} else {
		hc.Transport = &httpGate{next: scopeGate{hc.Transport}, log: s.log, onStreamEnd: c.signalCheck}
		opts := []transport.StreamableHTTPCOption{
			transport.WithHTTPBasicClient(hc),
			transport.WithHTTPHeaders(headers),
			// The GET stream carries list_changed; it is best effort, since the
			// lists are fetched again after every reconnect anyway.
			transport.WithContinuousListening(),
			transport.WithHTTPLogger(newTransportLog(s.log, s.secrets))}
		if oauth != nil {
			opts = append(opts, transport.WithHTTPOAuth(*oauth))
		}
		var sh *transport.StreamableHTTP
		sh, err = transport.NewStreamableHTTP(s.cfg.URL, opts...)
		if err == nil {
			c.oauth = sh.GetOAuthHandler()
			tr = sh
		}
	}
	if err != nil {
		return fmt.Errorf("bad URL: %w", err)
	}
	cl := s.newClient(tr)
	c.client = cl
	// The event streams (SSE's, and streamable HTTP's GET listener) live as
	// long as the context given to Start, so it must be the connection's; the
	// SSE endpoint wait is bounded by WithEndpointTimeout above.
	if err := cl.Start(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	s.answerRequests(ctx, cl, c.sse)
	return nil
}

// maxCallTimeout bounds any single HTTP exchange, above the registry's longest tool timeout.
const maxCallTimeout = 35 * time.Second

// newHTTPClient returns the client for one remote server: TLS verification on
// (TLS 1.2 or later), at most 3 redirects and none to another host (the
// configured headers carry secrets), and bounded dial, TLS and header waits.
// Whole exchanges are bounded by the contexts of the calls, not by
// http.Client.Timeout, which would also cut the long-lived event stream.
func newHTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: maxCallTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 3 { // via holds the original request and each redirect followed
				return errors.New("stopped after 3 redirects")
			}
			if req.URL.Host != via[0].URL.Host {
				return fmt.Errorf("not following a redirect to another host (%s)", req.URL.Host)
			}
			return nil
		},
	}
}
