package mcp

import (
	"context"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"atrium/internal/errs"
	"atrium/internal/tools"
)

// State is where a server's connection stands.
type State string

const (
	StateConnecting State = "connecting" // first start, not ready yet
	StateReady      State = "ready"      // connected; its tools are in the registry
	StateDegraded   State = "degraded"   // was ready, lost; reconnecting
	StateFailed     State = "failed"     // several attempts in a row failed; still retrying, slowly
	StateDisabled   State = "disabled"   // configured but not enabled
	// StateUnauthorized: a remote server answered 401; it waits for an admin to Connect
	// (Status.Auth says whether it never was, or its grant could not be refreshed).
	StateUnauthorized State = "unauthorized"
)

// Why a server is unauthorized (Status.Auth).
const (
	AuthConnect     = "connect"     // never authorised: Connect
	AuthReauthorize = "reauthorize" // its tokens expired or were refused and refreshing failed
)

// ToolInfo is one tool a server exposes; Name is without the "<server>__" prefix.
type ToolInfo struct{ Name, Description string }

// Status is a server's state as shown on the settings page.
type Status struct {
	Name      string
	State     State
	Since     time.Time // when State was entered
	Error     string    // why it is not ready (secrets redacted); "" when ready
	Tools     []ToolInfo
	Resources int
	Prompts   int
	Stderr    []string // last lines of a stdio child's stderr (bounded)
	Auth      string   // with StateUnauthorized: AuthConnect or AuthReauthorize
}

// Resource is one resource a server offers.
type Resource struct{ Server, URI, Name, Description, MimeType string }

// ResourceContent is a read resource: text contents joined, binary contents
// reported by size only.
type ResourceContent struct {
	URI, MimeType, Text string
	BlobBytes           int
}

// Prompt is one prompt template a server offers.
type Prompt struct {
	Server, Name, Description string
	Arguments                 []PromptArg
}

// PromptArg is one argument of a Prompt.
type PromptArg struct {
	Name, Description string
	Required          bool
}

// Supervisor keeps one long-lived connection per enabled server, each in its
// own goroutine, and mirrors each ready server's tools into the registry. All
// methods are safe for concurrent use. A failing server never blocks Apply,
// another server or a tool call of another server.
//
// The exported fields tune timing; set them before the first Apply.
type Supervisor struct {
	PingInterval   time.Duration // health check interval; default 10s
	PingTimeout    time.Duration // a health check slower than this fails; default 5s
	ConnectTimeout time.Duration // start-up, handshake and listing; default 30s
	RequestTimeout time.Duration // resources and prompts calls; default 30s
	BackoffBase    time.Duration // first reconnect delay (before jitter); default 200ms
	BackoffMax     time.Duration // reconnect delay cap; default 30s
	// BackoffReset: a connection that stayed ready this long restarts the
	// backoff from BackoffBase when it is lost; default 10s. A server that
	// dies right after every start backs off instead of being restarted in a
	// tight loop.
	BackoffReset time.Duration
	FailAfter    int              // consecutive failed attempts before StateFailed; default 3
	Now          func() time.Time // default time.Now
	// Children records the stdio children's process groups for the next start to reap
	// after a crash; nil records nothing. Set before Apply.
	Children *ChildFile
	// SelfExe is Atrium's own executable, which runs sandboxed servers through its
	// sandbox-exec subcommand; default os.Executable().
	SelfExe string
	// SandboxDir holds a private HOME (and TMPDIR) per sandboxed server, the only place
	// besides its configured paths where it may write (npx keeps its cache there);
	// default the user's cache directory + "/atrium/mcp-sandbox".
	SandboxDir string
	// OAuth keeps the remote servers' OAuth grants; nil: no OAuth (a 401 only fails).
	OAuth *OAuthStore
	// Asker puts servers' elicitation and sampling requests to the people in the chats
	// they concern; nil declares neither capability. Set before Apply.
	Asker Asker

	reg      *tools.Registry
	log      *slog.Logger
	onChange []func(Status) // fixed before Apply (NewSupervisor, Subscribe)

	ctx    context.Context // ends on Close; parent of every connection
	cancel context.CancelFunc
	wg     sync.WaitGroup // server goroutines, including stopped ones still tearing down

	mu      sync.Mutex
	closed  bool
	servers map[string]*server // enabled, valid configs
	statics map[string]Status  // disabled or invalid configs
}

