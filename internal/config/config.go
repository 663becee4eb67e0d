// Package config reads Atrium's settings from command-line flags and ATRIUM_*
// environment variables. A flag overrides its environment variable, which overrides
// the default. There are no globals: Load takes the arguments and the environment.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config is the whole of Atrium's start-up configuration. Load returns it validated.
type Config struct {
	Addr              string        // listen address, host:port; ATRIUM_ADDR, -addr
	DataDir           string        // data directory (database, key file); ATRIUM_DATA, -data
	MasterKey         string        // "" = use the key file in DataDir; ATRIUM_MASTER_KEY, -master-key. Secret.
	MasterKeyFile     string        // a file holding the master key (a Docker secret); ATRIUM_MASTER_KEY_FILE, -master-key-file
	LogLevel          slog.Level    // ATRIUM_LOG_LEVEL, -log-level
	BaseURL           string        // public origin behind a proxy, "scheme://host[:port]" with no trailing slash; "" = derive from requests
	MaxMessageBytes   int           // largest chat message accepted, 1..10 MiB
	ModelStartTimeout time.Duration // how long to wait for a model's first byte
	ModelIdleTimeout  time.Duration // how long a model stream may stay silent
	ContextWindow     int           // the models' context window in tokens, for the context budgets
	LoginTTL          time.Duration // lifetime of a login cookie session
	ShutdownTimeout   time.Duration // grace period for in-flight work on shutdown
	MemoryExtraction  bool          // after each reply, ask the chat's model what is worth remembering
	GenerateTitles    bool          // after a chat's first reply, ask its model for a title
	// Trace retention: runs older than RunsKeepDays, then the oldest while the trace
	// is over RunsMaxMB, are pruned hourly; pinned runs are kept. 0 = no bound.
	RunsKeepDays, RunsMaxMB int
	// Prometheus /metrics, off unless one is set: on a separate listen address
	// (MetricsAddr) and/or on the main one behind a bearer token (MetricsToken, secret).
	MetricsAddr, MetricsToken string
	// An OpenAI-compatible embeddings endpoint for memory ("" = the offline embedder).
	EmbeddingsURL, EmbeddingsModel string
	EmbeddingsKey                  string // secret
	EmbeddingsDimensions           int    // asked of the model when > 0; at most 4096 (memory.MaxDims)
	// Reverse proxies whose X-Forwarded-For is believed for the client address (rate
	// limits, logs); ATRIUM_TRUSTED_PROXIES, comma-separated CIDRs or addresses.
	TrustedProxies []netip.Prefix
}

// LogValue keeps the master key out of logs: slog.Info("config", "config", cfg) is safe.
func (c Config) LogValue() slog.Value {
	key := "key file"
	switch {
	case c.MasterKey != "":
		key = "set (redacted)"
	case c.MasterKeyFile != "":
		key = "from " + c.MasterKeyFile
	}
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("data", c.DataDir),
		slog.String("master_key", key),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("base_url", c.BaseURL),
		slog.Int("max_message_bytes", c.MaxMessageBytes),
		slog.Duration("model_start_timeout", c.ModelStartTimeout),
		slog.Duration("model_idle_timeout", c.ModelIdleTimeout),
		slog.Int("context_window", c.ContextWindow),
		slog.Duration("login_ttl", c.LoginTTL),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Bool("memory_extraction", c.MemoryExtraction),
		slog.Bool("generate_titles", c.GenerateTitles),
		slog.Int("runs_keep_days", c.RunsKeepDays),
		slog.Int("runs_max_mb", c.RunsMaxMB),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.Bool("metrics_token", c.MetricsToken != ""),
		slog.String("embeddings_url", c.EmbeddingsURL),
		slog.String("embeddings_model", c.EmbeddingsModel),
		slog.Any("trusted_proxies", c.TrustedProxies),
	)
}

// MaxPromptBytes is the largest message the agent takes: what the user typed
// (MaxMessageBytes) plus the MCP resources attached to it, which may add up to three
// times as much again.
func (c Config) MaxPromptBytes() int { return 4 * c.MaxMessageBytes }

// MaxMessageBytesLimit is the largest value MaxMessageBytes may take (10 MiB).
const MaxMessageBytesLimit = 10 << 20

// setting describes one configuration value. The table below drives flag
// definitions, environment lookups, validation and the usage text, so they cannot
// drift apart.
type setting struct {
	flag, env, def string
	arg, help      string
	// secret values are never shown in usage or errors.
	secret bool
	// set parses v into c; its error is the reason only (Load adds the name).
	set func(c *Config, v string) error
}

