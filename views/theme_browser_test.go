package views_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"atrium/assets"
	"atrium/views"

	"github.com/a-h/templ"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestBrowserTheme: the chosen theme wins over the system's; "system" follows it
// (the browser's prefers-color-scheme, emulated here both ways).
func TestBrowserTheme(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	for _, th := range []string{"system", "light", "dark"} {
		page := views.Page{Title: "Account", User: &views.User{ID: 1, Username: "ann", Theme: th}}
		mux.Handle("GET /"+th, templ.Handler(views.AccountPage(page, views.Account{Theme: th, MaxAboutMe: 1500, MaxAnswerStyle: 1500})))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", testCSP)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	const light, dark = "rgb(247, 247, 248)", "rgb(21, 22, 26)"
	for _, tc := range []struct{ system, theme, want string }{
		{"light", "system", light}, {"dark", "system", dark},
		{"dark", "light", light}, {"light", "dark", dark},
	} {
		ctx, problems := browser(t, 1280, 800)
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: tc.system}}})
		if err == nil {
			_, err = chromedp.Run(ctx, chromedp.Navigate(srv.URL+"/"+tc.theme))
		}
		if err == nil {
			_, err = chromedp.Run(ctx, chromedp.WaitVisible(`[data-testid="theme-form"]`))
		}
		var bg string
		if err == nil {
			bg, err = chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
		}
		if err != nil {
			t.Fatal(err)
		}
		if bg != tc.want {
			t.Errorf("system %s, theme %s: background %s, want %s", tc.system, tc.theme, bg, tc.want)
		}
		problems.Check(t)
	}
}
