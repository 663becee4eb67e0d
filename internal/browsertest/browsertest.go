// Package browsertest starts headless Chromium for end-to-end tests and collects what
// the page reports to its console. Without Chromium a test skips, unless E2E_REQUIRED is
// set (as in CI), where it fails instead.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"atrium/internal/testkit"
)

// New starts a browser with a fresh profile and returns its context (closed when the
// test ends) and the collector of console errors and uncaught exceptions. Extra
// allocator options go last, e.g. chromedp.Env("TZ=Asia/Tokyo") for a browser in
// another time zone.
func New(t testing.TB, width, height int, extra ...chromedp.ExecAllocatorOption) (context.Context, *Problems) {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("E2E_REQUIRED") != "" {
			t.Fatal("chromium not found and E2E_REQUIRED is set (apt-get update && apt-get install chromium)")
		}
		testkit.Skip(t, "chromium not found; install it (apt-get update && apt-get install chromium) or set E2E_REQUIRED=1 to fail instead")
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(width, height),
	)
	opts = append(opts, extra...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatal(err)
	}
	p := &Problems{}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				p.add(string(m.Type) + ": " + m.Text)
			}
		}
	}()
	return ctx, p
}

// Problems collects console errors and uncaught exceptions (CSP violations among them).
type Problems struct {
	mu   sync.Mutex
	msgs []string
}

func (p *Problems) add(m string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, m)
}

// Check fails the test if the page reported any problem whose text does not contain
// one of the allowed substrings.
func (p *Problems) Check(t testing.TB, allowed ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var bad []string
	for _, m := range p.msgs {
		if !slices.ContainsFunc(allowed, func(a string) bool { return strings.Contains(m, a) }) {
			bad = append(bad, m)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(bad, "\n"))
	}
}
