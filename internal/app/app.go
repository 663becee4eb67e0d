// Package app builds the whole of Atrium from a Config: the data directory, the
// database, keys, providers, tools, MCP servers, the agent with the consumers of its
// event stream, and the web server. main.go and the tests build Atrium through New,
// so what is tested is what runs.
package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"atrium/internal/agent"
	"atrium/internal/config"
	"atrium/internal/contextwin"
	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/memory"
	"atrium/internal/metrics"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/tools"
	"atrium/internal/trace"
	"atrium/web"
)

// App is a built Atrium. Its parts are exported for tests; the program itself only
// needs Handler and Shutdown.
type App struct {
	Config    config.Config
	Store     *store.DB
	Keys      *crypto.Keyring
	Recorder  *trace.Recorder
	Recording *trace.Consumer // records the agent's runs through Recorder, off the turn's path
	Providers *providers.Catalog
	Tools     *tools.Registry
	Memory    *memory.Service
	MCP       *mcp.Supervisor
	Agent     *agent.Agent
	Hub       *web.Hub
	Web       *web.Server
	Log       *slog.Logger
	Metrics   *metrics.Metrics  // nil unless -metrics-addr or -metrics-token is set
	Activity  *metrics.Activity // the rollups of Settings → Activity

	lock      *instanceLock      // nil where flock is unavailable
	stopPurge context.CancelFunc // ends the expired-memory purge loop
	purged    chan struct{}      // closed when it has ended
}

// Options are what tests vary; the zero value is what the program runs with.
type Options struct {
	Log   *slog.Logger     // nil: discard
	Now   func() time.Time // the web layer's clock (logins, rate limits); nil: time.Now
	Tools []tools.Tool     // more tools, registered after the built-ins
	Sinks []agent.Sink     // more consumers of the agent's events: each event reaches them once the recording has written it
	// Agent overrides the agent's settings field by field (zero fields keep the
	// values derived from Config).
	Agent agent.Config
	// UnwatchedGrace is how long a reply streams after its last viewer left before it
	// is stopped; 0: 15 s, long enough for a reload to reconnect.
	UnwatchedGrace time.Duration
}

// ConfigError marks a failure caused by the settings or the data directory (a bad
// master key, a data directory that cannot be created): the operator must act.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// New builds Atrium on cfg.DataDir, creating the directory, the master key file and the
// database on first run. Configured MCP servers start connecting in the background;
// New never waits for them. The caller must call Shutdown (which also closes the
// database), also when it never served.
func New(ctx context.Context, cfg config.Config, o Options) (*App, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, &ConfigError{fmt.Errorf("data directory %s: %w", cfg.DataDir, err)}
	}
	var (
		master []byte
		err    error
	)
	created := false
	if cfg.MasterKeyFile != "" {
		master, err = crypto.LoadMasterKeyFile(cfg.MasterKeyFile)
	} else {
		master, created, err = crypto.LoadMasterKey(cfg.DataDir, cfg.MasterKey)
	}
	if err != nil {
		return nil, &ConfigError{err}
	}
	if created {
		log.Warn("created a new master key; back it up, without it the secrets in this data directory cannot be read",
			"path", filepath.Join(cfg.DataDir, crypto.MasterKeyFile))
	}
	lock, err := lockInstance(cfg.DataDir)
	if err != nil {
		log.Warn("no instance lock in the data directory: after a crash, chats wait for the old process's leases to expire",
			"err", err)
		lock = nil
	}
	db, err := store.Open(ctx, filepath.Join(cfg.DataDir, crypto.DatabaseFile))
	if err != nil {
		lock.close()
		return nil, err
	}
	a := &App{Config: cfg, Store: db, Log: log, lock: lock}
	if err := a.build(ctx, master, o); err != nil {
		db.Close()
		lock.close()
		return nil, err
	}
	return a, nil
}

