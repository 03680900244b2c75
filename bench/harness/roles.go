package harness

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/completiond/completiond/bench/mock"
	"github.com/completiond/completiond/bench/relay"
)

// RoleArg is the first argument of a child process the harness starts
// from its own binary: the role to run (mock or relay) follows, then its
// flags.
const RoleArg = "loadbench-role"

// RunRole runs the role args name, until SIGTERM or SIGINT, when args[0] is
// RoleArg; ran is false otherwise. A command that starts the harness calls
// it first (the loadbench command, a test's TestMain), so that its own
// binary serves as the mock and the relay.
func RunRole(args []string) (ran bool, err error) {
	if len(args) < 2 || args[0] != RoleArg {
		return false, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	switch args[1] {
	case "mock":
		return true, mock.Main(ctx, args[2:], os.Stdout, os.Stderr)
	case "relay":
		return true, relay.Main(ctx, args[2:], os.Stdout, os.Stderr)
	}
	return true, fmt.Errorf("unknown role %q", args[1])
}
