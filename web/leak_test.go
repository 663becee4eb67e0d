package web_test

import (
	"os"
	"testing"

	"atrium/internal/pdftext"
	"atrium/internal/testkit"
)

// TestMain fails the package when a test leaves goroutines of Atrium's running.
// The test binary is also the PDF reader's child, as atrium is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == pdftext.Subcommand {
		os.Exit(pdftext.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(testkit.CheckLeaks(m.Run()))
}