// NewSupervisor returns a Supervisor that registers tools in reg and calls
// onChange (if not nil) after every change of a server's state or tools.
// onChange is called from the servers' goroutines, possibly concurrently for
// different servers; it must not block for long and must not call Apply or
// Close.
func NewSupervisor(reg *tools.Registry, log *slog.Logger, onChange func(Status)) *Supervisor {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	self, _ := os.Executable()
	sandboxDir := ""
	if d, err := os.UserCacheDir(); err == nil {
		sandboxDir = filepath.Join(d, "atrium", "mcp-sandbox")
	}
	return &Supervisor{
		SelfExe:        self,
		SandboxDir:     sandboxDir,
		PingInterval:   10 * time.Second,
		PingTimeout:    5 * time.Second,
		ConnectTimeout: 30 * time.Second,
		RequestTimeout: 30 * time.Second,
		BackoffBase:    200 * time.Millisecond,
		BackoffMax:     30 * time.Second,
		BackoffReset:   10 * time.Second,
		FailAfter:      3,
		Now:            time.Now,

		reg:      reg,
		log:      log,
		onChange: []func(Status){onChange},
		ctx:      ctx,
		cancel:   cancel,
		servers:  map[string]*server{},
		statics:  map[string]Status{},
	}
}

// Apply reconciles the running servers with cfgs: new enabled servers start
// connecting, removed or disabled ones stop (their tools leave the registry
// before Apply returns; their processes are stopped in the background), and
// changed ones restart. Unchanged servers keep their connection. A config that
// fails Validate is reported as failed with the validation message; of two
// configs with the same name only the first counts. Apply never waits for a
// connection; ctx is not used by the connections, whose lives are bound to
// the Supervisor. After Close, Apply does nothing.
func (s *Supervisor) Apply(ctx context.Context, cfgs []ServerConfig) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	now := s.Now()
	want := map[string]ServerConfig{}
	statics := map[string]Status{}
	for _, c := range cfgs {
		if _, dup := want[c.Name]; dup {
			s.log.Warn("mcp: duplicate server name ignored", "server", c.Name)
			continue
		}
		if _, dup := statics[c.Name]; dup {
			s.log.Warn("mcp: duplicate server name ignored", "server", c.Name)
			continue
		}
		st := Status{Name: c.Name, Since: now}
		if err := c.Validate(); err != nil {
			st.State, st.Error = StateFailed, errs.Message(err)
		} else if !c.Enabled {
			st.State = StateDisabled
		} else {
			want[c.Name] = cloneConfig(c)
			continue
		}
		if old, ok := s.statics[c.Name]; ok && old.State == st.State && old.Error == st.Error {
			st.Since = old.Since
		}
		statics[c.Name] = st
	}

	var stopped, started []*server
	for name, srv := range s.servers {
		c, ok := want[name]
		switch {
		case !ok || !reflect.DeepEqual(withoutLive(c), withoutLive(srv.applied)):
			stopped = append(stopped, srv)
			delete(s.servers, name)
		case !reflect.DeepEqual(c, srv.applied):
			srv.applied = c
			srv.updateLive(c) // roots or sampling consent: no restart
		}
	}
	for name, c := range want {
		if _, ok := s.servers[name]; !ok {
			srv := newServer(s, c)
			s.servers[name] = srv
			started = append(started, srv)
		}
	}
	var changed []Status
	for name, st := range statics {
		if old, ok := s.statics[name]; !ok || !reflect.DeepEqual(old, st) {
			changed = append(changed, st)
		}
	}
	s.statics = statics
	// Stop before starting: a restarted server reuses its tool names.
	for _, srv := range stopped {
		srv.stop()
	}
	for _, srv := range started {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			srv.run()
		}()
	}
	s.mu.Unlock()

	for _, st := range changed {
		s.publish(st)
	}
}

