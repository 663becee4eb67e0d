package assets_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"atrium/assets"
)

var vendored = []string{"htmx.min.js", "ws.js", "idiomorph-ext.min.js"}

func get(t *testing.T, srv *httptest.Server, p string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(srv.URL + p)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestServesHashedPath(t *testing.T) {
	srv := httptest.NewServer(assets.Handler())
	defer srv.Close()

	for _, name := range vendored {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			sum256 := sha256.Sum256(want)
			hash := hex.EncodeToString(sum256[:])[:10]
			p := assets.Path(name)
			if wantPath := "/assets/" + strings.TrimSuffix(name, ".js") + "." + hash + ".js"; p != wantPath {
				t.Fatalf("Path(%q) = %q, want %q", name, p, wantPath)
			}

			resp, body := get(t, srv, p)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: status %d", p, resp.StatusCode)
			}
			if !bytes.Equal(body, want) {
				t.Fatalf("GET %s: body differs from %s (%d vs %d bytes)", p, name, len(body), len(want))
			}
			for h, v := range map[string]string{
				"Content-Type":           "text/javascript; charset=utf-8",
				"Cache-Control":          "public, max-age=31536000, immutable",
				"X-Content-Type-Options": "nosniff",
			} {
				if got := resp.Header.Get(h); got != v {
					t.Errorf("%s = %q, want %q", h, got, v)
				}
			}

			sum := sha512.Sum384(want)
			wantSRI := "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
			if got := assets.Integrity(name); got != wantSRI {
				t.Errorf("Integrity(%q) = %q, want %q", name, got, wantSRI)
			}
		})
	}
}

func TestConditionalGet(t *testing.T) {
	srv := httptest.NewServer(assets.Handler())
	defer srv.Close()
	p := assets.Path("htmx.min.js")
	resp, _ := get(t, srv, p)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+p, nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: status %d, want 304", resp2.StatusCode)
	}
}

func TestNotFound(t *testing.T) {
	srv := httptest.NewServer(assets.Handler())
	defer srv.Close()
	good := assets.Path("htmx.min.js")
	for _, p := range []string{
		"/assets/htmx.min.0000000000.js", // stale hash
		"/assets/htmx.min.js",            // unhashed
		"/assets/",
		"/assets/nope.0123456789.js",
		"/assets/../assets/assets.go",
		"/assets/..%2fassets.go",
		"/assets/%2e%2e/go.mod",
		"/assets/assets.go",
		"/assets/VENDORED.md",
		"/assets/.." + strings.TrimPrefix(good, "/assets"), // traversal ending in a real name
		strings.TrimPrefix(good, "/assets"),                // missing prefix
	} {
		t.Run(p, func(t *testing.T) {
			// Build the request by hand so that neither the client nor the server
			// cleans the path before the handler sees it.
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.URL.Path = p
			req.URL.RawPath = ""
			rec := httptest.NewRecorder()
			assets.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusNotFound {
				t.Fatalf("GET %s: status %d, want 404", p, rec.Code)
			}
			if cc := rec.Header().Get("Cache-Control"); strings.Contains(cc, "immutable") {
				t.Errorf("404 is cached as immutable: %q", cc)
			}
		})
	}
	// And through a real server, with an escaped traversal.
	resp, _ := get(t, srv, "/assets/..%2f..%2fgo.mod")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("escaped traversal: status %d, want 404", resp.StatusCode)
	}
}

func TestPathPanicsOnUnknownName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Path(unknown) did not panic")
		}
	}()
	assets.Path("missing.js")
}

func TestCSSContentType(t *testing.T) {
	srv := httptest.NewServer(assets.Handler())
	defer srv.Close()
	resp, _ := get(t, srv, assets.Path("app.css"))
	if got := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || got != "text/css; charset=utf-8" {
		t.Fatalf("app.css: status %d, Content-Type %q", resp.StatusCode, got)
	}
}
