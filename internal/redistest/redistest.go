// Package redistest starts a real redis-server for tests.
package redistest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Start runs redis-server on a free loopback port, without persistence, and
// returns its address; the server is killed when tb ends. It fails tb when
// redis-server is not installed (the Debian package redis-server): fleet
// tests never skip silently.
func Start(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server is not installed (apt-get install redis-server; make redis-installed): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", tb.TempDir())
	if err := cmd.Start(); err != nil {
		tb.Fatalf("redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case <-done:
			tb.Fatalf("redis-server on %s exited at start", addr)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatal(fmt.Errorf("redis-server on %s did not listen within 10s: %w", addr, err))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