func (a *App) build(ctx context.Context, master []byte, o Options) error {
	cfg, db, log := a.Config, a.Store, a.Log
	keys, err := crypto.NewKeyring(ctx, master, db)
	if err != nil {
		return &ConfigError{err}
	}
	csrfKey, err := instanceSecret(ctx, db, "csrf_key")
	if err != nil {
		return err
	}
	a.Keys = keys

	a.Recorder = trace.NewRecorder(db, trace.NewRedactor(), keys)
	if cfg.EmbeddingsKey != "" {
		a.Recorder.Redactor().AddSecret(cfg.EmbeddingsKey)
	}
	if _, err := a.Recorder.StopUnfinished(ctx); err != nil {
		return err
	}
	a.Providers = &providers.Catalog{Store: db, Keys: keys, StartTimeout: cfg.ModelStartTimeout,
		IdleTimeout: cfg.ModelIdleTimeout, Redactor: a.Recorder.Redactor()}
	a.Memory = memory.NewService(db, keys, memory.HashEmbedder{})
	a.Memory.OnSecret = a.Recorder.Redactor().AddSecret
	// The admins' saved settings win; the flags and environment are the defaults.
	if err := a.Memory.LoadInstance(ctx, memoryDefaults(cfg), cfg.EmbeddingsKey); err != nil {
		// Settings are in force regardless (see LoadInstance); memory must not stop start-up.
		log.Error("memory: the saved instance settings are unreadable", "err", err)
	}
	a.Tools = tools.NewRegistry(db, tools.HashEmbedder{})
	if err := tools.RegisterBuiltins(a.Tools, time.Now, db); err != nil {
		return err
	}
	for _, t := range o.Tools {
		if err := a.Tools.Register(t); err != nil {
			return err
		}
	}

	if err := memory.RegisterTools(a.Tools, a.Memory); err != nil {
		return err
	}
	deps := agent.Deps{Store: db, Resolve: a.Providers.Resolve, Window: a.Providers.Window, Vision: a.Providers.Vision, Tools: a.Tools, Memory: a.Memory,
		Config: agentConfig(cfg, o.Agent), Log: log}
	if a.lock != nil {
		deps.Instance, deps.Alive = a.lock.id, a.lock.alive
	}
	a.Agent = agent.New(deps)
	// Chats a killed predecessor was answering answer again at once, their partial
	// replies marked interrupted.
	if n, err := a.Agent.RecoverDeadRuns(ctx); err != nil {
		log.Error("could not release the leases of a stopped process; those chats wait for them to expire", "err", err)
	} else if n > 0 {
		log.Info("closed the replies of a stopped process", "chats", n)
	}
	if a.lock != nil {
		a.lock.sweep()
	}
	grace := o.UnwatchedGrace
	if grace <= 0 {
		grace = 15 * time.Second
	}
	a.Hub = web.NewHub(web.HubConfig{Interval: hubInterval, StopUnwatched: a.Agent.Stop, Grace: grace, Log: log})
	// The event stream's consumers: what the user sees first, then the recording,
	// which writes in the background and passes each event on to the run links (a
	// reply's link appears once its run is stored) and the Sinks once it is written.
	a.Agent.Subscribe(a.Hub)
	a.Recording = trace.NewConsumer(a.Recorder, log, append([]agent.Sink{a.Hub.RunLinks()}, o.Sinks...)...)
	a.Agent.Subscribe(a.Recording)
	// Runs from before the rollups existed are rolled up once, before any new run.
	if ok, err := db.BackfillActivity(ctx, activityBackfill); err != nil {
		log.Warn("activity: could not roll up earlier runs; Settings → Activity starts from now", "err", err)
	} else if ok {
		log.Info("activity: rolled up the runs of the last 30 days")
	}
	a.Activity = metrics.NewActivity(db, log)
	a.Agent.Subscribe(a.Activity)
	a.MCP = mcp.NewSupervisor(a.Tools, log, nil)
	// Sandboxed servers' private homes live with the data, so they work without a HOME.
	a.MCP.SandboxDir = filepath.Join(cfg.DataDir, "mcp-sandbox")
	a.MCP.OAuth = &mcp.OAuthStore{Rows: db, Keys: keys}
	if a.lock != nil {
		// Kill the stdio servers a crashed predecessor left running, before starting ours.
		for _, f := range mcp.ChildFiles(a.lock.dir, a.lock.alive) {
			if _, err := mcp.ReapChildFile(f, log); err != nil {
				log.Warn("mcp: could not read the children of a stopped process", "err", err)
			}
		}
		a.MCP.Children = mcp.NewChildFile(a.lock.childFile())
	}
	var metricsOnMain http.Handler
	if cfg.MetricsAddr != "" || cfg.MetricsToken != "" {
		a.Metrics = metrics.New(metrics.Gauges{OpenSockets: a.Hub.Clients, MCPStates: func() map[string]int {
			out := map[string]int{}
			for _, st := range a.MCP.Statuses() {
				out[string(st.State)]++
			}
			return out
		}})
		a.Agent.Subscribe(a.Metrics)
		if cfg.MetricsToken != "" {
			metricsOnMain = a.Metrics.Handler(cfg.MetricsToken)
		}
	}

	a.Web = web.New(web.Deps{Config: cfg, Store: db, Keys: keys, Agent: a.Agent, Hub: a.Hub, Providers: a.Providers,
		Recorder: a.Recorder, MCP: a.MCP, Memory: a.Memory, CSRFKey: csrfKey, Log: log, Now: o.Now, NewID: uuid.NewString,
		Metrics: metricsOnMain})
	a.MCP.Subscribe(a.Web.MCPChanged)
	a.MCP.Asker = a.Web.Asker()
	a.startPurge()
	// MCP servers connect in the background: readiness never waits for them.
	if err := a.Web.ApplyMCP(ctx); err != nil {
		log.Error("mcp: could not load the configured servers", "err", err)
	}
	return nil
}

