package mcp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// newConfigStore returns a ConfigStore on a real database and keyring.
func newConfigStore(t *testing.T) (*mcp.ConfigStore, *store.DB) {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t)
	master := make([]byte, crypto.KeySize)
	_, _ = rand.Read(master)
	keys, err := crypto.NewKeyring(ctx, master, db)
	if err != nil {
		t.Fatal(err)
	}
	return &mcp.ConfigStore{Rows: db, Keys: keys}, db
}

func TestConfigStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	cs, db := newConfigStore(t)
	const token, envSecret = "tok-SECRET-1234", "env-SECRET-5678"
	remote := mcp.ServerConfig{Name: "remote", Transport: mcp.TransportHTTP, URL: "https://example.com/mcp", Enabled: true,
		BearerToken: token, Headers: map[string]string{"X-Key": envSecret}, DenyTools: []string{"rm"}, CallTimeout: 15 * time.Second}
	if err := cs.Save(ctx, &remote); err != nil {
		t.Fatal(err)
	}
	plain := mcp.ServerConfig{Name: "plain", Transport: mcp.TransportStdio, Command: "true", Args: []string{"a b"}}
	if err := cs.Save(ctx, &plain); err != nil {
		t.Fatal(err)
	}
	rows, err := db.ListMCPServers(ctx)
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	for _, row := range rows {
		for _, secret := range []string{token, envSecret} {
			if bytes.Contains(row.Config, []byte(secret)) || bytes.Contains(row.SecretsSealed, []byte(secret)) {
				t.Errorf("row %s stores %q in clear", row.Name, secret)
			}
		}
		cfg, err := cs.Config(ctx, row)
		if err != nil {
			t.Fatal(err)
		}
		switch row.Name {
		case "remote":
			if row.SecretsSealed == nil || cfg.BearerToken != token || cfg.Headers["X-Key"] != envSecret ||
				cfg.CallTimeout != 15*time.Second || len(cfg.DenyTools) != 1 || !cfg.Enabled {
				t.Errorf("remote = %+v", cfg)
			}
		case "plain":
			if row.SecretsSealed != nil || cfg.Command != "true" || len(cfg.Args) != 1 || cfg.Args[0] != "a b" || cfg.Enabled {
				t.Errorf("plain = %+v (sealed %v)", cfg, row.SecretsSealed)
			}
		}
	}

	// Sealed secrets are bound to their row: moved to another, they do not open.
	var remoteRow store.MCPServer
	for _, row := range rows {
		if row.Name == "remote" {
			remoteRow = row
		}
	}
	moved := remoteRow
	moved.ID = plain.ID
	if cfg, err := cs.Config(ctx, moved); err == nil || cfg.BearerToken != "" {
		t.Errorf("secrets opened on another row: %+v, %v", cfg, err)
	}
}

func TestConfigStoreImport(t *testing.T) {
	ctx := context.Background()
	cs, db := newConfigStore(t)
	old := mcp.ServerConfig{Name: "remote", Transport: mcp.TransportHTTP, URL: "https://example.com/mcp", Enabled: true,
		BearerToken: "stored-token", Headers: map[string]string{"X-Key": "stored-header"}}
	if err := cs.Save(ctx, &old); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []string{"", "  ", `{"mcpServers": {}}`, `{"mcpServers": {"new": {"url": "https://x.example/mcp", "headers": {"X-Key": "REDACTED"}}}}`,
		`{"mcpServers": {"remote": {"url": "https://example.com/mcp", "headers": {"Other": "REDACTED"}}}}`} {
		_, err := cs.Import(ctx, []byte(bad))
		if !errs.Is(err, errs.Invalid) || errs.Message(err) == "" {
			t.Errorf("import %q: %v, want errs.Invalid with a message", bad, err)
		}
	}
	// One bad server means nothing is written.
	_, err := cs.Import(ctx, []byte(`{"mcpServers": {"fine": {"command": "true"}, "broken": {"url": "https://x.example", "headers": {"A": "REDACTED"}}}}`))
	if !errs.Is(err, errs.Invalid) {
		t.Fatalf("import with a bad server: %v", err)
	}
	if rows, _ := db.ListMCPServers(ctx); len(rows) != 1 {
		t.Fatalf("a refused import wrote %d rows", len(rows))
	}

	cfgs, err := cs.Import(ctx, []byte(`{"mcpServers": {
		"Remote": {"url": "https://example.com/mcp2", "headers": {"X-Key": "REDACTED", "Authorization": "Bearer REDACTED"}},
		"local": {"command": "true", "disabled": true}}}`))
	if err != nil || len(cfgs) != 2 {
		t.Fatalf("import = %+v, %v", cfgs, err)
	}
	rows, _ := db.ListMCPServers(ctx)
	if len(rows) != 2 {
		t.Fatalf("%d rows after import, want the update by name and one new", len(rows))
	}
	for _, row := range rows {
		cfg, err := cs.Config(ctx, row)
		if err != nil {
			t.Fatal(err)
		}
		switch row.Name {
		case "remote":
			if row.ID != old.ID || cfg.URL != "https://example.com/mcp2" || cfg.BearerToken != "stored-token" || cfg.Headers["X-Key"] != "stored-header" {
				t.Errorf("remote after import = %+v", cfg)
			}
		case "local":
			if cfg.Enabled || cfg.Command != "true" {
				t.Errorf("local after import = %+v", cfg)
			}
		default:
			t.Errorf("unexpected row %q", row.Name)
		}
	}
}

func TestKeepRedacted(t *testing.T) {
	old := mcp.ServerConfig{Env: map[string]string{"A": "1"}, BearerToken: "t"}
	cfg := mcp.ServerConfig{Name: "s", Env: map[string]string{"A": mcp.RedactedValue, "B": "2"}, BearerToken: mcp.RedactedValue}
	if err := mcp.KeepRedacted(&cfg, old); err != nil || cfg.Env["A"] != "1" || cfg.Env["B"] != "2" || cfg.BearerToken != "t" {
		t.Fatalf("keep = %+v, %v", cfg, err)
	}
	cfg = mcp.ServerConfig{Name: "s", BearerToken: mcp.RedactedValue}
	if err := mcp.KeepRedacted(&cfg, mcp.ServerConfig{}); !errs.Is(err, errs.Invalid) {
		t.Errorf("a REDACTED token with none stored: %v", err)
	}
}
