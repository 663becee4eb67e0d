package pdftext_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"atrium/internal/pdftext"
	"atrium/internal/pdftext/pdftest"
	"atrium/internal/testkit"
)

// TestMain lets the test binary be the child, as main.go lets atrium be.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == pdftext.Subcommand {
		os.Exit(pdftext.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// extractor runs this test binary as the child, with the default limits changed by
// the edits given.
func extractor(t testing.TB, edits ...func(*pdftext.Limits)) *pdftext.Extractor {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lim := pdftext.DefaultLimits()
	for _, e := range edits {
		e(&lim)
	}
	return &pdftext.Extractor{Self: self, Limits: lim}
}

func TestTextOfARealPDF(t *testing.T) {
	x := extractor(t)
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprint("compressed=", compress), func(t *testing.T) {
			doc := pdftest.Text(compress, "Quarterly report\nRevenue grew (a lot) in March.", "Page two: my cat is Pixel.")
			text, err := x.Text(context.Background(), doc)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Quarterly report", "Revenue grew (a lot) in March.", "Page two: my cat is Pixel."} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			if strings.Index(text, "Quarterly") > strings.Index(text, "Page two") {
				t.Errorf("pages out of order:\n%s", text)
			}
		})
	}
}

// TestHostilePDFsAreRefused feeds the child files built to hurt the parser: each must
// come back as an *Error naming what went wrong, within the wall-clock limit, while
// this (the server's) process stays small.
func TestHostilePDFsAreRefused(t *testing.T) {
	x := extractor(t)
	real := pdftest.Text(true, "Some text that is long enough to be cut in the middle.")
	tests := []struct {
		name string
		pdf  []byte
		want string
	}{
		{"no text layer", pdftest.Page(pdftest.Stream("", []byte("q 1 0 0 1 0 0 cm Q"))), "no text layer"},
		{"truncated", real[:len(real)/2], "damaged"},
		{"garbage", append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte("\x8f garbage ] >> endobj ("), 5000)...), "damaged"},
		{"zip bomb of zeros (4 GiB)", pdftest.Page(pdftest.Stream("/Filter /FlateDecode", pdftest.Bomb("", 4<<30, 0))), ""},
		{"zip bomb of one string (1 GiB)", pdftest.Page(pdftest.Stream("/Filter /FlateDecode", pdftest.Bomb("BT /F1 12 Tf (", 1<<30, 'A'))), ""},
		{"zip bomb of text", pdftest.Page(pdftest.Stream("/Filter /FlateDecode", pdftest.Deflate(textBomb(8<<20)))), ""},
		{"deeply nested arrays", pdftest.Page(pdftest.Object(strings.Repeat("[", 2_000_000) + strings.Repeat("]", 2_000_000))), ""},
		{"a million pages", pdftest.Build([]pdftest.Object{
			"<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [2 0 R] /Count 1000000 >>"}), "1000000 pages"},
		{"not a PDF", []byte("PK\x03\x04 a zip file"), "does not start like a PDF"},
	}
	before := testkit.PeakRSS(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			text, err := x.Text(context.Background(), tc.pdf)
			took := time.Since(start)
			var perr *pdftext.Error
			if !errors.As(err, &perr) {
				t.Fatalf("want a *pdftext.Error, got text %.80q, err %v", text, err)
			}
			if !strings.HasPrefix(err.Error(), "this PDF could not be read: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if took > x.Limits.Timeout+5*time.Second {
				t.Errorf("took %v, the limit is %v", took, x.Limits.Timeout)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
	grew := testkit.PeakRSS(t) - before
	t.Logf("peak RSS of this (the parent) process: %d MiB before, grew by %d MiB", before>>20, grew>>20)
	if grew > 64<<20 {
		t.Errorf("the parent's peak RSS grew by %d MiB", grew>>20)
	}
}

// textBomb is a content stream that shows n bytes of text.
func textBomb(n int) []byte {
	line := "(" + strings.Repeat("A", 1000) + ") Tj\n"
	return []byte("BT /F1 12 Tf " + strings.Repeat(line, n/1000) + "ET")
}

func TestLimits(t *testing.T) {
	t.Run("pages", func(t *testing.T) {
		x := extractor(t, func(l *pdftext.Limits) { l.MaxPages = 2 })
		_, err := x.Text(context.Background(), pdftest.Text(false, "a", "b", "c"))
		if err == nil || !strings.Contains(err.Error(), "it has 3 pages; at most 2") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("text", func(t *testing.T) {
		x := extractor(t, func(l *pdftext.Limits) { l.MaxText = 1000 })
		_, err := x.Text(context.Background(), pdftest.Text(true, strings.Repeat("word ", 300)))
		if err == nil || !strings.Contains(err.Error(), "more than 1000 bytes of text") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("input", func(t *testing.T) {
		x := extractor(t, func(l *pdftext.Limits) { l.MaxInput = 100 })
		_, err := x.Text(context.Background(), pdftest.Text(false, "a"))
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("wall clock", func(t *testing.T) {
		x := extractor(t, func(l *pdftext.Limits) { l.Timeout = 200 * time.Millisecond })
		// Inflating 1 GiB keeps the child busy for seconds.
		_, err := x.Text(context.Background(), pdftest.Page(pdftest.Stream("/Filter /FlateDecode", pdftest.Bomb("", 1<<30, 0))))
		if err == nil || !strings.Contains(err.Error(), "took longer than 200ms") {
			t.Errorf("err = %v", err)
		}
	})
}
