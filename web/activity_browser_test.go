package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/store"
)

// TestBrowserActivityRanges: in Chromium, the admin opens Activity from the
// nav (7 days by default), sees the charts drawn with the stylesheet's colours
// (no CSP violation, no console error), and switching to 24 hours leaves out
// the tool used five days ago.
func TestBrowserActivityRanges(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	env := newTestEnv(t)
	env.setup()
	now, owner := env.clock.now(), env.userID("admin")
	lat := store.ActivityRow{Hour: now, OwnerID: owner, Model: "fake-model", Metric: store.MetricLatency, N: 2, OK: 2, Sum: 900}
	lat.Buckets[4] = 2
	if err := env.db.AddActivity(context.Background(), []store.ActivityRow{lat,
		{Hour: now, OwnerID: owner, Model: "fake-model", Metric: store.MetricTool, Label: "calculator", N: 4, OK: 3},
		{Hour: now.Add(-5 * 24 * time.Hour), OwnerID: owner, Model: "fake-model", Metric: store.MetricTool, Label: "old_fetch", N: 2, OK: 2},
	}); err != nil {
		t.Fatal(err)
	}
	steps, wait := browserSteps(t, ctx), jsWait
	tools := `[...document.querySelectorAll("[data-testid=table-tools] tbody td:first-child")].map(td => td.textContent).join()`
	steps("login",
		chromedp.Navigate(env.ts.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-username`)),
		chromedp.SendKeys(chromedp.CSS(`#login-username`), "admin"),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), testPassword),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=nav-settings]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-settings]`)), // the settings area's nav lists Activity
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=nav-activity]`)),
	)
	steps("open Activity (7 days)",
		chromedp.Click(chromedp.CSS(`[data-testid=nav-activity]`)),
		wait(`document.querySelector("[data-testid=activity]")?.dataset.range === "7d"`),
		wait(tools+` === "calculator,old_fetch"`),
		wait(`document.querySelector("[data-testid=activity-range-7d]").getAttribute("aria-current") === "page"`),
		// The bars are drawn and coloured by the stylesheet (a class, no inline style).
		wait(`(() => { const r = document.querySelector("[data-testid=chart-tools] rect");
			return r.getBoundingClientRect().width > 100 && getComputedStyle(r).fill !== "rgb(0, 0, 0)"; })()`),
		wait(`document.querySelectorAll("[data-testid=chart-latency] rect").length === 2`),
	)
	steps("switch to 24 hours",
		chromedp.Click(chromedp.CSS(`[data-testid=activity-range-24h]`)),
		wait(`document.querySelector("[data-testid=activity]")?.dataset.range === "24h"`),
		wait(tools+` === "calculator"`),
		wait(`document.querySelector("[data-testid=table-tools] tbody td:last-child").textContent === "75.0 %"`),
	)
	steps("switch to 30 days",
		chromedp.Click(chromedp.CSS(`[data-testid=activity-range-30d]`)),
		wait(`location.search === "?range=30d" && `+tools+` === "calculator,old_fetch"`),
	)
	problems.Check(t)
}