// agentConfig derives the agent's settings from the configuration: the context budgets
// fit the configured window, and a message may be as large as MaxPromptBytes (typed
// text with attached MCP resources; the web layer holds typed text to MaxMessageBytes).
func agentConfig(cfg config.Config, over agent.Config) agent.Config {
	c := over
	c.ExtractMemories = over.ExtractMemories || cfg.MemoryExtraction
	c.GenerateTitles = over.GenerateTitles || cfg.GenerateTitles
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = cfg.MaxPromptBytes()
	}
	if c.Budgets == (contextwin.Budgets{}) {
		c.Budgets = contextwin.DefaultBudgets()
		if cfg.ContextWindow > 0 {
			c.Budgets = c.Budgets.WithWindow(cfg.ContextWindow)
		}
	}
	return c
}

// memoryDefaults are the instance memory settings from the flags and environment,
// in force until an admin saves Settings → Memories.
func memoryDefaults(cfg config.Config) memory.Instance {
	in := memory.DefaultInstance
	in.EmbeddingsURL, in.EmbeddingsModel, in.EmbeddingsDimensions = cfg.EmbeddingsURL, cfg.EmbeddingsModel, cfg.EmbeddingsDimensions
	return in
}

// hubInterval coalesces streamed text into websocket frames (measured: StreamRelay
// and StreamCPU in docs/benchmarks.md).
const hubInterval = 30 * time.Millisecond

// activityBackfill is how far back an upgraded instance rolls up its runs: the
// longest range Settings → Activity shows.
const activityBackfill = 30 * 24 * time.Hour

// purgeEvery is how often expired memories are deleted (also once at start).
const purgeEvery = time.Hour

// reindexRetry is how soon a failed reindex is tried again.
const reindexRetry = time.Minute

// runRetention is the trace retention the configuration asks for, at now.
func runRetention(cfg config.Config, now time.Time) store.Retention {
	var r store.Retention
	if cfg.RunsKeepDays > 0 {
		r.Before = now.AddDate(0, 0, -cfg.RunsKeepDays)
	}
	r.MaxBytes = int64(cfg.RunsMaxMB) << 20
	return r
}

