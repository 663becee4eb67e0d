// Package assets embeds Atrium's static files (the vendored htmx, htmx-ext-ws and
// idiomorph scripts, plus the app's own CSS and JS) and serves them under
// content-hashed URLs, so that browsers can cache them forever and pages can pin
// them with Subresource Integrity.
//
// The vendored versions and how to refresh them are in VENDORED.md.
package assets

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the URL path under which Handler serves the files.
const Prefix = "/assets/"

//go:embed *.js *.css
var files embed.FS

type asset struct {
	name      string // as embedded, e.g. "htmx.min.js"
	hashed    string // e.g. "htmx.min.0123456789.js"
	etag      string
	integrity string
	ctype     string
	data      []byte
}

var (
	byName   = map[string]*asset{}
	byHashed = map[string]*asset{}
)

func init() {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic("assets: " + err.Error())
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := files.ReadFile(e.Name())
		if err != nil {
			panic("assets: " + err.Error())
		}
		a := newAsset(e.Name(), data)
		byName[a.name] = a
		byHashed[a.hashed] = a
	}
}

func newAsset(name string, data []byte) *asset {
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])[:10]
	sri := sha512.Sum384(data)
	return &asset{
		name:      name,
		hashed:    hashedName(name, hash),
		etag:      `"` + hash + `"`,
		integrity: "sha384-" + base64.StdEncoding.EncodeToString(sri[:]),
		ctype:     contentType(name),
		data:      data,
	}
}

// hashedName puts hash before the last extension: "htmx.min.js" -> "htmx.min.<hash>.js".
func hashedName(name, hash string) string {
	ext := path.Ext(name)
	return strings.TrimSuffix(name, ext) + "." + hash + ext
}

// contentType is fixed for the types we ship, so that the answer does not depend on
// the host's mime.types (a scratch image has none; a dev box may say
// application/javascript).
func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func lookup(name string) *asset {
	a, ok := byName[name]
	if !ok {
		panic(fmt.Sprintf("assets: unknown asset %q", name))
	}
	return a
}

// Path returns the URL path of the named file, with its content hash, e.g.
// Path("htmx.min.js") == "/assets/htmx.min.0123456789.js". It panics if no such file
// is embedded: a wrong name is a programming error that any page test catches.
func Path(name string) string { return Prefix + lookup(name).hashed }

// Integrity returns the Subresource Integrity value of the named file
// ("sha384-<base64>"), for the integrity attribute of <script> and <link>. It panics
// on an unknown name, like Path.
func Integrity(name string) string { return lookup(name).integrity }

// Handler serves the embedded files at the paths Path returns. It expects the full
// request path ("/assets/<hashed name>"), so mount it as is, e.g.
// e.GET("/assets/*", echo.WrapHandler(assets.Handler())). Responses are immutable
// and cached for a year; an unknown name, or a known name with a stale hash, is 404.
// The handler is safe for concurrent use.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	hashed, ok := strings.CutPrefix(r.URL.Path, Prefix)
	a := byHashed[hashed]
	if !ok || a == nil {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("ETag", a.etag)
	// ServeContent answers HEAD, Range and If-None-Match for us.
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.data))
}
