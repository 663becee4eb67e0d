package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/tools"
)

// server is one enabled server: a goroutine (run) that connects, serves and
// reconnects until the server is stopped.
type server struct {
	sup     *Supervisor
	cfg     ServerConfig
	log     *slog.Logger
	ctx     context.Context // ends when the server is stopped
	cancel  context.CancelFunc
	stderr  *stderrRing   // stdio only
	secrets []string      // cfg.Secrets(), kept out of errors and stderr shown
	calls   atomic.Int32  // tool calls sent and not yet answered
	kick    chan struct{} // cap 1: Reconnect (new OAuth tokens)
	applied ServerConfig  // the config last applied (cfg plus live changes); guarded by Supervisor.mu

	callsMu  sync.Mutex
	inflight map[string]*inflight // tool calls sent and not yet answered, by progress token

	timings atomic.Pointer[connectTimings] // of the last connection that got ready

	mu         sync.Mutex
	stopped    bool
	state      State
	since      time.Time // when state was entered
	downSince  time.Time // when the server stopped being usable (start-up counts)
	lastErr    string
	auth       string        // Status.Auth
	conn       *conn         // non-nil exactly while ready
	resuming   bool          // the server forgot the session and a new one is being opened at once: calls wait for it
	changed    chan struct{} // closed and replaced whenever conn, resuming or stopped change: wakes the calls waiting
	tools      []ToolInfo
	registered map[string]registered // what this server holds in the registry, by name
	resources  int
	prompts    []Prompt
	roots      []string // the roots offered now (cfg.Roots, then live changes)
	sampling   bool     // sampling without asking (cfg.SamplingAlways, then live changes)
}

func newServer(sup *Supervisor, cfg ServerConfig) *server {
	ctx, cancel := context.WithCancel(sup.ctx)
	now := sup.Now()
	s := &server{
		sup:       sup,
		cfg:       cfg,
		log:       sup.log.With("mcp_server", cfg.Name),
		ctx:       ctx,
		cancel:    cancel,
		state:     StateConnecting,
		since:     now,
		downSince: now,
		secrets:   cfg.Secrets(),
		kick:      make(chan struct{}, 1),
		changed:   make(chan struct{}),
		applied:   cfg,
		roots:     cfg.Roots,
		sampling:  cfg.SamplingAlways,
	}
	if cfg.Transport == TransportStdio {
		s.stderr = newStderrRing(s.secrets)
	}
	return s
}

// run connects, serves until the connection is lost, and reconnects with
// backoff, until the server is stopped. It closes every connection it opens.
func (s *server) run() {
	s.publish()
	attempt := 0  // backoff exponent
	failures := 0 // consecutive failed connection attempts
	everReady := false
	for s.ctx.Err() == nil {
		var seen string
		if s.cfg.Transport != TransportStdio {
			seen = s.accessToken(s.ctx)
		}
		c, cat, err := s.connect()
		if err != nil && isAuthRequired(err) {
			// The server refused the token (or mcp-go found it expired and could not
			// refresh it): refresh it once now and try again.
			if rerr := s.refreshGrant(s.ctx, seen); rerr == nil {
				c, cat, err = s.connect()
			} else if !errors.Is(rerr, errNoRefresh) {
				err = rerr
			}
		}
		if err != nil && (isAuthRequired(err) || isRefreshFailure(err) || s.stepUp(err)) && s.ctx.Err() == nil {
			if !s.awaitAuthorisation(err) {
				return
			}
			attempt, failures = 0, 0
			continue
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			failures++
			state := StateConnecting
			if everReady {
				state = StateDegraded
			}
			if failures >= s.sup.FailAfter {
				state = StateFailed
			}
			s.setDown(state, err, false)
		} else {
			failures = 0
			if !s.setReady(c, cat) {
				c.close()
				return
			}
			everReady = true
			readyAt := s.sup.Now()
			err := s.serve(c)
			if s.ctx.Err() != nil {
				c.close()
				return
			}
			if s.stepUp(err) {
				// A call needs more scope than the grant holds: the card asks an admin.
				c.close()
				if !s.awaitAuthorisation(err) {
					return
				}
				attempt = 0
				continue
			}
			if s.sup.Now().Sub(readyAt) >= s.sup.BackoffReset {
				attempt = 0
			}
			// A working server was lost (a stdio child that crashed, say): start it
			// again at once, not after a backoff; a server that keeps getting lost
			// soon after starting backs off from the next loss on.
			immediate := attempt < immediateRestarts
			// The server restarted and forgot the session (found by a call, a health
			// check or a relist): it is up, so let calls that arrive while the new
			// session opens wait for it instead of failing. Only once per
			// BackoffReset: a server that keeps forgetting backs off.
			resume := immediate && attempt == 0 && errors.Is(err, transport.ErrSessionTerminated)
			// Hide the tools first, then take the old connection down (a stuck
			// child can take 2s to die).
			s.setDown(StateDegraded, err, resume)
			c.close()
			if immediate {
				attempt++
				continue
			}
		}
		delay := s.sup.backoff(attempt)
		attempt++
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
	}
}

