package testproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every line with itself, and records the errors its
// connections end with. It stops with the test.
type echoServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	errs chan error // how each connection ended, nil for an orderly end
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, errs: make(chan error, 2*MaxConns)}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) serve() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer c.Close()
			s.errs <- echo(c)
		}()
	}
}

// echo writes back what c reads until it ends, and returns the read error
// that ended it, nil for an orderly end. (Not io.Copy, whose splice on
// Linux reports a reset as an orderly end.)
func echo(c net.Conn) error {
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if _, werr := c.Write(buf[:n]); werr != nil && err == nil {
			return werr
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// closedAtOnce reports whether a connection to addr is refused or closed
// as soon as it is made.
func closedAtOnce(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return true // reset before the dial saw its handshake complete
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

// roundTrip writes a line to c and reads it back.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("read %q, %v", line, err)
	}
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// TestProxy: what a caller of each method sees.
func TestProxy(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, p *Proxy, srv *echoServer)
	}{
		{"forwards both ways", func(t *testing.T, p *Proxy, _ *echoServer) {
			c, r := dial(t, p.Addr())
			roundTrip(t, c, r)
			roundTrip(t, c, r)
		}},
		{"cut resets both sides and keeps listening", func(t *testing.T, p *Proxy, srv *echoServer) {
			c, r := dial(t, p.Addr())
			roundTrip(t, c, r)
			if n := p.Cut(); n != 1 {
				t.Fatalf("Cut() = %d, want 1", n)
			}
			if _, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the client read %v after the cut, want a connection reset", err)
			}
			if err := <-srv.errs; !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the server's connection ended with %v, want a connection reset", err)
			}
			again, r2 := dial(t, p.Addr())
			roundTrip(t, again, r2)
		}},
		{"a cut spares nothing and nobody later", func(t *testing.T, p *Proxy, _ *echoServer) {
			for range 3 {
				c, r := dial(t, p.Addr())
				roundTrip(t, c, r)
			}
			if n := p.Cut(); n != 3 {
				t.Fatalf("Cut() = %d, want 3", n)
			}
			if n := p.Cut(); n != 0 {
				t.Fatalf("a second Cut() = %d, want 0", n)
			}
		}},
		{"bounded", func(t *testing.T, p *Proxy, _ *echoServer) {
			for range MaxConns {
				c, r := dial(t, p.Addr())
				roundTrip(t, c, r)
			}
			if !closedAtOnce(t, p.Addr()) {
				t.Errorf("connection %d was carried, want it closed at once", MaxConns+1)
			}
		}},
		{"close stops listening and is idempotent", func(t *testing.T, p *Proxy, _ *echoServer) {
			c, r := dial(t, p.Addr())
			roundTrip(t, c, r)
			p.Close()
			p.Close()
			if _, err := r.ReadString('\n'); err == nil {
				t.Error("a connection outlived Close")
			}
			if c, err := net.Dial("tcp", p.Addr()); err == nil {
				c.Close()
				t.Error("the proxy still accepts after Close")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newEchoServer(t)
			tt.run(t, New(t, srv.ln.Addr().String()), srv)
		})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestUnreachableTarget: a connection the target refuses is closed, and
// the proxy goes on.
func TestUnreachableTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := New(t, addr)
	if !closedAtOnce(t, p.Addr()) {
		t.Error("a connection the target refused was kept open")
	}
}
