// Package redistest runs a real redis-server for tests: on a free loopback
// port, without persistence, killed when the test ends. A test that needs
// Redis fails, loudly, when redis-server is not installed (Debian's package
// redis-server; `make redis-installed` installs it): it never skips.
package redistest

import (
	"bufio"
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server the helper runs: $REDISTEST_SERVER when
// set (a path, or a name on $PATH: `make test-valkey` runs the tests on
// valkey-server so), else redis-server.
var Binary = cmp.Or(os.Getenv("REDISTEST_SERVER"), "redis-server")

// startWait bounds how long redis-server may take to answer its first PING.
const startWait = 10 * time.Second

// Server is one redis-server of a test. Stop and Restart let a test take
// Redis away and bring it back on the same port (its data is gone, as after
// the restart of a Redis without persistence).
type Server struct {
	// Addr is the server's host:port on loopback.
	Addr string

	// CAFile is the PEM certificate of the authority that signed a TLS
	// server's certificate (NewTLS); empty otherwise.
	CAFile string

	tb   testing.TB
	dir  string
	args []string
	tls  *tls.Config // NewTLS: how ping connects
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *tail // what its processes wrote last, across restarts
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
	return run(tb, &Server{tb: tb, dir: tb.TempDir(), args: args})
}

// NewTLS is New for a redis-server that speaks TLS only (rediss://), with
// a certificate for 127.0.0.1 signed by a fresh authority whose
// certificate is in CAFile; clients need no certificate of their own.
func NewTLS(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s := &Server{tb: tb, dir: tb.TempDir(), args: args}
	certs, err := newCertificates(s.dir)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	certs.serve(s)
	return run(tb, s)
}

// run starts s on a free port, trying another one if it was taken.
func run(tb testing.TB, s *Server) *Server {
	tb.Helper()
	Binary = lookPath(tb)
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
	tb.Cleanup(func() {
		s.Stop() // first: it waits for the copy of the process's output
		s.tellIfFailed()
	})
	return s
}

// tellIfFailed logs what the server wrote last when its test failed: a
// cluster node's replication and failover notices (startNodes keeps them)
// say what Redis did while the test looked on.
func (s *Server) tellIfFailed() {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if !s.tb.Failed() || out == nil {
		return
	}
	if said := out.text(); said != "" {
		s.tb.Logf("redistest: %s wrote last:\n%s", s.Addr, said)
	}
}

// lookPath finds redis-server, or fails tb loudly.
func lookPath(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath(Binary)
	if err != nil {
		tb.Fatalf("redistest: %s is not installed (%v): these tests need a real Redis; "+
			"install Debian's package: apt-get install redis-server (or make redis-installed)", Binary, err)
	}
	return path
}

// freeAddr returns a loopback address whose port was free a moment ago,
// and that no other test process took for a server of its own (reserve).
func freeAddr(tb testing.TB) string {
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		if reserve(addr) || try == 100 {
			return addr
		}
	}
}

// reserved are the files whose locks hold the ports this process took
// (reserve), open until it exits.
var reserved struct {
	sync.Mutex
	files []*os.File
}

// reserve takes the port of addr for this process's servers until it
// exits, with an exclusive lock on a file named after it that every test
// process using redistest shares: false when another process holds it.
// A port stays taken after its server stopped, so that no server of
// another package's tests (go test runs them at once) gets it meanwhile:
// the dead server's replica would copy that server's data (a full sync),
// and a client that finds the dead server refused would reach a Redis
// that answers as if it were the dead one.
func reserve(addr string) bool {
	_, port, _ := net.SplitHostPort(addr)
	dir := filepath.Join(os.TempDir(), "redistest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no lock to share: as before, a port free a moment ago
	}
	f, err := os.OpenFile(filepath.Join(dir, port), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return false
	}
	reserved.Lock()
	reserved.files = append(reserved.files, f)
	reserved.Unlock()
	return true
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	ports := []string{"--port", port}
	if s.tls != nil {
		ports = []string{"--port", "0", "--tls-port", port}
	}
	cmd := exec.Command(Binary, append(ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")...)
	cmd.Args = append(cmd.Args, s.args...)
	s.mu.Lock()
	if s.out == nil {
		s.out = &tail{}
	}
	out := s.out
	s.mu.Unlock()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startWait)
	for !ping(s.Addr, s.tls) {
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

// ping reports whether a Redis answers PING on addr (over TLS with cfg):
// the inline command of the protocol, enough to know the server is up.
func ping(addr string, cfg *tls.Config) bool {
	var c net.Conn
	var err error
	if cfg != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
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

// tail keeps the last bytes (tailBytes) redis-server wrote, for an error
// message and a failed test's log.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = t.b[len(t.b)-tailBytes:]
	}
	return len(p), nil
}

// tailBytes is how much of its output a tail keeps: the last fifty lines
// or so of a cluster node's notices.
const tailBytes = 8 << 10

// String is the bytes kept, quoted: for an error message.
func (t *tail) String() string { return strconv.Quote(t.text()) }

// text is the bytes kept.
func (t *tail) text() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// running reports whether the server runs (it was not stopped).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Pause stops the server's process (SIGSTOP): it holds its connections and
// answers nothing, as a server stalled or cut off, until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.tb.Fatalf("redistest: %s is not running", s.Addr)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %s: %v", s.Addr, err)
	}
}

// options are what a client of s alone needs: its address, the password
// of its --requirepass, and TLS when it speaks TLS only.
func (s *Server) options() *redis.Options {
	return &redis.Options{Addr: s.Addr, Password: password(s.args), TLSConfig: s.tls}
}

// client is a client of s alone (options); the caller closes it.
func (s *Server) client() *redis.Client { return redis.NewClient(s.options()) }
