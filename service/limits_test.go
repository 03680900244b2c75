package service

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/provider"
)

// metaHold, in a request's metadata, makes holdProvider hold the attempt.
const metaHold = "test.hold"

// holdProvider holds the attempts of requests with metaHold until release
// is closed, telling entered when it starts holding one.
type holdProvider struct {
	provider.Provider
	entered chan struct{}
	release chan struct{}
}

func (p *holdProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	if req.Metadata[metaHold] != "" {
		p.entered <- struct{}{}
		select {
		case <-p.release:
		case <-ctx.Done():
			return provider.Finish{}, ctx.Err()
		}
	}
	return p.Provider.Stream(ctx, req, emit)
}

// holdEnv is authEnv whose upstream holds requests with metaHold; mutate
// changes the configuration further.
func holdEnv(t *testing.T, limits func(*config.Limits), mutate ...func(*Config)) (*testEnv, *grpc.ClientConn, *holdProvider) {
	t.Helper()
	var hold *holdProvider
	e, conn := authEnv(t, func(c *Config) {
		for _, m := range mutate {
			m(c)
		}
		limits(&c.Limits)
		for _, r := range c.Routes {
			if hold == nil {
				hold = &holdProvider{Provider: r.Upstream, entered: make(chan struct{}, 8), release: make(chan struct{})}
			}
			r.Upstream = hold
			r.Timeouts.Idle = 20 * time.Second
		}
	})
	return e, conn, hold
}

// held starts a Stream whose attempt the upstream holds, waits until it is
// held, and returns a function that releases it and checks that it ended OK.
func held(t *testing.T, e *testEnv, hold *holdProvider, key string) (finish func()) {
	t.Helper()
	st, err := e.client.Stream(bearer(t.Context(), "Bearer "+key), prompt("hold", map[string]string{metaHold: "1"}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the held stream never reached the upstream")
	}
	return func() {
		close(hold.release)
		for {
			if _, err := st.Recv(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("held stream: %v", err)
				}
				return
			}
		}
	}
}

// retryDelay returns the RetryInfo delay of err, or -1 without one.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func complete(ctx context.Context, e *testEnv, key string) error {
	_, err := e.client.Complete(bearer(ctx, "Bearer "+key), prompt("hi", nil))
	return err
}

func TestConcurrencyLimitsShedWithRetryInfo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  func(*config.Limits)
		want    codes.Code
		healthy string // a key whose calls still pass while the cap is reached
	}{
		{"server in-flight cap", func(l *config.Limits) { l.MaxInFlight, l.KeyMaxConcurrent = 1, 0 }, codes.Unavailable, ""},
		{"key concurrency", func(l *config.Limits) { l.MaxInFlight, l.KeyMaxConcurrent = 0, 1 }, codes.ResourceExhausted, "narrow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, conn, hold := holdEnv(t, tc.limits)
			finish := held(t, e, hold, "ops-secret-key")
			before := e.upstream.calls.Load()
			err := complete(t.Context(), e, "ops-secret-key")
			// One cap of 1: the RetryInfo is ShedRetryDelay, spread by up to one more (Spread).
			if d := retryDelay(err); status.Code(err) != tc.want || d < guard.ShedRetryDelay || d > 2*guard.ShedRetryDelay {
				t.Errorf("second call: %v (RetryInfo %v), want %v with RetryInfo in [%v, %v]", err, d, tc.want, guard.ShedRetryDelay, 2*guard.ShedRetryDelay)
			}
			if n := e.upstream.calls.Load() - before; n != 0 {
				t.Errorf("%d upstream calls for a shed request", n)
			}
			if tc.healthy != "" {
				if err := complete(t.Context(), e, tc.healthy+"-secret-key"); err != nil {
					t.Errorf("another key: %v", err)
				}
			}
			if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("health while the cap is reached: %v", err)
			}
			finish()
			if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
				t.Errorf("after the held stream ended: %v", err)
			}
		})
	}
}

func TestKeyRateLimit(t *testing.T) {
	var skew atomic.Int64
	e, _ := authEnv(t, func(c *Config) {
		c.Limits.KeyRate, c.Limits.KeyBurst = 0.1, 2 // one completion per 10 s, two at once
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	for i := range 2 {
		if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	before := e.upstream.calls.Load()
	err := complete(t.Context(), e, "ops-secret-key")
	// The next token in 10 s, spread by up to one spacing of 10 s (Spread).
	if d := retryDelay(err); status.Code(err) != codes.ResourceExhausted || d <= 5*time.Second || d > 20*time.Second {
		t.Errorf("call over the rate: %v (RetryInfo %v), want RESOURCE_EXHAUSTED with a RetryInfo of 10 to 20 s", err, d)
	}
	if n := e.upstream.calls.Load() - before; n != 0 {
		t.Errorf("%d upstream calls for a refused request", n)
	}
	if err := complete(t.Context(), e, "narrow-secret-key"); err != nil {
		t.Errorf("another key: %v", err)
	}
	skew.Store(int64(10 * time.Second))
	if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
		t.Errorf("10s later: %v", err)
	}
}

// TestKeyLimitsNeedAKey: without auth there are no keys, and only the
// server's cap applies.
func TestKeyLimitsNeedAKey(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.Limits.KeyRate, c.Limits.KeyBurst = 0.1, 1 })
	for i := range 3 {
		if _, err := e.client.Complete(t.Context(), prompt("hi", nil)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
}

// TestStreamsPerConnection: the streams over the cap wait in the client;
// another connection is not affected.
func TestStreamsPerConnection(t *testing.T) {
	e, _, hold := holdEnv(t, func(l *config.Limits) { l.MaxConcurrentStreams = 1 })
	finish := held(t, e, hold, "ops-secret-key")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := complete(ctx, e, "ops-secret-key"); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("second stream on the connection: %v, want it to wait until its deadline", err)
	}
	other := serveBufconn(t, e.grpc)
	defer other.Close()
	if _, err := completionv1.NewCompletionClient(other).Complete(bearer(t.Context(), "Bearer ops-secret-key"), prompt("hi", nil)); err != nil {
		t.Errorf("another connection: %v", err)
	}
	finish()
}

// TestIdleConnectionIsClosed: MaxConnectionIdle reaches the transport.
func TestIdleConnectionIsClosed(t *testing.T) {
	e, conn := authEnv(t, func(c *Config) { c.Limits.MaxConnectionIdle = 50 * time.Millisecond })
	if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatal("the idle connection stayed open")
		}
	}
}

// TestMaxConnectionAgeKeepsStreams: a connection past its age gets GOAWAY,
// and its running stream still ends normally within the grace.
func TestMaxConnectionAgeKeepsStreams(t *testing.T) {
	e, conn, hold := holdEnv(t, func(l *config.Limits) { l.MaxConnectionAge, l.MaxConnectionAgeGrace = 50*time.Millisecond, time.Minute })
	finish := held(t, e, hold, "ops-secret-key")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatal("no GOAWAY after the connection's age")
		}
	}
	finish() // checks the held stream ends OK
}

// TestTooManyPingsCloseTheConnection speaks HTTP/2 directly: grpc-go's
// client does not ping more often than every 10 s.
func TestTooManyPingsCloseTheConnection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Limits.KeepaliveMinTime = time.Hour
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPC(srv)
	lis := bufconn.Listen(1 << 16)
	go func() { _ = g.Server.Serve(lis) }()
	defer g.Server.Stop()
	c, err := lis.DialContext(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, bufio.NewReader(c))
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" {
				t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.ErrCode, ga.DebugData())
			}
			return
		}
	}
}
