package mcp_test

import (
	"os"
	"testing"

	"atrium/internal/sandbox"
	"atrium/internal/testkit"
)

// TestMain fails the package when a test leaves goroutines of Atrium's running. Started
// as "sandbox-exec" the test binary stands in for atrium's sandbox wrapper
// (Supervisor.SelfExe is the test binary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:]))
	}
	os.Exit(testkit.CheckLeaks(m.Run()))
}
