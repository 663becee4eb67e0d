// Command atrium is a self-hosted AI agent: one binary serving a browser chat backed by
// a SQLite file in its data directory. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // the scratch Docker image has no zoneinfo

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/pdftext"
	"atrium/internal/sandbox"
)

func main() {
	// The sandbox wrapper of a local MCP server: restrict, then exec the server. First,
	// before signal handlers or anything else that the exec would throw away.
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:]))
	}
	// The PDF text reader: a child that limits itself, reads a PDF on stdin and writes
	// its text on stdout (internal/pdftext).
	if len(os.Args) > 1 && os.Args[1] == pdftext.Subcommand {
		os.Exit(pdftext.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
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
	// Subcommands; anything else is the server's flags.
	if len(args) > 0 {
		switch args[0] {
		case "healthcheck":
			return healthcheck(getenv)
		case "version":
			return printVersion(stdout)
		case "backup", "restore":
			return backupCommand(ctx, args[0], args[1:], getenv, stdout, stderr)
		}
	}
	cfg, err := config.Load(args, getenv, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return configError{err}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	atrium, err := app.New(ctx, cfg, app.Options{Log: log})
	if err != nil {
		err = ownershipHint(err, cfg.DataDir)
		if ce := (*app.ConfigError)(nil); errors.As(err, &ce) {
			return configError{err}
		}
		return err
	}
	defer atrium.Close()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return configError{fmt.Errorf("listen on %s: %w", cfg.Addr, err)}
	}
	// Slow clients are bounded by the header timeout, the per-route body deadline in
	// web (a server-wide ReadTimeout would cancel long handlers, as net/http cancels the
	// request's context at a read deadline) and the idle timeout between requests. No
	// WriteTimeout: websockets and streamed downloads are long-lived by design.
	httpSrv := &http.Server{Handler: atrium.Handler(), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info("atrium listening", "addr", ln.Addr().String(), "data", cfg.DataDir)
	// Prometheus on an address of its own (e.g. loopback or an internal network).
	var metricsSrv *http.Server
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			httpSrv.Close()
			return configError{fmt.Errorf("listen on %s (metrics): %w", cfg.MetricsAddr, err)}
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", atrium.Metrics.Handler(cfg.MetricsToken))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { serveErr <- metricsSrv.Serve(mln) }()
		log.Info("metrics listening", "addr", mln.Addr().String())
	}
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
	if err := atrium.Shutdown(shutCtx); err != nil {
		log.Error("shutdown: replies", "err", err)
	}
	if err := httpSrv.Shutdown(shutCtx); err != nil {
		log.Warn("shutdown: http", "err", err)
	}
	if metricsSrv != nil {
		metricsSrv.Shutdown(shutCtx)
	}
	return nil
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
