package testproxy

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// MaxConns bounds the connections one Proxy carries at once; one more is
// closed as it arrives.
const MaxConns = 64

// dialTimeout bounds the proxy's dial to its target.
const dialTimeout = 5 * time.Second

// Proxy forwards every TCP connection made to Addr to its target, byte for
// byte, until Cut or Close. It is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every connection's copies

	mu      sync.Mutex
	links   map[*link]struct{} // the connections carried now
	carried int                // connections accepted and not yet finished, dialling ones too
	closed  bool
}

// link is one connection through the proxy: the client's end and the
// server's.
type link struct {
	client, server net.Conn
}

// New starts a proxy to target (host:port) on a loopback port. It fails
// tb if it cannot listen, and stops when tb's test ends.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testproxy: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection the proxy carries now, abruptly: both ends
// are reset (SO_LINGER 0), so that the client and the server each see the
// connection fail, not end. The proxy keeps listening: the next
// connection goes through. Cut returns how many connections it cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		// Both ends linger 0 before either closes: closing one ends a copy,
		// which closes the other end, and that close must reset too.
		noLinger(l.client)
		noLinger(l.server)
		_ = l.client.Close()
		_ = l.server.Close()
	}
	return len(links)
}

// Close stops the proxy: it stops listening, cuts every connection and
// waits until all its goroutines have returned. It may be called more
// than once; New's cleanup calls it.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // the listener is closed
		}
		if !p.admit() {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.carry(c)
	}
}

// admit counts one more connection, unless the proxy is closed or carries
// MaxConns already.
func (p *Proxy) admit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.carried >= MaxConns {
		return false
	}
	p.carried++
	return true
}

// carry dials the target for client and copies both ways until either
// side ends or the link is cut.
func (p *Proxy) carry(client net.Conn) {
	defer p.wg.Done()
	defer p.finish()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		reset(client)
		return
	}
	l := &link{client: client, server: server}
	if !p.register(l) {
		reset(client)
		reset(server)
		return
	}
	defer p.unregister(l)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		pipe(server, client)
	}()
	pipe(client, server)
}

// pipe copies src to dst until src ends, then closes both: a connection
// one side ended is over for the other too.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

func (p *Proxy) register(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) unregister(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}

func (p *Proxy) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.carried--
}

// reset closes c so that its peer sees a reset, not an orderly end.
func reset(c net.Conn) {
	noLinger(c)
	_ = c.Close()
}

// noLinger makes c's close a reset.
func noLinger(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}
