package web

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

// Settings → Activity: charts over the hourly rollups (store.ActivityByLabel
// and ActivityByDay), so the page reads sums of a few thousand rows however
// many runs there are.

var activityRanges = []struct {
	value, label string
	span         time.Duration
}{
	{"24h", "24 hours", 24 * time.Hour},
	{"7d", "7 days", 7 * 24 * time.Hour},
	{"30d", "30 days", 30 * 24 * time.Hour},
}

func (s *Server) showActivity(c echo.Context) error {
	rng := cmp.Or(c.QueryParam("range"), "7d")
	var span time.Duration
	v := views.Activity{Range: rng}
	for _, r := range activityRanges {
		v.Ranges = append(v.Ranges, views.ActivityRange{Value: r.value, Label: r.label, Current: r.value == rng})
		if r.value == rng {
			span = r.span
		}
	}
	if span == 0 {
		return errs.E(errs.Invalid, "The range must be 24h, 7d or 30d.")
	}
	ctx := c.Request().Context()
	since := s.Now().Add(-span)
	byLabel, err := s.Store.ActivityByLabel(ctx, since)
	if err != nil {
		return err
	}
	byDay, err := s.Store.ActivityByDay(ctx, since)
	if err != nil {
		return err
	}
	v.Charts = []views.Chart{toolChart(byLabel), latencyChart("latency", "Model latency by model", store.MetricLatency, byLabel,
		"Request to last byte of each model call of a reply."),
		latencyChart("first-token", "Time to first token by model", store.MetricFirstToken, byLabel,
			"Request to the first text or reasoning delta. Not known for runs recorded before this version."),
		tokenChart(byDay), memoryChart(byDay), errorChart(byLabel)}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, 200, views.ActivityPage(s.page(c, "Activity"), v))
}

func count(n int64) string { return strconv.FormatInt(n, 10) }

func percent(part, whole int64) (float64, string) {
	if whole == 0 {
		return 0, "–"
	}
	p := float64(part) / float64(whole) * 100
	return p, strconv.FormatFloat(p, 'f', 1, 64) + " %"
}

func toolChart(rows []store.ActivityRow) views.Chart {
	c := views.Chart{ID: "tools", Title: "Tool success rate by tool", Max: 100, Empty: "No tool was called in this range.",
		Columns: []string{"Tool", "Calls", "Succeeded", "Success rate"}}
	sums := map[string]*store.ActivityRow{}
	var names []string
	for _, r := range rows {
		if r.Metric != store.MetricTool {
			continue
		}
		if sums[r.Label] == nil {
			sums[r.Label] = &store.ActivityRow{Label: r.Label}
			names = append(names, r.Label)
		}
		sums[r.Label].Add(r)
	}
	slices.Sort(names)
	for _, name := range names {
		t := sums[name]
		p, text := percent(t.OK, t.N)
		c.Bars = append(c.Bars, views.Bar{Label: name, Value: p, Text: text, Class: "bar-ok"})
		c.Rows = append(c.Rows, []string{name, count(t.N), count(t.OK), text})
	}
	return c
}