var settings = []setting{
	{flag: "addr", env: "ATRIUM_ADDR", def: ":8080", arg: "host:port",
		help: "address to listen on",
		set: func(c *Config, v string) error {
			if err := checkAddr(v); err != nil {
				return err
			}
			c.Addr = v
			return nil
		}},
	{flag: "data", env: "ATRIUM_DATA", def: "./atrium-data", arg: "dir",
		help: "data directory (database and key file)",
		set: func(c *Config, v string) error {
			if strings.TrimSpace(v) == "" {
				return errors.New("must not be empty")
			}
			c.DataDir = v
			return nil
		}},
	{flag: "master-key", env: "ATRIUM_MASTER_KEY", def: "", arg: "key", secret: true,
		help: "master key; empty = a key file in the data directory. Prefer the env variable: flags are visible in ps",
		set: func(c *Config, v string) error {
			c.MasterKey = v
			return nil
		}},
	{flag: "master-key-file", env: "ATRIUM_MASTER_KEY_FILE", def: "", arg: "path",
		help: "file holding the master key (as 64 hex characters or base64), e.g. a Docker secret /run/secrets/atrium_master_key; keeps the key out of docker inspect",
		set: func(c *Config, v string) error {
			c.MasterKeyFile = v
			return nil
		}},
	{flag: "log-level", env: "ATRIUM_LOG_LEVEL", def: "info", arg: "level",
		help: "log level: debug, info, warn or error",
		set: func(c *Config, v string) error {
			l, ok := levels[strings.ToLower(v)]
			if !ok {
				return fmt.Errorf("%q is not a log level (use debug, info, warn or error)", v)
			}
			c.LogLevel = l
			return nil
		}},
	{flag: "base-url", env: "ATRIUM_BASE_URL", def: "", arg: "url",
		help: "public URL when behind a proxy, e.g. https://atrium.example.com; empty = derive from requests",
		set: func(c *Config, v string) error {
			u, err := checkBaseURL(v)
			if err != nil {
				return err
			}
			c.BaseURL = u
			return nil
		}},
	{flag: "max-message-bytes", env: "ATRIUM_MAX_MESSAGE_BYTES", def: "102400", arg: "n",
		help: "largest chat message accepted, in bytes (1 to 10485760)",
		set:  intInto(1, MaxMessageBytesLimit, func(c *Config) *int { return &c.MaxMessageBytes })},
	{flag: "context-window", env: "ATRIUM_CONTEXT_WINDOW", def: "32768", arg: "tokens",
		help: "the context window in tokens (2048 to 2000000) of models without their own (Settings → Providers: name window=N, or reported by the endpoint)",
		set:  intInto(2048, 2_000_000, func(c *Config) *int { return &c.ContextWindow })},
	{flag: "model-start-timeout", env: "ATRIUM_MODEL_START_TIMEOUT", def: "60s", arg: "duration",
		help: "how long to wait for a model's first response",
		set:  durationInto(func(c *Config) *time.Duration { return &c.ModelStartTimeout })},
	{flag: "model-idle-timeout", env: "ATRIUM_MODEL_IDLE_TIMEOUT", def: "60s", arg: "duration",
		help: "how long a model's stream may stay silent",
		set:  durationInto(func(c *Config) *time.Duration { return &c.ModelIdleTimeout })},
	{flag: "login-ttl", env: "ATRIUM_LOGIN_TTL", def: "720h", arg: "duration",
		help: "how long a login lasts",
		set:  durationInto(func(c *Config) *time.Duration { return &c.LoginTTL })},
	{flag: "generate-titles", env: "ATRIUM_GENERATE_TITLES", def: "true", arg: "bool",
		help: "after a chat's first reply, ask its model for a short title (one more model call per chat); off: the first line of the first message",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not true or false", v)
			}
			c.GenerateTitles = b
			return nil
		}},
	{flag: "memory-extract", env: "ATRIUM_MEMORY_EXTRACT", def: "true", arg: "bool",
		help: "after each reply, ask the chat's model what the user's message holds that is worth remembering (one more model call per reply)",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not true or false", v)
			}
			c.MemoryExtraction = b
			return nil
		}},
	{flag: "runs-keep-days", env: "ATRIUM_RUNS_KEEP_DAYS", def: "30", arg: "days",
		help: "keep recorded runs (the call-chain traces) this many days, pinned runs for ever (0 = no age limit, at most 36500)",
		set:  intInto(0, 36500, func(c *Config) *int { return &c.RunsKeepDays })},
	{flag: "runs-max-mb", env: "ATRIUM_RUNS_MAX_MB", def: "256", arg: "MB",
		help: "keep at most this many MB of recorded runs, pruning the oldest unpinned first (0 = no size limit)",
		set:  intInto(0, 1<<30, func(c *Config) *int { return &c.RunsMaxMB })},
	{flag: "metrics-addr", env: "ATRIUM_METRICS_ADDR", def: "", arg: "host:port",
		help: "serve Prometheus /metrics on this separate address, e.g. 127.0.0.1:9090 (with -metrics-token, that is asked there too); empty = not on a separate address",
		set: func(c *Config, v string) error {
			if v != "" {
				if err := checkAddr(v); err != nil {
					return err
				}
			}
			c.MetricsAddr = v
			return nil
		}},
	{flag: "metrics-token", env: "ATRIUM_METRICS_TOKEN", def: "", arg: "token", secret: true,
		help: "serve Prometheus /metrics on the main address to requests with Authorization: Bearer <token> (at least 16 characters; prefer the env variable); empty = not on the main address",
		set: func(c *Config, v string) error {
			if v != "" && len(v) < 16 {
				return errors.New("must be at least 16 characters")
			}
			c.MetricsToken = v
			return nil
		}},
	{flag: "embeddings-url", env: "ATRIUM_EMBEDDINGS_URL", def: "", arg: "url",
		help: "OpenAI-compatible embeddings endpoint for memory search, e.g. http://localhost:11434/v1; empty = the built-in offline embedder. The embeddings settings are defaults: once an admin saves Settings → Memories, the saved ones win",
		set: func(c *Config, v string) error {
			if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
				return fmt.Errorf("%q is not an http(s) URL", v)
			}
			c.EmbeddingsURL = strings.TrimSuffix(v, "/")
			return nil
		}},
	{flag: "embeddings-model", env: "ATRIUM_EMBEDDINGS_MODEL", def: "", arg: "name",
		help: "embedding model at the embeddings endpoint, e.g. all-minilm or text-embedding-3-small",
		set: func(c *Config, v string) error {
			c.EmbeddingsModel = v
			return nil
		}},
	{flag: "embeddings-key", env: "ATRIUM_EMBEDDINGS_KEY", def: "", arg: "key", secret: true,
		help: "API key for the embeddings endpoint (prefer the env variable)",
		set: func(c *Config, v string) error {
			c.EmbeddingsKey = v
			return nil
		}},
	{flag: "embeddings-dimensions", env: "ATRIUM_EMBEDDINGS_DIMENSIONS", def: "0", arg: "n",
		help: "vector width to ask the embedding model for (0 = its own; memory vectors hold at most 4096)",
		set:  intInto(0, 4096, func(c *Config) *int { return &c.EmbeddingsDimensions })},
	{flag: "trusted-proxies", env: "ATRIUM_TRUSTED_PROXIES", def: "", arg: "cidrs",
		help: "reverse proxies allowed to give the client address in X-Forwarded-For, comma-separated CIDRs or addresses, e.g. 127.0.0.1,10.0.0.0/8; empty = trust none",
		set: func(c *Config, v string) error {
			ps, err := parseCIDRs(v)
			if err != nil {
				return err
			}
			c.TrustedProxies = ps
			return nil
		}},
	{flag: "shutdown-timeout", env: "ATRIUM_SHUTDOWN_TIMEOUT", def: "10s", arg: "duration",
		help: "how long to let running work finish on shutdown",
		set:  durationInto(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
}

var levels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// rawValue records a flag's text; validation happens later, with the same code as
// for the environment, so that Set never fails inside the flag package.
type rawValue struct {
	v   string
	set bool
}

func (r *rawValue) String() string     { return r.v }
func (r *rawValue) Set(v string) error { r.v, r.set = v, true; return nil }

// Load builds a Config from args (the command-line arguments without the program
// name, e.g. os.Args[1:]) and getenv (e.g. os.Getenv; an empty value counts as
// unset). For each setting a flag wins over its environment variable, which wins
// over the default.
//
// With -h or -help it writes the usage text to usage and returns flag.ErrHelp.
// Any other failure (unknown flag, stray argument, bad value) is an error whose
// text is one line naming the setting and the reason; the caller should print it
// and exit with status 2. The master key never appears in an error.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	fs := flag.NewFlagSet("atrium", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	raws := make([]rawValue, len(settings))
	for i, s := range settings {
		fs.Var(&raws[i], s.flag, s.help)
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(usage)
			return Config{}, flag.ErrHelp
		}
		return Config{}, flagError(err)
	}
	if rest := fs.Args(); len(rest) > 0 {
		if raws[indexOf("master-key")].set {
			// A missing or empty -master-key value can push the key itself here.
			return Config{}, errors.New("config: unexpected argument after the flags (not shown because -master-key is set)")
		}
		return Config{}, fmt.Errorf("config: unexpected argument %q (all settings are -flags; see -help)", rest[0])
	}

	var c Config
	for i, s := range settings {
		name, v := "", s.def
		switch {
		case raws[i].set:
			name, v = "-"+s.flag, raws[i].v
		case getenv(s.env) != "":
			name, v = s.env, getenv(s.env)
		}
		if err := s.set(&c, v); err != nil {
			if name == "" {
				panic(fmt.Sprintf("config: default for -%s is invalid: %v", s.flag, err))
			}
			if s.secret {
				return Config{}, fmt.Errorf("config: %s is invalid", name)
			}
			return Config{}, fmt.Errorf("config: %s: %v", name, err)
		}
	}
	if c.MasterKey != "" && c.MasterKeyFile != "" {
		return Config{}, errors.New("config: ATRIUM_MASTER_KEY and ATRIUM_MASTER_KEY_FILE are both set: set one of them")
	}
	if (c.EmbeddingsURL == "") != (c.EmbeddingsModel == "") {
		return Config{}, errors.New("config: ATRIUM_EMBEDDINGS_URL and ATRIUM_EMBEDDINGS_MODEL go together: set both or neither")
	}
	return c, nil
}

