package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/store"
)

// ConfigRows is what ConfigStore needs of the database.
type ConfigRows interface {
	ListMCPServers(ctx context.Context) ([]store.MCPServer, error)
	SaveMCPServer(ctx context.Context, s *store.MCPServer, seal func(id int64) ([]byte, error)) error
	DeleteMCPServer(ctx context.Context, id int64) error
}

// Sealer seals and opens secrets for an owner (owner 0 is the instance).
type Sealer interface {
	Prepare(ctx context.Context, owner int64) error
	Seal(ctx context.Context, owner int64, plaintext, ad []byte) ([]byte, error)
	Open(ctx context.Context, owner int64, sealed, ad []byte) ([]byte, error)
}

// ConfigStore keeps server configurations as store rows: the non-secret fields as
// JSON, the env values, header values and bearer token sealed. Safe for concurrent use.
type ConfigStore struct {
	Rows ConfigRows
	Keys Sealer
}

// configJSON is the non-secret part of a server, stored in MCPServer.Config.
type configJSON struct {
	Command        string   `json:"command,omitempty"`
	Args           []string `json:"args,omitempty"`
	Dir            string   `json:"dir,omitempty"`
	URL            string   `json:"url,omitempty"`
	AllowTools     []string `json:"allow_tools,omitempty"`
	DenyTools      []string `json:"deny_tools,omitempty"`
	CallTimeoutMS  int64    `json:"call_timeout_ms,omitempty"`
	Sandbox        bool     `json:"sandbox,omitempty"` // absent in servers saved before the sandbox: off
	ReadPaths      []string `json:"read_paths,omitempty"`
	WritePaths     []string `json:"write_paths,omitempty"`
	Network        bool     `json:"network,omitempty"`
	SecretArgs     []int    `json:"secret_args,omitempty"` // indexes of Args the admin marked secret (stored REDACTED)
	OAuthClientID  string   `json:"oauth_client_id,omitempty"`
	OAuthScopes    []string `json:"oauth_scopes,omitempty"`
	Roots          []string `json:"roots,omitempty"`
	SamplingAlways bool     `json:"sampling_always,omitempty"`
	ProgressMaxMS  int64    `json:"progress_max_ms,omitempty"`
}

