// Package redistest runs a real redis-server for tests: on a free loopback
// port, without persistence, killed when the test ends. A test that needs
// Redis fails, loudly, when redis-server is not installed (Debian's package
// redis-server; `make redis-installed` installs it): it never skips.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary is the redis-server the helper runs.
var Binary = "redis-server"

// startWait bounds how long redis-server may take to answer its first PING.
const startWait = 10 * time.Second

// Server is one redis-server of a test. Stop and Restart let a test take
// Redis away and bring it back on the same port (its data is gone, as after
// the restart of a Redis without persistence).
type Server struct {
	// Addr is the server's host:port on loopback.
	Addr string

	tb   testing.TB
	dir  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a redis-server for tb and returns its address; it is killed
// when tb ends.
func Start(tb testing.TB) string {
	tb.Helper()
	return New(tb).Addr
}

// New runs a redis-server for tb, with args added to its command line
// (e.g. "--requirepass", "secret"); it is killed when tb ends.
func New(tb testing.TB, args ...string) *Server {
	tb.Helper()
	path, err := exec.LookPath(Binary)
	if err != nil {
		tb.Fatalf("redistest: %s is not installed (%v): these tests need a real Redis; "+
			"install Debian's package: apt-get install redis-server (or make redis-installed)", Binary, err)
	}
	Binary = path
	s := &Server{tb: tb, dir: tb.TempDir(), args: args}
	for try := 0; ; try++ {
		s.Addr = freeAddr(tb)
		err := s.start()
		if err == nil {
			break
		}
		if try == 4 {
			tb.Fatalf("redistest: %v", err)
		}
	}
	tb.Cleanup(s.Stop)
	return s
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(Binary, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	cmd.Args = append(cmd.Args, s.args...)
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startWait)
	for !ping(s.Addr) {
		select {
		case <-done:
			return fmt.Errorf("%s on %s exited: %s", Binary, s.Addr, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("%s on %s does not answer after %s: %s", Binary, s.Addr, startWait, out)
		}
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Stop kills the server (SIGKILL) and waits for it to exit; a server
// stopped already stays stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the stopped server again on the same port, empty.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	var err error
	for try := 0; try < 50; try++ { // the port may linger a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart: %v", err)
}

// ping reports whether a Redis answers PING on addr: the inline command
// of the protocol, enough to know the server is up.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	// -NOAUTH: up, with a password
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// tail keeps the last bytes redis-server wrote, for an error message.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strconv.Quote(string(t.b))
}
