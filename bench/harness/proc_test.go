package harness

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStartProcReportsWhyItFailed: a child that exits before it is ready
// fails the start with what it wrote.
func TestStartProcReportsWhyItFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := startProc(ctx, procSpec{
		name: "nothing", argv: []string{mustExecutable(t), RoleArg, "nothing"}, env: childEnv(),
		parse: func(*proc, string) {}, isReady: func(*proc) bool { return false },
	})
	if err == nil || !strings.Contains(err.Error(), `unknown role "nothing"`) {
		t.Fatalf("err = %v, want the child's own words", err)
	}
}

// TestStopEndsTheMock: a started mock says where it serves, answers, and
// exits on stop.
func TestStopEndsTheMock(t *testing.T) {
	r := &runner{cfg: Config{Self: []string{mustExecutable(t)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := r.startMock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.mock = p
	if _, err := mockStats(ctx, r.mockURL()); err != nil {
		t.Fatal(err)
	}
	p.stop()
	if err := p.alive(); err == nil {
		t.Fatal("the mock is still running after stop")
	}
}

func mustExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}
