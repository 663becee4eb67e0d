// Command atrium is a self-hosted AI agent: one binary serving a browser chat backed by
// a SQLite file in its data directory. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	_ "time/tzdata" // the scratch Docker image has no zoneinfo

	"github.com/google/uuid"

	"atrium/internal/agent"
	"atrium/internal/config"
	"atrium/internal/contextwin"
	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/models"
	"atrium/internal/store"
	"atrium/internal/tools"
	"atrium/internal/trace"
	"atrium/web"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(configError)):
		fmt.Fprintln(os.Stderr, "atrium:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "atrium:", err)
		os.Exit(1)
	}
}

// configError marks start-up errors caused by bad settings (exit code 2).
type configError struct{ error }

// run starts Atrium and blocks until ctx ends (SIGTERM/SIGINT), then shuts down cleanly:
// stop accepting, cancel in-flight replies and save their partial text, close the
// database. ready, when not nil, receives the listening address once serving.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready chan<- string) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(getenv)
	}
	cfg, err := config.Load(args, getenv, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return configError{err}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return configError{fmt.Errorf("data directory %s: %w", cfg.DataDir, err)}
	}
	master, created, err := crypto.LoadMasterKey(cfg.DataDir, cfg.MasterKey)
	if err != nil {
		return configError{err}
	}
	if created {
		log.Warn("created a new master key; back it up, without it the secrets in this data directory cannot be read",
			"path", filepath.Join(cfg.DataDir, crypto.MasterKeyFile))
	}
	db, err := store.Open(ctx, filepath.Join(cfg.DataDir, "atrium.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	keys, err := crypto.NewKeyring(ctx, master, db)
	if err != nil {
		return configError{err}
	}
	csrfKey, err := instanceSecret(ctx, db, "csrf_key")
	if err != nil {
		return err
	}

	recorder := trace.NewRecorder(db, trace.NewRedactor())
	if _, err := recorder.StopUnfinished(ctx); err != nil {
		return err
	}
	catalog := &models.Catalog{Store: db, Keys: keys, StartTimeout: cfg.ModelStartTimeout,
		IdleTimeout: cfg.ModelIdleTimeout, Redactor: recorder.Redactor()}
	registry := tools.NewRegistry(db, tools.HashEmbedder{})
	if err := tools.RegisterBuiltins(registry, time.Now, db); err != nil {
		return err
	}
	hub := web.NewHub(30*time.Millisecond, nil, log)
	// The web layer holds typed text to MaxMessageBytes; attached MCP resources may add
	// up to three times as much again.
	budgets := contextwin.DefaultBudgets()
	budgets.Window = cfg.ContextWindow
	budgets.ReplyReserve = min(budgets.ReplyReserve, cfg.ContextWindow/4)
	ag := agent.New(agent.Deps{Store: db, Resolve: catalog.Resolve, Sink: hub, Tools: registry,
		Recorder: recorder, Config: agent.Config{MaxMessageBytes: 4 * cfg.MaxMessageBytes, Budgets: budgets}, Log: log})
	// MCP servers connect in the background: readiness never waits for them.
	var srv *web.Server
	servers := mcp.NewSupervisor(registry, log, func(st mcp.Status) {
		if srv != nil {
			srv.MCPChanged(st)
		}
	})
	defer servers.Close()
	// Closing the last tab stops the reply (after a grace period for reloads).
	hub.StopUnwatched(func(id string) { ag.Stop(id) }, 15*time.Second)
	srv = web.New(web.Deps{Config: cfg, Store: db, Keys: keys, Agent: ag, Hub: hub, Models: catalog,
		Recorder: recorder, MCP: servers, CSRFKey: csrfKey, Log: log, NewID: uuid.NewString})
	if err := srv.ApplyMCP(ctx); err != nil {
		log.Error("mcp: could not load the configured servers", "err", err)
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return configError{fmt.Errorf("listen on %s: %w", cfg.Addr, err)}
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info("atrium listening", "addr", ln.Addr().String(), "data", cfg.DataDir)
	if ready != nil {
		ready <- ln.Addr().String()
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// Replies first, so their partial text is saved and their final frames reach the
	// browsers; then the listener and the (hijacked) websockets.
	if err := ag.Shutdown(shutCtx); err != nil {
		log.Error("shutdown: replies", "err", err)
	}
	servers.Close() // stops every MCP child process group
	hub.CloseAll()
	if err := httpSrv.Shutdown(shutCtx); err != nil {
		log.Warn("shutdown: http", "err", err)
	}
	return nil
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

// healthcheck is the Docker HEALTHCHECK: GET /healthz on the configured port.
func healthcheck(getenv func(string) string) error {
	addr := getenv("ATRIUM_ADDR")
	if addr == "" {
		addr = ":8080"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening on all interfaces: loopback is one of them
	}
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}
