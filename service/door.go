package service

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/telemetry"
)

// door is the server's first look at every call: on its headers, in the
// connection's reader, before gRPC reads a byte of its body (a tap
// handle). With auth on, a call without valid credentials ends there,
// UNAUTHENTICATED: for a unary call gRPC would otherwise read and decode
// the whole request — up to twice --max-request-bytes — before any
// interceptor could refuse it. Health needs no credentials, so its calls
// are counted instead (MaxHealthWatches, MaxHealthChecks): what anybody
// may hold without a key is bounded.
type door struct {
	authn    *authenticator
	limits   config.Limits
	refusals *telemetry.Refusals
	watches  atomic.Int64 // Health.Watch streams open
	checks   atomic.Int64 // other health calls running
}

// refusedUnauthenticated is the refusal reason, in the refusal metric and
// log, of a call without valid credentials (its status has no ErrorInfo).
const refusedUnauthenticated = "UNAUTHENTICATED"

// healthWatch is the method of Health.Watch.
const healthWatch = healthPrefix + "Watch"

// tap is the grpc.InTapHandle: it admits the call described by info, or
// refuses it. An admitted call's context carries who the caller is, so
// that the interceptors do not authenticate it again.
func (d *door) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if strings.HasPrefix(info.FullMethodName, healthPrefix) {
		return d.admitHealth(ctx, info.FullMethodName)
	}
	if !d.authn.auth.On() {
		return ctx, nil
	}
	c, err := d.authn.authenticate(ctx)
	if err != nil {
		d.refusals.Refused(ctx, info.FullMethodName, refusedUnauthenticated, "", codes.Unauthenticated, status.Convert(err).Message())
		return nil, err
	}
	return context.WithValue(ctx, authOutcomeKey{}, &authOutcome{caller: c}), nil
}

// admitHealth counts a health call against its cap, until its stream's
// context ends (gRPC cancels it when the call ends, however it ends).
func (d *door) admitHealth(ctx context.Context, method string) (context.Context, error) {
	n, limit, what := &d.checks, d.limits.MaxHealthChecks, "Health.Check calls"
	if method == healthWatch {
		n, limit, what = &d.watches, d.limits.MaxHealthWatches, "Health.Watch streams"
	}
	if limit <= 0 {
		return ctx, nil
	}
	if n.Add(1) > int64(limit) {
		n.Add(-1)
		err := healthBusyStatus(what, limit)
		d.refusals.Refused(ctx, method, reasonHealthBusy, "", codes.ResourceExhausted, status.Convert(err).Message())
		return nil, err
	}
	context.AfterFunc(ctx, func() { n.Add(-1) })
	return ctx, nil
}

// Listener is lis with the connection limits of l: at most MaxConnections
// connections held at once (golang.org/x/net/netutil), of which at most
// MaxHandshakes still in their handshake. Past either, Accept waits, and
// new connections with it in the kernel's backlog: a flood of connections
// costs their sockets there, not a goroutine and buffers each. gRPC's
// ConnectionTimeout (HandshakeTimeout) bounds how long a handshake holds
// its place.
func Listener(lis net.Listener, l config.Limits) net.Listener {
	if l.MaxConnections > 0 {
		lis = netutil.LimitListener(lis, l.MaxConnections)
	}
	if l.MaxHandshakes > 0 {
		lis = &handshakeListener{Listener: lis, slots: make(chan struct{}, l.MaxHandshakes), closed: make(chan struct{})}
	}
	return lis
}

// handshakeListener bounds the connections it accepted that are still in
// their handshake: a slot is taken before Accept and given back when gRPC
// clears the connection's deadline, which it does once the handshake is
// over (grpc.Server's handleRawConn), or when the connection closes.
type handshakeListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

// Accept waits for a handshake slot, then for a connection.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	hc := &handshakingConn{Conn: c}
	hc.done = sync.OnceFunc(func() { <-l.slots })
	return hc, nil
}

// Close closes the listener and ends the Accept waiting for a slot.
func (l *handshakeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// handshakingConn is a connection that holds a handshake slot until its
// handshake is over.
type handshakingConn struct {
	net.Conn
	done func()
}

// SetDeadline clears the handshake's deadline: a zero deadline is gRPC
// saying that the handshake is over.
func (c *handshakingConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.done()
	}
	return c.Conn.SetDeadline(t)
}

// Close closes the connection, and gives its slot back if it still holds it.
func (c *handshakingConn) Close() error {
	c.done()
	return c.Conn.Close()
}

// maxHealthService bounds the service name a health call may ask about:
// a Watch keeps it for as long as it is open.
const maxHealthService = 256

// boundedHealth is the health service, refusing service names longer than
// maxHealthService with INVALID_ARGUMENT, so that the streams anybody may
// open without a key hold nothing large.
type boundedHealth struct{ *health.Server }

// Check implements healthpb.HealthServer.
func (h boundedHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := checkHealthService(req); err != nil {
		return nil, err
	}
	return h.Server.Check(ctx, req)
}

// Watch implements healthpb.HealthServer.
func (h boundedHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	if err := checkHealthService(req); err != nil {
		return err
	}
	return h.Server.Watch(req, stream)
}

func checkHealthService(req *healthpb.HealthCheckRequest) error {
	if len(req.GetService()) > maxHealthService {
		return invalidArgument(violations{{Field: "service", Description: fmt.Sprintf("longer than %d bytes", maxHealthService)}})
	}
	return nil
}
