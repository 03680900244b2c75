package main

import (
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/completiond/completiond/service"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestToolLoopAgainstTheServer runs the eager loop against a real server:
// plainly, and with an upstream whose stream breaks right after a complete
// tool call (the loop must never answer the void call's id).
func TestToolLoopAgainstTheServer(t *testing.T) {
	for _, faults := range []string{defaultFaults, "tool_reset=get_weather," + defaultFaults} {
		t.Run(faults, func(t *testing.T) { toolLoop(t, faults) })
	}
}

func toolLoop(t *testing.T, faults string) {
	srv, err := service.New(service.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	g := service.NewGRPC(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Server.Serve(lis) }()
	defer g.Server.Stop()
	var out strings.Builder
	if err := run(t.Context(), lis.Addr().String(), "sim", "Weather in Lisbon?", faults, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"[tool get_weather(", "[NEXT_TURN]", "[COMPLETED]", "[done: STOP_REASON_END_TURN, "} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "[NEXT_TURN]") != 2 {
		t.Errorf("want two tool turns:\n%s", got)
	}
}