// Statuses returns every configured server's status, by name.
func (s *Supervisor) Statuses() []Status {
	s.mu.Lock()
	out := make([]Status, 0, len(s.servers)+len(s.statics))
	for _, st := range s.statics {
		out = append(out, st)
	}
	srvs := slices.Collect(maps.Values(s.servers))
	s.mu.Unlock()
	for _, srv := range srvs {
		out = append(out, srv.status())
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Close stops every server: their tools leave the registry, stdio children
// get SIGTERM and, after 2s, SIGKILL, to their whole process group. It returns
// when every server goroutine has finished. Close is idempotent.
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closed = true
	srvs := slices.Collect(maps.Values(s.servers))
	s.servers = map[string]*server{}
	s.mu.Unlock()
	for _, srv := range srvs {
		srv.stop()
	}
	s.cancel()
	s.wg.Wait()
}

// Subscribe adds fn to the callbacks of every change (see NewSupervisor), for a
// consumer built after the supervisor, such as the web server that shows the states.
// Call it before the first Apply.
func (s *Supervisor) Subscribe(fn func(Status)) { s.onChange = append(s.onChange, fn) }

func (s *Supervisor) publish(st Status) {
	for _, fn := range s.onChange {
		if fn != nil {
			fn(st)
		}
	}
}

// backoff returns the delay before reconnect attempt n (0-based): exponential
// from BackoffBase, capped at BackoffMax, with jitter in [d/2, d).
func (s *Supervisor) backoff(n int) time.Duration {
	d := s.BackoffMax
	if n < 30 {
		if e := s.BackoffBase << n; e > 0 && e < d {
			d = e
		}
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// Reconnect makes server name connect again now if it waits for authorisation (after
// a Connect stored its tokens). Unknown or disabled names are ignored.
func (s *Supervisor) Reconnect(name string) {
	s.mu.Lock()
	srv := s.servers[name]
	s.mu.Unlock()
	if srv != nil {
		select {
		case srv.kick <- struct{}{}:
		default:
		}
	}
}

// runningURL is the URL server id runs with; ok is false when it does not run.
func (s *Supervisor) runningURL(id int64) (u string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.servers {
		if srv.cfg.ID == id {
			return srv.cfg.URL, true
		}
	}
	return "", false
}

// lookup returns the running server called name, or errs.NotFound.
func (s *Supervisor) lookup(name string) (*server, error) {
	s.mu.Lock()
	srv, ok := s.servers[name]
	st, static := s.statics[name]
	s.mu.Unlock()
	switch {
	case ok:
		return srv, nil
	case static:
		return nil, errs.E(errs.Unavailable, "The MCP server %q is %s.", name, st.State)
	}
	return nil, errs.E(errs.NotFound, "There is no MCP server called %q.", name)
}

// cloneConfig copies c so that the caller may reuse its maps and slices;
// empty ones become nil so that configs compare equal however they were built.
func cloneConfig(c ServerConfig) ServerConfig {
	c.Args = cloneSlice(c.Args)
	c.Env = cloneMap(c.Env)
	c.Headers = cloneMap(c.Headers)
	c.OAuthScopes = cloneSlice(c.OAuthScopes)
	if len(c.SecretArgs) == 0 {
		c.SecretArgs = nil
	} else {
		c.SecretArgs = slices.Clone(c.SecretArgs)
	}
	c.AllowTools = cloneSlice(c.AllowTools)
	c.DenyTools = cloneSlice(c.DenyTools)
	c.ReadPaths = cloneSlice(c.ReadPaths)
	c.WritePaths = cloneSlice(c.WritePaths)
	c.Roots = cloneSlice(c.Roots)
	return c
}

// withoutLive is c without the settings a running server takes without a restart.
func withoutLive(c ServerConfig) ServerConfig {
	c.Roots, c.SamplingAlways = nil, false
	return c
}

func cloneSlice(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