func indexOf(flagName string) int {
	for i, s := range settings {
		if s.flag == flagName {
			return i
		}
	}
	panic("config: no flag " + flagName)
}

// flagError turns the flag package's messages into the one-line "config: ..." form.
// "bad flag syntax" echoes the whole argument, which may hold a secret, so it is
// not repeated.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return fmt.Errorf("config: %s: unknown flag (see -help)", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Errorf("config: %s: needs a value", name)
	}
	if strings.HasPrefix(msg, "bad flag syntax") {
		return errors.New("config: bad flag syntax (flags look like -name=value; see -help)")
	}
	return errors.New("config: " + strings.ReplaceAll(msg, "\n", " "))
}

// intInto parses an integer in [lo, hi] into the field.
func intInto(lo, hi int, field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		if n < lo || n > hi {
			return fmt.Errorf("%d is out of range (%d to %d)", n, lo, hi)
		}
		*field(c) = n
		return nil
	}
}

func durationInto(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (use e.g. 90s, 5m or 720h)", v)
		}
		if d <= 0 {
			return fmt.Errorf("%q must be more than zero", v)
		}
		*field(c) = d
		return nil
	}
}

func checkAddr(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. :8080 or 127.0.0.1:8080)", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q has no valid port number (0 to 65535)", v)
	}
	return nil
}

