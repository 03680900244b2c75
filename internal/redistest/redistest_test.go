package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartStopRestart(t *testing.T) {
	s := New(t)
	if !ping(s.Addr, nil) {
		t.Fatal("no PONG from a started server")
	}
	s.Stop()
	if ping(s.Addr, nil) {
		t.Fatal("PONG from a stopped server")
	}
	s.Restart()
	if !ping(s.Addr, nil) {
		t.Fatal("no PONG after the restart")
	}
}

func TestStartReturnsAnAddress(t *testing.T) {
	if addr := Start(t); !ping(addr, nil) {
		t.Fatalf("no PONG on %s", addr)
	}
}

// TestTLS: a TLS redis-server answers over TLS with its authority trusted,
// and not in clear text.
func TestTLS(t *testing.T) {
	s := NewTLS(t, "--requirepass", "secret")
	if s.CAFile == "" || !ping(s.Addr, s.tls) {
		t.Fatalf("no TLS PING answer on %s", s.Addr)
	}
	if ping(s.Addr, nil) {
		t.Fatal("a TLS server answered in clear text")
	}
	s.Restart()
	if !ping(s.Addr, s.tls) {
		t.Fatal("no TLS answer after a restart")
	}
}

// TestServerIsBinary: the server the tests run is the one Binary names
// ($REDISTEST_SERVER: make test-valkey's valkey-server), not another
// found on the way.
func TestServerIsBinary(t *testing.T) {
	c := New(t).client()
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	valkey := strings.Contains(filepath.Base(Binary), "valkey")
	if got := strings.Contains(info, "valkey_version:"); got != valkey {
		t.Fatalf("%s answers INFO server with valkey_version %t:\n%s", Binary, got, info)
	}
}

// outcomeTB is a testing.TB whose test failed or not as it says, which
// keeps what is logged, and runs its cleanups when told (done); the rest
// is t's.
type outcomeTB struct {
	testing.TB
	failed   bool
	logged   []string
	cleanups []func()
}

func (o *outcomeTB) Failed() bool            { return o.failed }
func (o *outcomeTB) Logf(f string, a ...any) { o.logged = append(o.logged, fmt.Sprintf(f, a...)) }
func (o *outcomeTB) Cleanup(f func())        { o.cleanups = append(o.cleanups, f) }
func (o *outcomeTB) done() {
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		o.cleanups[i]()
	}
}

// TestFailedTestLogsWhatTheServerWrote: when its test failed, a server
// logs what it wrote last, the output of its process before a restart
// too; when the test passed, nothing.
func TestFailedTestLogsWhatTheServerWrote(t *testing.T) {
	for _, failed := range []bool{true, false} {
		tb := &outcomeTB{TB: t, failed: failed}
		s := New(tb, "--loglevel", "notice")
		s.Restart()
		tb.done()
		if !failed {
			if len(tb.logged) != 0 {
				t.Errorf("a passed test logged %q", tb.logged)
			}
			continue
		}
		all := strings.Join(tb.logged, "\n")
		if !strings.Contains(all, s.Addr) || strings.Count(all, "Ready to accept connections") != 2 {
			t.Errorf("a failed test logged %q; want %s's two starts", all, s.Addr)
		}
	}
}
