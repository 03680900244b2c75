package harness

import (
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary serve as the mock and the relay, as the
// loadbench command does, when the smoke test starts it in a role.
func TestMain(m *testing.M) {
	if ran, err := RunRole(os.Args[1:]); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// A race-detector build sleeps a second when it exits, for late
	// reports; the children (mock and relay roles of this binary) are
	// stopped a dozen times a run.
	if os.Getenv("GORACE") == "" {
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}
