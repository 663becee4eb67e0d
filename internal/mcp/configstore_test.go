package mcp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
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

// Credentials in a server's URL and arguments are secrets: sealed (not in the row's
// config), REDACTED in exports and on the form, kept when a REDACTED form or paste is
// saved, and redacted from status errors and logs.
func TestCredentialsInURLAndArgs(t *testing.T) {
	ctx := context.Background()
	cs, db := newConfigStore(t)
	const qKey, flagTok, eqKey, envKey = "SEKRET-q-1111", "SEKRET-t-2222", "SEKRET-k-3333", "SEKRET-e-4444"
	remote := mcp.ServerConfig{Name: "remote", Transport: mcp.TransportHTTP, Enabled: true,
		URL: "https://example.com/mcp?mode=fast&api_key=" + qKey + "#top"}
	local := mcp.ServerConfig{Name: "local", Transport: mcp.TransportStdio, Command: "server", Enabled: true,
		Args: []string{"--token", flagTok, "--api-key=" + eqKey, "GITHUB_TOKEN=" + envKey, "--verbose", "--keyboard", "plain"}}
	for _, c := range []*mcp.ServerConfig{&remote, &local} {
		if err := cs.Save(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	secrets := []string{qKey, flagTok, eqKey, envKey}
	rows, _ := db.ListMCPServers(ctx)
	for _, row := range rows {
		for _, s := range secrets {
			if bytes.Contains(row.Config, []byte(s)) || bytes.Contains(row.SecretsSealed, []byte(s)) {
				t.Errorf("row %s stores %s in clear: %s", row.Name, s, row.Config)
			}
		}
	}
	cfgs := listConfigs(t, cs, db)
	byName := map[string]mcp.ServerConfig{}
	for _, c := range cfgs {
		byName[c.Name] = c
	}
	if got := byName["remote"].URL; got != remote.URL {
		t.Errorf("URL back as %q", got)
	}
	if got := strings.Join(byName["local"].Args, " "); got != strings.Join(local.Args, " ") {
		t.Errorf("args back as %q", got)
	}
	for _, c := range cfgs {
		sec := strings.Join(c.Secrets(), " ")
		for _, s := range secrets {
			inCfg := strings.Contains(c.URL, s) || strings.Contains(strings.Join(c.Args, " "), s)
			if inCfg && !strings.Contains(sec, s) {
				t.Errorf("%s: %s is not among the secrets to redact", c.Name, s)
			}
		}
	}
	// Plain flags stay readable.
	u, args := mcp.RedactCredentials(byName["local"])
	if want := "--token REDACTED --api-key=REDACTED GITHUB_TOKEN=REDACTED --verbose --keyboard plain"; strings.Join(args, " ") != want || u != "" {
		t.Errorf("redacted args %q, want %q", strings.Join(args, " "), want)
	}

	exported, err := mcp.ExportServersJSON(cfgs, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if bytes.Contains(exported, []byte(s)) {
			t.Errorf("export holds %s:\n%s", s, exported)
		}
	}
	if !bytes.Contains(exported, []byte("api_key=REDACTED#top")) {
		t.Errorf("export does not mark the URL credential:\n%s", exported)
	}
	// Importing the REDACTED export keeps the stored credentials.
	if _, err := cs.Import(ctx, exported); err != nil {
		t.Fatal(err)
	}
	cfgs = listConfigs(t, cs, db)
	for _, c := range cfgs {
		if want := map[string]string{"remote": remote.URL, "local": strings.Join(local.Args, " ")}[c.Name]; c.URL != want && strings.Join(c.Args, " ") != want {
			t.Errorf("%s after a REDACTED import: url %q args %q", c.Name, c.URL, c.Args)
		}
	}
	// A REDACTED credential with nothing stored is refused, not saved as the word.
	fresh := `{"mcpServers":{"new":{"url":"https://example.com/mcp?token=REDACTED"}}}`
	if _, err := cs.Import(ctx, []byte(fresh)); err == nil || !strings.Contains(err.Error(), "REDACTED") {
		t.Errorf("import of an unknown REDACTED credential: %v", err)
	}
}

func listConfigs(t *testing.T, cs *mcp.ConfigStore, db *store.DB) []mcp.ServerConfig {
	t.Helper()
	rows, err := db.ListMCPServers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []mcp.ServerConfig
	for _, r := range rows {
		c, err := cs.Config(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestMarkedSecretArgs: an argument the admin marks secret is treated like a detected
// credential: sealed, among the secrets to redact, REDACTED in exports, and kept when
// a REDACTED export is imported again.
func TestMarkedSecretArgs(t *testing.T) {
	ctx := context.Background()
	cs, db := newConfigStore(t)
	const positional = "SEKRET-pos-5555"
	local := mcp.ServerConfig{Name: "local", Transport: mcp.TransportStdio, Command: "server", Enabled: true,
		Args: []string{"serve", positional, "--verbose"}, SecretArgs: []int{1}}
	if err := cs.Save(ctx, &local); err != nil {
		t.Fatal(err)
	}
	rows, _ := db.ListMCPServers(ctx)
	if bytes.Contains(rows[0].Config, []byte(positional)) {
		t.Fatalf("the marked argument is stored in clear: %s", rows[0].Config)
	}
	cfg := listConfigs(t, cs, db)[0]
	if strings.Join(cfg.Args, " ") != "serve "+positional+" --verbose" || len(cfg.SecretArgs) != 1 {
		t.Fatalf("back as %q, marked %v", cfg.Args, cfg.SecretArgs)
	}
	if !strings.Contains(strings.Join(cfg.Secrets(), " "), positional) {
		t.Error("the marked argument is not among the secrets to redact")
	}
	if _, args := mcp.RedactCredentials(cfg); strings.Join(args, " ") != "serve REDACTED --verbose" {
		t.Errorf("shown as %q", args)
	}
	exported, err := mcp.ExportServersJSON([]mcp.ServerConfig{cfg}, false)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(exported, []byte(positional)) || !bytes.Contains(exported, []byte(`"secretArgs"`)) {
		t.Fatalf("export:\n%s", exported)
	}
	if _, err := cs.Import(ctx, exported); err != nil {
		t.Fatal(err)
	}
	if cfg := listConfigs(t, cs, db)[0]; cfg.Args[1] != positional {
		t.Fatalf("after a REDACTED import: %q", cfg.Args)
	}
	bad := local
	bad.SecretArgs = []int{3}
	if err := bad.Validate(); err == nil {
		t.Error("a mark beyond the arguments was accepted")
	}
}