// immediateRestarts is how many times in a row (without BackoffReset of steady
// service between) a lost connection is restarted without waiting.
const immediateRestarts = 3

// connectTimings is where a connection's start-up time went.
type connectTimings struct {
	Start, Initialize, List time.Duration // process start (or HTTP connect), initialize, listing
}

// serve watches a ready connection until it is lost (returning why) or the
// server is stopped (returning nil).
func (s *server) serve(c *conn) error {
	interval := s.sup.PingInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	ping := time.NewTicker(interval)
	defer ping.Stop()
	exited := c.stderrDone // stdio: the child's stderr closed, most likely because it exited
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case err := <-c.lost:
			return err
		case <-exited:
			exited = nil
			if err := s.probe(c); err != nil {
				return errors.New("the server process exited")
			}
		case <-ping.C:
			if err := s.probe(c); err != nil {
				return fmt.Errorf("health check failed: %w", err)
			}
		case <-c.check:
			if err := s.probe(c); err != nil {
				return fmt.Errorf("the event stream ended and the server does not answer: %w", err)
			}
		case <-c.relist:
			ctx, cancel := context.WithTimeout(s.ctx, s.sup.ConnectTimeout)
			cat, err := s.list(ctx, c)
			cancel()
			if err != nil {
				if s.ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("listing tools after a change: %w", err)
			}
			if !s.setReady(c, cat) {
				return nil
			}
		}
	}
}

// probe checks that the server still answers. Any JSON-RPC answer, even an
// error, proves it alive; a transport error or silence does not.
func (s *server) probe(c *conn) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.sup.PingTimeout)
	defer cancel()
	var err error
	if mcp.IsModernProtocol(c.client.ProtocolVersion()) {
		// Ping sends nothing on the stateless protocol; ask for something real.
		_, err = c.client.ListToolsByPage(ctx, mcp.ListToolsRequest{})
	} else {
		err = c.client.Ping(ctx)
	}
	if isAuthRequired(err) {
		return err // the token was refused: reconnect, which refreshes it
	}
	if err == nil || !isTransportError(err) && ctx.Err() == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("no answer within %s", s.sup.PingTimeout)
	}
	return err
}

// isTransportError reports whether err means the connection is broken rather
// than that the server answered with an error. A server that forgot the session
// (restarted) is a broken connection too: it needs a new initialize.
func isTransportError(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) || errors.Is(err, transport.ErrTransportClosed) ||
		errors.Is(err, transport.ErrSessionTerminated)
}

// setReady makes c the server's connection and publishes cat's tools. It
// returns false if the server was stopped meanwhile.
func (s *server) setReady(c *conn, cat catalog) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false
	}
	s.conn, s.resuming = c, false
	s.changedLocked()
	s.syncToolsLocked(cat.tools)
	s.resources = cat.resources
	s.prompts = cat.prompts
	if s.state != StateReady {
		s.log.Info("mcp: server ready", "tools", len(s.tools), "resources", s.resources, "prompts", len(s.prompts))
		s.state, s.since = StateReady, s.sup.Now()
	}
	s.lastErr, s.auth = "", ""
	s.mu.Unlock()
	s.publish()
	return true
}

// stepUp reports whether err is a 403 insufficient_scope that re-authorising can
// meet (see stepup.go), recording the scopes required.
func (s *server) stepUp(err error) bool {
	var isc *insufficientScope
	return errors.As(err, &isc) && s.needScope(s.ctx, isc.scopes)
}

// awaitAuthorisation shows the server as waiting for an admin to (re)authorise it and
// waits for that (a kick) or the server's end; it returns false at the end.
func (s *server) awaitAuthorisation(err error) bool {
	s.setUnauthorized(err)
	select {
	case <-s.kick:
	case <-s.ctx.Done():
		return false
	}
	// Authorised (or asked to try again): the card says so until the connection's outcome.
	s.mu.Lock()
	if !s.stopped {
		s.state, s.since, s.auth, s.lastErr = StateConnecting, s.sup.Now(), "", ""
	}
	s.mu.Unlock()
	s.publish()
	return true
}

// setUnauthorized hides the server's tools and says that an admin must (re)authorise it.
func (s *server) setUnauthorized(err error) {
	auth, msg := AuthConnect, "The server requires authorisation: Connect to sign in with its provider."
	g, ok, gerr := s.sup.OAuth.grantFor(s.ctx, s.cfg)
	switch {
	case gerr != nil:
		msg = "The OAuth grant cannot be read (was the master key changed?): Connect again."
	case ok && g.Token != nil && len(g.Required) > 0:
		auth, msg = AuthReauthorize, "The server needs more access (scope: "+strings.Join(g.Required, " ")+"): re-authorise to grant it."
	case ok && g.Token != nil:
		auth, msg = AuthReauthorize, "The authorisation expired and could not be renewed: re-authorise."
		if g.Failed != "" {
			msg += " (" + s.redact(g.Failed) + ")"
		}
	case s.sup.OAuth == nil:
		msg = "The server requires authorisation (" + s.redact(err.Error()) + ")."
	}
	s.mu.Lock()
	s.auth = auth
	s.mu.Unlock()
	s.setDown(StateUnauthorized, errors.New(msg), false)
}

