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
	os.Exit(m.Run())
}
