package config_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"atrium/internal/config"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

var defaults = config.Config{
	Addr:              ":8080",
	DataDir:           "./atrium-data",
	MasterKey:         "",
	LogLevel:          slog.LevelInfo,
	BaseURL:           "",
	MaxMessageBytes:   102400,
	ModelStartTimeout: 60 * time.Second,
	ModelIdleTimeout:  60 * time.Second,
	ContextWindow:     32768,
	LoginTTL:          720 * time.Hour,
	ShutdownTimeout:   10 * time.Second,
	MemoryExtraction:  true,
	GenerateTitles:    true,
	RunsKeepDays:      30,
	RunsMaxMB:         256,
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
		want   func(c *config.Config)
	}{
		{"defaults", nil, env(), func(c *config.Config) {}},
		{"env", nil, env(
			"ATRIUM_ADDR", "127.0.0.1:9000",
			"ATRIUM_DATA", "/data",
			"ATRIUM_MASTER_KEY", "k3y",
			"ATRIUM_LOG_LEVEL", "DEBUG",
			"ATRIUM_BASE_URL", "https://atrium.example.com/",
			"ATRIUM_MAX_MESSAGE_BYTES", "10485760",
			"ATRIUM_MODEL_START_TIMEOUT", "90s",
			"ATRIUM_MODEL_IDLE_TIMEOUT", "2m",
			"ATRIUM_CONTEXT_WINDOW", "8192",
			"ATRIUM_LOGIN_TTL", "24h",
			"ATRIUM_SHUTDOWN_TIMEOUT", "1s",
			"ATRIUM_MEMORY_EXTRACT", "false",
			"ATRIUM_GENERATE_TITLES", "false",
			"ATRIUM_RUNS_KEEP_DAYS", "7",
			"ATRIUM_RUNS_MAX_MB", "0",
		), func(c *config.Config) {
			*c = config.Config{
				Addr: "127.0.0.1:9000", DataDir: "/data", MasterKey: "k3y", LogLevel: slog.LevelDebug,
				BaseURL: "https://atrium.example.com", MaxMessageBytes: 10485760,
				ModelStartTimeout: 90 * time.Second, ModelIdleTimeout: 2 * time.Minute, ContextWindow: 8192,
				LoginTTL: 24 * time.Hour, ShutdownTimeout: time.Second, RunsKeepDays: 7,
			}
		}},
		{"flags", []string{
			"-addr", ":0", "-data=/tmp/x", "--master-key", "flagkey", "-log-level", "error",
			"-base-url", "http://localhost:8080", "-max-message-bytes", "1",
			"-model-start-timeout", "5s", "-model-idle-timeout", "6s", "-login-ttl", "1h", "-shutdown-timeout", "3s",
			"-context-window", "128000", "-memory-extract=false", "-generate-titles=0", "-runs-keep-days", "0", "-runs-max-mb", "1024",
		}, env(), func(c *config.Config) {
			*c = config.Config{
				Addr: ":0", DataDir: "/tmp/x", MasterKey: "flagkey", LogLevel: slog.LevelError,
				BaseURL: "http://localhost:8080", MaxMessageBytes: 1,
				ModelStartTimeout: 5 * time.Second, ModelIdleTimeout: 6 * time.Second, ContextWindow: 128000,
				LoginTTL: time.Hour, ShutdownTimeout: 3 * time.Second, RunsMaxMB: 1024,
			}
		}},
		{"flag beats env", []string{"-addr", ":7000", "-log-level", "warn"},
			env("ATRIUM_ADDR", ":9000", "ATRIUM_LOG_LEVEL", "debug", "ATRIUM_DATA", "/env"),
			func(c *config.Config) { c.Addr, c.LogLevel, c.DataDir = ":7000", slog.LevelWarn, "/env" }},
		{"flag beats a bad env value", []string{"-max-message-bytes", "5"},
			env("ATRIUM_MAX_MESSAGE_BYTES", "abc"),
			func(c *config.Config) { c.MaxMessageBytes = 5 }},
		{"empty env is unset", nil, env("ATRIUM_ADDR", "", "ATRIUM_LOGIN_TTL", ""),
			func(c *config.Config) {}},
		{"empty base-url flag clears env", []string{"-base-url="}, env("ATRIUM_BASE_URL", "https://a.example"),
			func(c *config.Config) { c.BaseURL = "" }},
		{"base url with port", nil, env("ATRIUM_BASE_URL", "http://[::1]:8080"),
			func(c *config.Config) { c.BaseURL = "http://[::1]:8080" }},
		{"trusted proxies", nil, env("ATRIUM_TRUSTED_PROXIES", " 10.0.0.0/8, 127.0.0.1,::1 ,192.168.1.7/16"),
			func(c *config.Config) {
				c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"),
					netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("192.168.0.0/16")}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := defaults
			tt.want(&want)
			got, err := config.Load(tt.args, tt.getenv, io.Discard)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Load =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	const secret = "s3cret-master-key"
	tests := []struct {
		name    string
		args    []string
		getenv  func(string) string
		wantErr string
	}{
		{"key and key file", nil, env("ATRIUM_MASTER_KEY", secret, "ATRIUM_MASTER_KEY_FILE", "/run/secrets/k"),
			"config: ATRIUM_MASTER_KEY and ATRIUM_MASTER_KEY_FILE are both set: set one of them"},
		{"bad trusted proxy", nil, env("ATRIUM_TRUSTED_PROXIES", "10.0.0.0/8,proxy.local"),
			`config: ATRIUM_TRUSTED_PROXIES: "proxy.local" is not a CIDR (e.g. 10.0.0.0/8) or an IP address`},
		{"env not a number", nil, env("ATRIUM_MAX_MESSAGE_BYTES", "abc"),
			`config: ATRIUM_MAX_MESSAGE_BYTES: "abc" is not a number`},
		{"flag not a number", []string{"-max-message-bytes", "1e3"}, env(),
			`config: -max-message-bytes: "1e3" is not a number`},
		{"size zero", nil, env("ATRIUM_MAX_MESSAGE_BYTES", "0"),
			`config: ATRIUM_MAX_MESSAGE_BYTES: 0 is out of range (1 to 10485760)`},
		{"size too big", nil, env("ATRIUM_MAX_MESSAGE_BYTES", "10485761"),
			`config: ATRIUM_MAX_MESSAGE_BYTES: 10485761 is out of range (1 to 10485760)`},
		{"context window too small", nil, env("ATRIUM_CONTEXT_WINDOW", "1000"),
			`config: ATRIUM_CONTEXT_WINDOW: 1000 is out of range (2048 to 2000000)`},
		{"duration without unit", nil, env("ATRIUM_MODEL_START_TIMEOUT", "60"),
			`config: ATRIUM_MODEL_START_TIMEOUT: "60" is not a duration (use e.g. 90s, 5m or 720h)`},
		{"duration garbage", nil, env("ATRIUM_MODEL_IDLE_TIMEOUT", "soon"),
			`config: ATRIUM_MODEL_IDLE_TIMEOUT: "soon" is not a duration (use e.g. 90s, 5m or 720h)`},
		{"duration zero", nil, env("ATRIUM_LOGIN_TTL", "0s"),
			`config: ATRIUM_LOGIN_TTL: "0s" must be more than zero`},
		{"duration negative flag", []string{"-shutdown-timeout=-1s"}, env(),
			`config: -shutdown-timeout: "-1s" must be more than zero`},
		{"level", nil, env("ATRIUM_LOG_LEVEL", "verbose"),
			`config: ATRIUM_LOG_LEVEL: "verbose" is not a log level (use debug, info, warn or error)`},
		{"addr no port", nil, env("ATRIUM_ADDR", "localhost"),
			`config: ATRIUM_ADDR: "localhost" is not host:port (e.g. :8080 or 127.0.0.1:8080)`},
		{"addr bad port", []string{"-addr", ":http"}, env(),
			`config: -addr: ":http" has no valid port number (0 to 65535)`},
		{"addr empty flag", []string{"-addr="}, env(),
			`config: -addr: "" is not host:port (e.g. :8080 or 127.0.0.1:8080)`},
		{"data empty flag", []string{"-data", ""}, env(),
			`config: -data: must not be empty`},
		{"url relative", nil, env("ATRIUM_BASE_URL", "atrium.example.com"),
			`config: ATRIUM_BASE_URL: "atrium.example.com" must start with http:// or https://`},
		{"url scheme", nil, env("ATRIUM_BASE_URL", "ftp://atrium.example.com"),
			`config: ATRIUM_BASE_URL: "ftp://atrium.example.com" must start with http:// or https://`},
		{"url no host", nil, env("ATRIUM_BASE_URL", "https:///x"),
			`config: ATRIUM_BASE_URL: "https:///x" has no host`},
		{"url query", nil, env("ATRIUM_BASE_URL", "https://a.example/?x=1"),
			`config: ATRIUM_BASE_URL: "https://a.example/?x=1" must not have a query`},
		{"url fragment", nil, env("ATRIUM_BASE_URL", "https://a.example/#x"),
			`config: ATRIUM_BASE_URL: "https://a.example/#x" must not have a fragment`},
		{"url path", []string{"-base-url", "https://a.example/atrium"}, env(),
			`config: -base-url: "https://a.example/atrium" must not have a path (Atrium is served at the root of its host)`},
		{"url user", nil, env("ATRIUM_BASE_URL", "https://u:p@a.example"),
			`config: ATRIUM_BASE_URL: "https://u:p@a.example" must not contain a user name or password`},
		{"url unparsable", nil, env("ATRIUM_BASE_URL", "http://a b\n"),
			`config: ATRIUM_BASE_URL: "http://a b\n" is not a URL`},
		{"unknown flag", []string{"-port", "80"}, env(),
			`config: -port: unknown flag (see -help)`},
		{"unknown flag with value", []string{"-master-kye=" + secret}, env(),
			`config: -master-kye: unknown flag (see -help)`},
		{"missing value", []string{"-addr"}, env(),
			`config: -addr: needs a value`},
		{"stray argument", []string{"-addr", ":1", "serve"}, env(),
			`config: unexpected argument "serve" (all settings are -flags; see -help)`},
		{"stray argument after master key", []string{"-master-key=", secret}, env(),
			`config: unexpected argument after the flags (not shown because -master-key is set)`},
		{"bad syntax hides the argument", []string{"---master-key=" + secret}, env(),
			`config: bad flag syntax (flags look like -name=value; see -help)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := config.Load(tt.args, tt.getenv, &out)
			if err == nil {
				t.Fatalf("Load succeeded, want %q", tt.wantErr)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("error\n got %s\nwant %s", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has more than one line: %q", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the master key: %q", err)
			}
			if out.Len() != 0 {
				t.Errorf("wrote to usage on error: %q", out.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var out bytes.Buffer
			_, err := config.Load([]string{"-addr", ":1", arg}, env("ATRIUM_MASTER_KEY", "hidden"), &out)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("err = %v, want flag.ErrHelp", err)
			}
			text := out.String()
			for _, line := range [][]string{
				{"-addr", "ATRIUM_ADDR", "default :8080"},
				{"-data", "ATRIUM_DATA", "default ./atrium-data"},
				{"-master-key", "ATRIUM_MASTER_KEY", "default (empty)"},
				{"-log-level", "ATRIUM_LOG_LEVEL", "default info"},
				{"-base-url", "ATRIUM_BASE_URL", "default (empty)"},
				{"-max-message-bytes", "ATRIUM_MAX_MESSAGE_BYTES", "default 102400"},
				{"-model-start-timeout", "ATRIUM_MODEL_START_TIMEOUT", "default 60s"},
				{"-model-idle-timeout", "ATRIUM_MODEL_IDLE_TIMEOUT", "default 60s"},
				{"-login-ttl", "ATRIUM_LOGIN_TTL", "default 720h"},
				{"-shutdown-timeout", "ATRIUM_SHUTDOWN_TIMEOUT", "default 10s"},
			} {
				if !hasLineWith(text, line...) {
					t.Errorf("usage has no line with %q:\n%s", line, text)
				}
			}
			if strings.Contains(text, "hidden") {
				t.Errorf("usage shows the master key")
			}
			if arg == "-h" {
				t.Logf("usage:\n%s", text)
			}
		})
	}
}

func hasLineWith(text string, parts ...string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line+" ", p+" ")
		}
		if ok {
			return true
		}
	}
	return false
}

func TestLogValueHidesMasterKey(t *testing.T) {
	c := defaults
	c.MasterKey = "topsecret"
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", c)
	if strings.Contains(buf.String(), "topsecret") || !strings.Contains(buf.String(), "config.addr=:8080") {
		t.Fatalf("log line: %s", buf.String())
	}
}
