package app_test

import (
	"os"
	"testing"

	"atrium/internal/testkit"
)

// TestMain fails the package when a test leaves goroutines of Atrium's running.
func TestMain(m *testing.M) { os.Exit(testkit.CheckLeaks(m.Run())) }
