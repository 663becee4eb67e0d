package main

import (
	"bytes"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// `atrium version` names the build: module version, revision, Go version; -X values
// (the Docker build) win over the missing VCS data.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"version"}, func(string) string { return "" }, &out, &out, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "atrium ") || !strings.Contains(out.String(), runtime.Version()) {
		t.Errorf("version output:\n%s", out.String())
	}
	version, revision = "v1.2.3", "0123abc"
	defer func() { version, revision = "", "" }()
	out.Reset()
	run(t.Context(), []string{"version"}, func(string) string { return "" }, &out, &out, nil)
	if got := out.String(); !strings.Contains(got, "atrium v1.2.3\n") || !strings.Contains(got, "revision 0123abc") {
		t.Errorf("version with -X values:\n%s", got)
	}
}

// ATRIUM_MASTER_KEY_FILE (a Docker secret): the key comes from that file, no master.key
// is written to the data directory, and a restart with the same file opens the secrets.
func TestMasterKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "atrium_master_key")
	os.WriteFile(keyFile, []byte(hex.EncodeToString(bytes.Repeat([]byte{7}, 32))+"\n"), 0o444)
	env := map[string]string{"ATRIUM_DATA": filepath.Join(dir, "data"), "ATRIUM_MASTER_KEY_FILE": keyFile}
	a := startApp(t, env)
	h := newHTTPClient(t, a.URL)
	tok := h.csrf("/setup")
	if resp, _ := h.post("/setup", map[string][]string{"_csrf": {tok}, "username": {"admin"},
		"password": {"admin password"}, "password2": {"admin password"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("setup: %d", resp.StatusCode)
	}
	tok = h.csrf("/memories")
	if resp, _ := h.post("/memories", map[string][]string{"_csrf": {tok}, "kind": {"fact"}, "text": {"sealed with the secret key"}}); resp.StatusCode >= 400 {
		t.Fatalf("add memory: %d", resp.StatusCode)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env["ATRIUM_DATA"], "master.key")); err == nil {
		t.Error("master.key was written although the key came from ATRIUM_MASTER_KEY_FILE")
	}
	b := startApp(t, env)
	h.base = b.URL
	if body, code := h.get("/memories"); code != http.StatusOK || !strings.Contains(body, "sealed with the secret key") {
		t.Errorf("after restart with the key file: %d", code)
	}
}