// parseCIDRs parses a comma-separated list of CIDRs and bare addresses (a bare address
// is a one-address prefix). Empty entries are skipped.
func parseCIDRs(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8) or an IP address", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// checkBaseURL accepts "" or an absolute http(s) URL with a host and nothing after
// it but an optional "/"; Atrium is served from the root of its origin. It returns
// the URL without the trailing slash.
func checkBaseURL(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("%q is not a URL", v)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q must start with http:// or https://", v)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%q has no host", v)
	case u.User != nil:
		return "", fmt.Errorf("%q must not contain a user name or password", v)
	case u.RawQuery != "" || u.ForceQuery:
		return "", fmt.Errorf("%q must not have a query", v)
	case u.Fragment != "" || strings.Contains(v, "#"):
		return "", fmt.Errorf("%q must not have a fragment", v)
	case u.Path != "" && u.Path != "/":
		return "", fmt.Errorf("%q must not have a path (Atrium is served at the root of its host)", v)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%q has no valid port number", v)
		}
	}
	return u.Scheme + "://" + u.Host, nil
}

func writeUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: atrium [flags]
       atrium backup [-data DIR] FILE|-     consistent copy of the database, also while Atrium runs
       atrium restore [-data DIR] [-key MASTER_KEY] FILE   into a new, empty data directory
       atrium version | atrium healthcheck

Atrium is a self-hosted AI agent. Every setting is a flag or an environment
variable; a flag overrides its variable, which overrides the default.

Flags:
`)
	fw, ew := 0, 0
	for _, s := range settings {
		fw = max(fw, len(s.flag)+len(s.arg)+2)
		ew = max(ew, len(s.env))
	}
	for _, s := range settings {
		def := "(empty)"
		if s.def != "" {
			def = s.def
		}
		fmt.Fprintf(w, "  %-*s  %-*s  default %s\n", fw, "-"+s.flag+" "+s.arg, ew, s.env, def)
		fmt.Fprintf(w, "      %s\n", s.help)
	}
	fmt.Fprint(w, "  -h, -help\n      show this help\n")
}