// setDown hides the server's tools and records why it is not usable. resume says
// that a new session is being opened at once in place of a forgotten one, so calls
// wait for it; it is set in the same step as the connection is cleared, so that no
// call falls between the two and fails.
func (s *server) setDown(state State, err error, resume bool) {
	msg := "unknown error"
	if err != nil {
		msg = s.redact(err.Error())
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	now := s.sup.Now()
	if s.conn != nil {
		s.downSince = now
	}
	s.conn = nil
	// Unless resuming, no new session is on its way: calls must not wait for one,
	// least of all while an admin must authorise.
	s.resuming = resume
	s.changedLocked()
	s.hideLocked(true)
	s.resources, s.prompts = 0, nil
	if s.state != state {
		s.state, s.since = state, now
	}
	if state != StateUnauthorized {
		s.auth = ""
	}
	changed := s.lastErr != msg
	s.lastErr = msg
	s.mu.Unlock()
	if changed || state != StateConnecting {
		s.log.Warn("mcp: server not usable", "state", state, "err", msg)
	}
	s.publish()
}

// stop hides the server's tools at once and ends its goroutine, which closes
// the connection in the background.
func (s *server) stop() {
	s.mu.Lock()
	s.stopped = true
	s.conn, s.resuming = nil, false
	s.changedLocked()
	s.unregisterLocked()
	s.mu.Unlock()
	s.cancel()
}

// changedLocked wakes the calls waiting in awaitNewConn to look again. Call with
// s.mu held, after changing conn, resuming or stopped.
func (s *server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// hideLocked hides (or shows again) the server's registered tools. Hidden tools are
// not offered to the model, but a call that races the failure still reaches the
// executor and gets the structured "unavailable" answer.
func (s *server) hideLocked(hidden bool) {
	for name := range s.registered {
		_ = s.sup.reg.SetHidden(name, hidden)
	}
	if hidden {
		s.tools = nil
	}
}

func (s *server) unregisterLocked() {
	for name := range s.registered {
		s.sup.reg.Unregister(name)
	}
	s.registered, s.tools = nil, nil
}

// readyConn returns the connection while the server is ready, else nil and
// the time it went down.
func (s *server) readyConn() (*conn, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn, s.downSince
}

// usableConn is the ready connection, or, while a forgotten session is being
// replaced, the new one once it is ready (within ctx and the connect timeout); nil
// and the time the server went down otherwise.
func (s *server) usableConn(ctx context.Context) (*conn, time.Time) {
	s.mu.Lock()
	c, since, resuming := s.conn, s.downSince, s.resuming
	s.mu.Unlock()
	if c == nil && resuming {
		if c = s.awaitNewConn(ctx, nil); c == nil {
			_, since = s.readyConn()
		}
	}
	return c, since
}

// awaitNewConn waits, within ctx and the connect timeout, for a ready connection
// other than old while one may still come: old is still the connection (its loss
// not yet recorded) or a forgotten session is being replaced. It returns nil if none
// came, and at once when the server is stopped or down with no new session on its way.
func (s *server) awaitNewConn(ctx context.Context, old *conn) *conn {
	ctx, cancel := context.WithTimeout(ctx, s.sup.ConnectTimeout)
	defer cancel()
	for {
		s.mu.Lock()
		c, resuming, stopped, changed := s.conn, s.resuming, s.stopped, s.changed
		s.mu.Unlock()
		switch {
		case stopped:
			return nil
		case c != nil && c != old:
			return c
		case c == nil && !resuming:
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-s.ctx.Done():
			return nil
		}
	}
}

// unavailable is the error a tool call gets while the server is down.
func (s *server) unavailable(since time.Time) error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	detail := fmt.Sprintf("%s unavailable since %s", s.cfg.Name, since.UTC().Format(time.RFC3339))
	if stopped {
		// Disabled (or changed, or Atrium shutting down) during the call: no point retrying it.
		detail = s.cfg.Name + " unavailable: the server was stopped (disabled, changed or shut down)"
	}
	return &tools.Error{Code: tools.CodeUnavailable, Detail: detail}
}

func (s *server) status() Status {
	s.mu.Lock()
	st := Status{
		Name:      s.cfg.Name,
		State:     s.state,
		Since:     s.since,
		Error:     s.lastErr,
		Tools:     slices.Clone(s.tools),
		Resources: s.resources,
		Prompts:   len(s.prompts),
		Auth:      s.auth,
	}
	s.mu.Unlock()
	if s.stderr != nil {
		st.Stderr = s.stderr.snapshot() // redacted as they came in
	}
	return st
}

func (s *server) redact(str string) string { return redact(str, s.secrets) }

func (s *server) publish() {
	s.sup.publish(s.status())
}
