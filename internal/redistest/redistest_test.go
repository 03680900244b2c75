package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartStopRestart(t *testing.T) {
	s := New(t)
	if !ping(s.Addr) {
		t.Fatal("no PONG from a started server")
	}
	s.Stop()
	if ping(s.Addr) {
		t.Fatal("PONG from a stopped server")
	}
	s.Restart()
	if !ping(s.Addr) {
		t.Fatal("no PONG after the restart")
	}
}

func TestStartReturnsAnAddress(t *testing.T) {
	if addr := Start(t); !ping(addr) {
		t.Fatalf("no PONG on %s", addr)
	}
}
