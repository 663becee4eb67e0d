package pdftext_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"atrium/internal/pdftext/pdftest"
)

// BenchmarkText20Pages reads a 20-page PDF (compressed contents, ~45 lines of ~12
// words a page) through the child process, as an upload does. child-peak-MiB is the
// largest resident set of any child (getrusage RUSAGE_CHILDREN), i.e. the reader's.
func BenchmarkText20Pages(b *testing.B) {
	x := extractor(b)
	pages := make([]string, 20)
	for i := range pages {
		var p strings.Builder
		for l := 0; l < 45; l++ {
			fmt.Fprintf(&p, "Page %d line %d: the quarterly figures were reviewed by the board in March.\n", i+1, l+1)
		}
		pages[i] = p.String()
	}
	doc := pdftest.Text(true, pages...)
	b.SetBytes(int64(len(doc)))
	b.ResetTimer()
	var text string
	for b.Loop() {
		var err error
		if text, err = x.Text(context.Background(), doc); err != nil {
			b.Fatal(err)
		}
	}
	if !strings.Contains(text, "Page 20 line 45:") {
		b.Fatalf("text lacks the last line: %d bytes", len(text))
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "child-peak-MiB")
	}
	b.ReportMetric(float64(len(doc)), "pdf-bytes")
	b.ReportMetric(float64(len(text)), "text-bytes")
}
