package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/metrics"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// TestMemoryHitRateCountsMemoriesSent: the memory hit rate is the share of turns
// with a memory lookup where at least one memory found was in the context the
// model was sent. A turn whose memories were all cut by the pinned zone's budget
// is a miss, and a turn without a lookup (memory off) is not counted, in /metrics
// and in Settings → Activity alike.
func TestMemoryHitRateCountsMemoriesSent(t *testing.T) {
	db := storetest.Open(t)
	ctx := context.Background()
	u := store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	if err := db.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Gauges{})
	act := metrics.NewActivity(db, nil)
	turns := []struct {
		id           string
		lookup, used bool
	}{{"used", true, true}, {"all-cut", true, false}, {"memory-off", false, false}}
	for _, turn := range turns {
		evs := []agent.Event{
			{Kind: agent.EventRunStarted, Model: "m"},
			{Kind: agent.EventRunEnded, Totals: &agent.RunTotals{Status: store.StatusComplete, StartedAt: time.Now(),
				MemoryLookup: turn.lookup, MemoryUsed: turn.used}},
		}
		for i, ev := range evs {
			ev.RunID, ev.Seq, ev.OwnerID, ev.At = turn.id, i+1, u.ID, time.Now()
			m.Publish(ev)
			act.Publish(ev)
		}
	}
	act.Close()

	rec := httptest.NewRecorder()
	m.Handler("tok").ServeHTTP(rec, httptestRequest("tok"))
	for _, want := range []string{`atrium_memory_turns_total{hit="true"} 1`, `atrium_memory_turns_total{hit="false"} 1`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	rows, err := db.ActivityRollups(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		if r.Metric == store.MetricMemory {
			found = true
			if r.N != 2 || r.OK != 1 {
				t.Errorf("memory rollup: %d turns, %d hits; want 2 and 1", r.N, r.OK)
			}
		}
	}
	if !found {
		t.Errorf("no memory rollup in %+v", rows)
	}
}

func httptestRequest(token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}