// secretsJSON is sealed into MCPServer.SecretsSealed.
type secretsJSON struct {
	Env         map[string]string `json:"env,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	BearerToken string            `json:"bearer_token,omitempty"`
	Credentials map[string]string `json:"credentials,omitempty"` // of the URL and args, by slot (credentials.go)
	OAuthSecret string            `json:"oauth_client_secret,omitempty"`
}

// SecretsAD binds a server's sealed secrets to its row.
func SecretsAD(id int64) []byte {
	return crypto.AD("mcp_server", strconv.FormatInt(id, 10), "secrets")
}

// Row maps cfg to its row, without the secrets (Seal adds them once the row has an
// id, which the sealing is bound to): credentials in the URL and arguments are
// stored as REDACTED.
func Row(cfg ServerConfig) store.MCPServer {
	u, args, _ := splitCredentials(cfg)
	c := configJSON{Command: cfg.Command, Args: args, Dir: cfg.Dir, URL: u,
		AllowTools: cfg.AllowTools, DenyTools: cfg.DenyTools, CallTimeoutMS: cfg.CallTimeout.Milliseconds(),
		Sandbox: cfg.Sandbox, ReadPaths: cfg.ReadPaths, WritePaths: cfg.WritePaths, Network: cfg.Network,
		OAuthClientID: cfg.OAuthClientID, OAuthScopes: cfg.OAuthScopes, SecretArgs: cfg.SecretArgs,
		Roots: cfg.Roots, SamplingAlways: cfg.SamplingAlways, ProgressMaxMS: cfg.ProgressMax.Milliseconds()}
	b, _ := json.Marshal(c) // cannot fail: strings and numbers
	return store.MCPServer{ID: cfg.ID, Name: cfg.Name, Transport: string(cfg.Transport), Config: b, Enabled: cfg.Enabled}
}

// Seal seals cfg's env, headers and token into row, bound to row.ID (nil when there
// are none).
func (cs *ConfigStore) Seal(ctx context.Context, row *store.MCPServer, cfg ServerConfig) error {
	_, _, creds := splitCredentials(cfg)
	sec := secretsJSON{Env: cfg.Env, Headers: cfg.Headers, BearerToken: cfg.BearerToken, OAuthSecret: cfg.OAuthClientSecret}
	if len(creds) > 0 {
		sec.Credentials = creds
	}
	if len(sec.Env) == 0 && len(sec.Headers) == 0 && sec.BearerToken == "" && len(creds) == 0 && sec.OAuthSecret == "" {
		row.SecretsSealed = nil
		return nil
	}
	plain, err := json.Marshal(sec)
	if err != nil {
		return fmt.Errorf("mcp: secrets: %w", err)
	}
	sealed, err := cs.Keys.Seal(ctx, 0, plain, SecretsAD(row.ID))
	if err != nil {
		return err
	}
	row.SecretsSealed = sealed
	return nil
}

// StoredInClear reports whether row keeps credentials of its URL or arguments in its
// plain config (saved before they were sealed); saving its config again seals them.
func StoredInClear(row store.MCPServer) bool {
	var c configJSON
	if json.Unmarshal(row.Config, &c) != nil {
		return false
	}
	for _, v := range credentialValues(ServerConfig{URL: c.URL, Args: c.Args, SecretArgs: c.SecretArgs}) {
		if v != RedactedValue {
			return true
		}
	}
	return false
}

// Config maps a row back to a config, opening its secrets. A config error is
// returned with the config built so far; an unreadable seal returns the config
// without secrets and an error.
func (cs *ConfigStore) Config(ctx context.Context, row store.MCPServer) (ServerConfig, error) {
	cfg := ServerConfig{ID: row.ID, Name: row.Name, Transport: Transport(row.Transport), Enabled: row.Enabled}
	var c configJSON
	if len(row.Config) > 0 {
		if err := json.Unmarshal(row.Config, &c); err != nil {
			return cfg, fmt.Errorf("mcp: server %q config: %w", row.Name, err)
		}
	}
	cfg.Command, cfg.Args, cfg.Dir, cfg.URL = c.Command, c.Args, c.Dir, c.URL
	cfg.AllowTools, cfg.DenyTools = c.AllowTools, c.DenyTools
	cfg.CallTimeout = time.Duration(c.CallTimeoutMS) * time.Millisecond
	cfg.Sandbox, cfg.ReadPaths, cfg.WritePaths, cfg.Network = c.Sandbox, c.ReadPaths, c.WritePaths, c.Network
	cfg.OAuthClientID, cfg.OAuthScopes, cfg.SecretArgs = c.OAuthClientID, c.OAuthScopes, c.SecretArgs
	cfg.Roots, cfg.SamplingAlways = c.Roots, c.SamplingAlways
	cfg.ProgressMax = time.Duration(c.ProgressMaxMS) * time.Millisecond
	if len(row.SecretsSealed) == 0 {
		return cfg, nil
	}
	plain, err := cs.Keys.Open(ctx, 0, row.SecretsSealed, SecretsAD(row.ID))
	if err != nil {
		return cfg, fmt.Errorf("mcp: server %q secrets: %w", row.Name, err)
	}
	var sec secretsJSON
	if err := json.Unmarshal(plain, &sec); err != nil {
		return cfg, fmt.Errorf("mcp: server %q secrets: %w", row.Name, err)
	}
	cfg.Env, cfg.Headers, cfg.BearerToken, cfg.OAuthClientSecret = sec.Env, sec.Headers, sec.BearerToken, sec.OAuthSecret
	cfg.URL, cfg.Args, _ = fillCredentials(cfg.URL, cfg.Args, cfg.SecretArgs, sec.Credentials)
	return cfg, nil
}

// Save creates (cfg.ID == 0, then cfg.ID is set) or updates the row of cfg, secrets
// sealed. A new row whose secrets cannot be sealed is removed again.
func (cs *ConfigStore) Save(ctx context.Context, cfg *ServerConfig) error {
	row := Row(*cfg)
	// Secrets are sealed inside the store's transaction: have the data key ready first.
	if err := cs.Keys.Prepare(ctx, 0); err != nil {
		return err
	}
	err := cs.Rows.SaveMCPServer(ctx, &row, func(id int64) ([]byte, error) {
		r := store.MCPServer{ID: id}
		if err := cs.Seal(ctx, &r, *cfg); err != nil {
			return nil, err
		}
		return r.SecretsSealed, nil
	})
	if err != nil {
		return err
	}
	cfg.ID = row.ID
	return nil
}

// Import creates or updates servers by name (case insensitive) from an mcpServers
// JSON and returns them as saved. Every server is checked before anything is
// written; a REDACTED value keeps the stored secret of the server with the same
// name. Errors a user can fix are errs.Invalid.
func (cs *ConfigStore) Import(ctx context.Context, data []byte) ([]ServerConfig, error) {
	if strings.TrimSpace(string(data)) == "" {
		return nil, errs.E(errs.Invalid, "Paste an mcpServers JSON object first.")
	}
	cfgs, err := ParseServersJSON(data)
	if err != nil {
		if errs.Code(err) == errs.Internal {
			err = errs.Wrap(errs.Invalid, err, "%s", err.Error())
		}
		return nil, err
	}
	if len(cfgs) == 0 {
		return nil, errs.E(errs.Invalid, "The JSON has no servers under \"mcpServers\".")
	}
	rows, err := cs.Rows.ListMCPServers(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]store.MCPServer{}
	for _, r := range rows {
		byName[strings.ToLower(r.Name)] = r
	}
	for i := range cfgs {
		cfg := &cfgs[i]
		cfg.ID = 0 // Enabled comes from the paste ("disabled": true)
		var old ServerConfig
		if r, ok := byName[strings.ToLower(cfg.Name)]; ok {
			if o, oerr := cs.Config(ctx, r); oerr == nil {
				old = o
			}
			cfg.ID = r.ID
		}
		if err := KeepRedacted(cfg, old); err != nil {
			return nil, err
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	for i := range cfgs {
		if err := cs.Save(ctx, &cfgs[i]); err != nil {
			return nil, err
		}
	}
	return cfgs, nil
}

// KeepRedacted replaces REDACTED secret values in cfg by old's (same key). A
// REDACTED value with nothing stored is an error: it would become the literal word.
func KeepRedacted(cfg *ServerConfig, old ServerConfig) error {
	fix := func(m, stored map[string]string, what string) error {
		for k, v := range m {
			if v != RedactedValue {
				continue
			}
			sv, ok := stored[k]
			if !ok {
				return errs.E(errs.Invalid, "Server %q: %s %s is REDACTED and no stored value exists; enter the value.", cfg.Name, what, k)
			}
			m[k] = sv
		}
		return nil
	}
	if err := fix(cfg.Env, old.Env, "the environment variable"); err != nil {
		return err
	}
	if err := fix(cfg.Headers, old.Headers, "the header"); err != nil {
		return err
	}
	_, _, slots := splitCredentials(old)
	var missing string
	if cfg.URL, cfg.Args, missing = fillCredentials(cfg.URL, cfg.Args, cfg.SecretArgs, slots); missing != "" {
		where := "the URL"
		if strings.HasPrefix(missing, "arg:") {
			where = "the arguments"
		}
		return errs.E(errs.Invalid, "Server %q: a credential in %s is REDACTED and no stored value exists; enter it.", cfg.Name, where)
	}
	if cfg.OAuthClientSecret == RedactedValue {
		if old.OAuthClientSecret == "" {
			return errs.E(errs.Invalid, "Server %q: the OAuth client secret is REDACTED and no stored secret exists; enter it.", cfg.Name)
		}
		cfg.OAuthClientSecret = old.OAuthClientSecret
	}
	if cfg.BearerToken == RedactedValue {
		if old.BearerToken == "" {
			return errs.E(errs.Invalid, "Server %q: the bearer token is REDACTED and no stored token exists; enter it.", cfg.Name)
		}
		cfg.BearerToken = old.BearerToken
	}
	return nil
}
