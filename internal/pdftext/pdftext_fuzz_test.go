package pdftext_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"atrium/internal/pdftext"
	"atrium/internal/pdftext/pdftest"
)

// FuzzText feeds arbitrary bytes to the child entry point, through the child process
// as uploads do (so a runaway parse is bounded by the child's limits, not the fuzzer's
// memory): the answer is clean text within the limit or an *Error, never anything
// else, and never later than the wall clock allows. Run it with
// go test ./internal/pdftext -run '^$' -fuzz FuzzText -fuzztime 60s
func FuzzText(f *testing.F) {
	f.Add(pdftest.Text(false, "hello"))
	f.Add(pdftest.Text(true, "a", "b"))
	f.Add(pdftest.Page(pdftest.Stream("", []byte("BT (x) Tj ET"))))
	f.Add([]byte("%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF"))
	x := extractor(f, func(l *pdftext.Limits) {
		l.Timeout, l.CPU, l.Memory, l.MaxText = 5*time.Second, 3*time.Second, 256<<20, 64<<10
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		text, err := x.Text(context.Background(), data)
		if took := time.Since(start); took > x.Limits.Timeout+3*time.Second {
			t.Errorf("took %v", took)
		}
		var perr *pdftext.Error
		switch {
		case err != nil && !errors.As(err, &perr):
			t.Fatalf("not an *Error: %v", err)
		case err != nil:
			return
		case len(text) > x.Limits.MaxText || !utf8.ValidString(text) || strings.ContainsRune(text, 0) || strings.TrimSpace(text) == "":
			t.Fatalf("bad text %.100q (%d bytes)", text, len(text))
		}
	})
}
