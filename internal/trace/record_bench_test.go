package trace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"atrium/internal/trace"
)

// BenchmarkRecordSpan is the cost of recording one finished span on the turn's
// path (Run.Record: redact, seal, one write to a real SQLite file), for a small
// tool span and an 11 KB model request, in the clear and sealed.
func BenchmarkRecordSpan(b *testing.B) {
	msg := strings.Repeat("some earlier turn of the conversation, kept verbatim in the context. ", 150)
	for _, size := range []struct {
		name string
		data any
	}{
		{"tool-300B", map[string]any{"id": "c1", "arguments": json.RawMessage(`{"expression":"6*7"}`), "result": "42"}},
		{"request-11KB", map[string]any{"request": map[string]string{"messages": msg}}},
	} {
		for _, sealed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/sealed=%v", size.name, sealed), func(b *testing.B) {
				f := newFixture(b)
				if sealed {
					f, _ = sealedFixture(b)
				}
				ctx := context.Background()
				run, err := f.rec.StartRun(ctx, "run-b", f.sess.ID, f.ann.ID, "m")
				mustNil(b, err)
				for b.Loop() {
					if err := run.Record(ctx, trace.KindToolCall, "calculator", size.data, ms(1), "", nil, 0, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
