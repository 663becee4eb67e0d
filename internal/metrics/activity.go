package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"atrium/internal/agent"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// Activity rolls runs up for Settings → Activity: an agent.Sink that sums a
// run's events in memory and, when the run ends, hands its rollups to one
// writer goroutine, which adds them in one transaction. Nothing is written on
// the run's goroutine, so the reply never waits for it.
type Activity struct {
	db  ActivityStore
	log *slog.Logger

	mu   sync.Mutex
	runs map[string]*runRollup

	queue chan []store.ActivityRow
	done  chan struct{}
	once  sync.Once
}

// ActivityStore is where rollups go (*store.DB).
type ActivityStore interface {
	AddActivity(ctx context.Context, rows []store.ActivityRow) error
}

// activityQueue bounds the runs waiting to be written; beyond it a run's
// rollups are dropped (and logged) rather than slowing the runs down.
const activityQueue = 1024

type rollupKey struct{ model, metric, label string }

type runRollup struct {
	model string
	rows  map[rollupKey]*store.ActivityRow
}

// NewActivity starts the writer; Close stops it once the queue is written.
func NewActivity(db ActivityStore, log *slog.Logger) *Activity {
	if log == nil {
		log = slog.Default()
	}
	a := &Activity{db: db, log: log, runs: map[string]*runRollup{},
		queue: make(chan []store.ActivityRow, activityQueue), done: make(chan struct{})}
	go a.write()
	return a
}

func (a *Activity) write() {
	defer close(a.done)
	for rows := range a.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := a.db.AddActivity(ctx, rows); err != nil {
			a.log.Warn("activity: could not add a run's rollups", "err", err)
		}
		cancel()
	}
}

// Close writes what is queued and stops the writer. Publish must not be
// called after it.
func (a *Activity) Close() {
	if a == nil {
		return
	}
	a.once.Do(func() { close(a.queue) })
	<-a.done
}

// Publish implements agent.Sink.
func (a *Activity) Publish(ev agent.Event) {
	if ev.RunID == "" || ev.Seq == 0 || ev.Kind == agent.EventText || ev.Kind == agent.EventReasoning {
		return
	}
	a.mu.Lock()
	r := a.runs[ev.RunID]
	if r == nil {
		r = &runRollup{model: ev.Model, rows: map[rollupKey]*store.ActivityRow{}}
		a.runs[ev.RunID] = r
	}
	if ev.Kind == agent.EventRunEnded {
		delete(a.runs, ev.RunID)
	}
	a.mu.Unlock()
	// Only the run's goroutine publishes its events: r needs no lock.
	r.add(ev)
	if ev.Kind != agent.EventRunEnded || ev.Totals == nil {
		return
	}
	rows := make([]store.ActivityRow, 0, len(r.rows))
	hour := ev.Totals.StartedAt
	if hour.IsZero() {
		hour = ev.At
	}
	for _, row := range r.rows {
		row.Hour, row.OwnerID = hour, ev.OwnerID
		rows = append(rows, *row)
	}
	select {
	case a.queue <- rows:
	default:
		a.log.Warn("activity: the rollup writer is behind; a run is left out", "run", ev.RunID)
	}
}

func (r *runRollup) row(model, metric, label string) *store.ActivityRow {
	k := rollupKey{model, metric, label}
	row := r.rows[k]
	if row == nil {
		row = &store.ActivityRow{Model: model, Metric: metric, Label: label}
		r.rows[k] = row
	}
	return row
}

func observe(row *store.ActivityRow, d time.Duration, ok bool) {
	ms := d.Milliseconds()
	row.N++
	if ok {
		row.OK++
	}
	row.Sum += ms
	row.Buckets[store.ActivityBucket(ms)]++
}

// add sums what the trace records of the event, so that the rollups equal a
// computation from the run's spans.
func (r *runRollup) add(ev agent.Event) {
	switch ev.Kind {
	case agent.EventRunStarted:
		r.model = ev.Model
	case agent.EventModelResponse:
		if ev.Purpose != "" { // memory extraction: not one of the reply's calls
			return
		}
		observe(r.row(ev.Model, store.MetricLatency, ""), ev.Duration, ev.Err == nil)
		if ev.FirstToken > 0 {
			observe(r.row(ev.Model, store.MetricFirstToken, ""), ev.FirstToken, ev.Err == nil)
		}
	case agent.EventToolResult:
		if ev.ToolCall == nil || ev.Result == nil {
			return
		}
		row := r.row(r.model, store.MetricTool, ev.ToolCall.Name)
		row.N++
		if !ev.Result.IsError {
			row.OK++
		}
	case agent.EventError:
		r.row(r.model, store.MetricError, errorKind(ev.Err)).N++
	case agent.EventRunEnded:
		if t := ev.Totals; t != nil && t.MemoryLookup {
			// A hit: at least one memory found was in the context sent.
			row := r.row(r.model, store.MetricMemory, "")
			row.N++
			if t.MemoryUsed {
				row.OK++
			}
		}
		if t := ev.Totals; t != nil {
			row := r.row(r.model, store.MetricTurn, "")
			row.N++
			if t.Status != store.StatusStopped && t.Status != store.StatusError {
				row.OK++
			}
			row.TokensIn += int64(t.InputTokens)
			row.TokensOut += int64(t.OutputTokens)
		}
	}
}

// errorKind names what failed for "errors by kind": a provider failure by its
// llm.ErrorKind ("model_timeout", "model_auth" …), anything else by its errs code.
func errorKind(err error) string {
	if pe, ok := llm.AsError(err); ok {
		return "model_" + pe.Kind.String()
	}
	if err == nil {
		return errs.Internal
	}
	return errs.Code(err)
}
