package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserSteps returns a runner of named groups of browser actions in ctx, each group
// within 20 s; the first failure fails t with the group's name.
func browserSteps(t *testing.T, ctx context.Context) func(name string, actions ...chromedp.Action[chromedp.Void]) {
	return func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// jsWait polls expr until it is true (10 s); an evaluation cut short by a navigation is
// retried.
func jsWait(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(10*time.Second))(ctx, tg)
			if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "navigated or closed") && !strings.Contains(err.Error(), "Cannot find context") {
				return v, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