// quantile reads the q-quantile (0…1) from histogram buckets, interpolating
// inside its bucket as Prometheus's histogram_quantile does; above the last
// bound it answers the bound.
func quantile(b [store.ActivityBuckets]int64, q float64) float64 {
	var total int64
	for _, n := range b {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen int64
	for i, n := range b {
		if n > 0 && float64(seen+n) >= rank {
			if i == len(store.ActivityBucketsMS) {
				return float64(store.ActivityBucketsMS[i-1])
			}
			lo := 0.0
			if i > 0 {
				lo = float64(store.ActivityBucketsMS[i-1])
			}
			hi := float64(store.ActivityBucketsMS[i])
			return lo + (hi-lo)*(rank-float64(seen))/float64(n)
		}
		seen += n
	}
	return float64(store.ActivityBucketsMS[len(store.ActivityBucketsMS)-1])
}

func millis(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

func latencyChart(id, title, metric string, rows []store.ActivityRow, note string) views.Chart {
	c := views.Chart{ID: id, Title: title, Note: note, Empty: "No model call in this range.",
		Columns: []string{"Model", "Calls", "p50", "p95", "Mean"}}
	for _, r := range rows {
		if r.Metric != metric || r.N == 0 {
			continue
		}
		p50, p95 := quantile(r.Buckets, 0.5), quantile(r.Buckets, 0.95)
		c.Max = max(c.Max, p95)
		c.Bars = append(c.Bars, views.Bar{Label: r.Model + " p50", Value: p50, Text: millis(p50), Class: "bar-p50"},
			views.Bar{Label: r.Model + " p95", Value: p95, Text: millis(p95), Class: "bar-p95"})
		c.Rows = append(c.Rows, []string{r.Model, count(r.N), millis(p50), millis(p95), millis(float64(r.Sum) / float64(r.N))})
	}
	return c
}

func tokenChart(rows []store.ActivityRow) views.Chart {
	c := views.Chart{ID: "tokens", Title: "Tokens per day", Note: "Input and output tokens the providers reported; the table splits them by user and model.",
		Empty: "No run finished in this range.", Columns: []string{"Day", "User", "Model", "Input tokens", "Output tokens"}}
	perDay := map[string]int64{}
	var days []string
	for _, r := range rows {
		if r.Metric != store.MetricTurn {
			continue
		}
		d := r.Hour.Format("2006-01-02")
		if _, ok := perDay[d]; !ok {
			days = append(days, d)
		}
		perDay[d] += r.TokensIn + r.TokensOut
		c.Rows = append(c.Rows, []string{d, cmp.Or(r.Owner, "(deleted)"), r.Model, count(r.TokensIn), count(r.TokensOut)})
	}
	for _, d := range days {
		c.Max = max(c.Max, float64(perDay[d]))
		c.Bars = append(c.Bars, views.Bar{Label: d, Value: float64(perDay[d]), Text: count(perDay[d]), Class: "bar-tokens"})
	}
	return c
}

func memoryChart(rows []store.ActivityRow) views.Chart {
	c := views.Chart{ID: "memory", Title: "Memory hit rate", Max: 100,
		Note:  "Share of turns with a memory lookup in which at least one memory was injected.",
		Empty: "No turn looked up memories in this range.", Columns: []string{"Day", "Turns with a lookup", "With ≥ 1 memory", "Hit rate"}}
	var days []string
	sums := map[string]*store.ActivityRow{}
	var all store.ActivityRow
	for _, r := range rows {
		if r.Metric != store.MetricMemory {
			continue
		}
		d := r.Hour.Format("2006-01-02")
		if sums[d] == nil {
			sums[d] = &store.ActivityRow{}
			days = append(days, d)
		}
		sums[d].Add(r)
		all.Add(r)
	}
	for _, d := range days {
		p, text := percent(sums[d].OK, sums[d].N)
		c.Bars = append(c.Bars, views.Bar{Label: d, Value: p, Text: text, Class: "bar-ok"})
		c.Rows = append(c.Rows, []string{d, count(sums[d].N), count(sums[d].OK), text})
	}
	if all.N > 0 {
		_, text := percent(all.OK, all.N)
		c.Rows = append(c.Rows, []string{"All", count(all.N), count(all.OK), text})
	}
	return c
}

func errorChart(rows []store.ActivityRow) views.Chart {
	c := views.Chart{ID: "errors", Title: "Errors by kind", Empty: "No run failed in this range.",
		Note:    "Errors that ended a reply, by kind (“unknown”: recorded before this version); failed tool calls are in the tool chart.",
		Columns: []string{"Kind", "Errors"}}
	sums := map[string]int64{}
	var kinds []string
	for _, r := range rows {
		if r.Metric != store.MetricError {
			continue
		}
		if _, ok := sums[r.Label]; !ok {
			kinds = append(kinds, r.Label)
		}
		sums[r.Label] += r.N
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(sums[b], sums[a]), cmp.Compare(a, b)) })
	for _, k := range kinds {
		c.Max = max(c.Max, float64(sums[k]))
		c.Bars = append(c.Bars, views.Bar{Label: k, Value: float64(sums[k]), Text: fmt.Sprint(sums[k]), Class: "bar-error"})
		c.Rows = append(c.Rows, []string{k, count(sums[k])})
	}
	return c
}