// startPurge reindexes memories if the embedder changed, then deletes expired
// memories, prunes runs past the retention (runRetention) and uploads no message used
// for a day (store.UnsentAttachmentTTL) now and every
// purgeEvery until Shutdown; an admin's change of the
// embedder (memory.Service.ReindexRequests) reindexes at once. It runs in the
// background: start-up never waits for the embeddings endpoint.
func (a *App) startPurge() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stopPurge, a.purged = cancel, make(chan struct{})
	go func() {
		defer close(a.purged)
		var retry <-chan time.Time
		// A new embedding model (or index format) needs every memory indexed again;
		// until then search is lexical.
		reindex := func() {
			name := a.Memory.EmbedderName()
			retry = nil
			if n, err := a.Memory.Reindex(ctx, name); err != nil && ctx.Err() == nil {
				a.Log.Warn("memory: reindex failed; will retry", "err", err, "in", reindexRetry)
				retry = time.After(reindexRetry)
			} else if n > 0 {
				a.Log.Info("memory: reindexed memories", "count", n, "embedder", name)
			}
		}
		purge := func() {
			if n, err := a.Memory.PurgeExpired(ctx); err != nil && ctx.Err() == nil {
				a.Log.Warn("memory: purge expired", "err", err)
			} else if n > 0 {
				a.Log.Info("memory: purged expired memories", "count", n)
			}
		}
		prune := func() {
			if n, err := a.Store.PruneRuns(ctx, runRetention(a.Config, a.Store.CurrentTime())); err != nil && ctx.Err() == nil {
				a.Log.Warn("trace: pruning old runs", "err", err)
			} else if n > 0 {
				a.Log.Info("trace: pruned old runs", "count", n)
			}
		}
		// Uploads no message used expire though nobody uploads again (the upload
		// route prunes too, but only when it is used).
		pruneFiles := func() {
			if n, err := a.Store.PruneUnsentAttachments(ctx, a.Store.CurrentTime().Add(-store.UnsentAttachmentTTL)); err != nil && ctx.Err() == nil {
				a.Log.Warn("files: pruning unsent uploads", "err", err)
			} else if n > 0 {
				a.Log.Info("files: unsent uploads expired", "count", n)
			}
		}
		reindex()
		purge()
		prune()
		pruneFiles()
		// Spans written in the clear by an older Atrium are sealed once, in the background.
		if n, err := a.Recorder.SealStored(ctx, 500); err != nil && ctx.Err() == nil {
			a.Log.Warn("trace: sealing stored spans failed; they stay readable and are sealed at the next start", "err", err)
		} else if n > 0 {
			a.Log.Info("trace: sealed spans stored in the clear", "count", n)
		}
		t := time.NewTicker(purgeEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.Memory.ReindexRequests():
				reindex()
			case <-retry:
				reindex()
			case <-t.C:
				reindex() // a no-op unless the embedder changed
				purge()
				prune()
				pruneFiles()
			}
		}
	}()
}

// Handler is the root HTTP handler.
func (a *App) Handler() http.Handler { return a.Web.Handler() }

// Shutdown ends the replies in flight (their partial text is saved and their final
// frames reach the browsers), stops every MCP server's process group and closes the
// websockets. It waits for the replies at most until ctx ends; the rest always
// happens. Then stop the HTTP server and Close.
func (a *App) Shutdown(ctx context.Context) error {
	err := a.Agent.Shutdown(ctx)
	a.Recording.Close() // after the runs: their recording is written
	a.Activity.Close()  // after the runs: their last rollups are written
	a.stopPurge()
	<-a.purged
	a.MCP.Close()
	a.Hub.CloseAll()
	return err
}

// Close closes the database and gives up the instance lock. Call it after Shutdown,
// once no request is served.
func (a *App) Close() error {
	if a.Recording != nil {
		a.Recording.Close() // nothing is queued after Shutdown; without it, this drains
	}
	err := a.Store.Close()
	a.lock.close()
	return err
}

// instanceSecret returns a random 32-byte secret kept in the database's meta table,
// creating it on first run, so that it survives restarts.
func instanceSecret(ctx context.Context, db *store.DB, name string) ([]byte, error) {
	v, err := db.Meta(ctx, name)
	if err == nil && len(v) == 32 {
		return v, nil
	}
	if err != nil && !errs.Is(err, errs.NotFound) {
		return nil, err
	}
	v = make([]byte, 32)
	if _, err := rand.Read(v); err != nil {
		return nil, err
	}
	return v, db.SetMeta(ctx, name, v)
}
