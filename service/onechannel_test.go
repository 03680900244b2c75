package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider"
)

// gateProvider holds every attempt until n of them are held at once, then
// lets them all go on: an attempt reaches it only once its stream was
// admitted, so n held at once proves that n streams ran concurrently.
type gateProvider struct {
	provider.Provider
	n       int64
	entered atomic.Int64
	all     chan struct{} // closed when n attempts are held
}

func (p *gateProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	if p.entered.Add(1) == p.n {
		close(p.all)
	}
	select {
	case <-p.all:
	case <-ctx.Done():
		return provider.Finish{}, ctx.Err()
	}
	return p.Provider.Stream(ctx, req, emit)
}

// oneChannelStreams is how many streams TestOneChannelIsServedOnDefaults
// opens on its one connection: past every cap the shipped defaults had
// (128 streams per connection, 512 in flight, 64 per key, a burst of 40
// starts per key), and few enough for the race detector's goroutine limit.
const oneChannelStreams = 1000

// TestOneChannelIsServedOnDefaults: a caller with one connection — what a
// gRPC library gives by default — and a key runs a thousand streams at
// once on the shipped limits, with the memory of a 1 GiB container: every
// one reaches the upstream while all the others are held there (none
// waits in the client for a stream slot or is refused), and every one
// completes. A stream that waited silently would keep the gate shut: the
// test would end at its context's bound, with the count that got through.
func TestOneChannelIsServedOnDefaults(t *testing.T) {
	gate := &gateProvider{n: oneChannelStreams, all: make(chan struct{})}
	e, conn := authEnv(t, func(c *Config) {
		c.Limits = config.DefaultLimits()
		c.Memory = MemoryLimit{Bytes: 1 << 30, Source: "test"}
		for _, r := range c.Routes {
			gate.Provider = r.Upstream
			r.Upstream = gate
			r.Timeouts = provider.Timeouts{Headers: time.Minute, FirstToken: time.Minute, Idle: time.Minute, Total: time.Minute}
		}
	})
	if l, _ := e.grpc.Completion.Limits(); l.MaxInFlight < oneChannelStreams || l.MaxConcurrentStreams < oneChannelStreams || l.KeyMaxConcurrent != 0 || l.KeyRate != 0 {
		t.Fatalf("the defaults resolved for 1 GiB are %+v: too small for the test", l)
	}
	ctx, cancel := context.WithTimeout(bearer(t.Context(), "Bearer ops-secret-key"), 2*time.Minute) // a bound, not a measurement
	defer cancel()
	client := completionv1.NewCompletionClient(conn)
	errs := make([]error, oneChannelStreams)
	var wg sync.WaitGroup
	for i := range oneChannelStreams {
		wg.Go(func() { errs[i] = drain(client.Stream(ctx, prompt("hi", nil))) })
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			if failed == 0 {
				t.Errorf("first failure: %v", err)
			}
			failed++
		}
	}
	if failed > 0 || gate.entered.Load() != oneChannelStreams {
		t.Errorf("%d of %d streams on one connection failed; %d reached the upstream together", failed, oneChannelStreams, gate.entered.Load())
	}
}

// drain reads a stream to its end: nil when it ended OK.
func drain(st grpc.ServerStreamingClient[completionv1.CompletionEvent], err error) error {
	if err != nil {
		return err
	}
	_, err = testkit.Drain(st)
	return err
}

// TestEveryRefusalSaysSoAtOnce: each limit that refuses a call does so on
// the spot, with its code, ErrorInfo reason and RetryInfo — while the calls
// that fill it are still running, on the same one connection, so that no
// refused call waits for a slot (in the client's HTTP/2 flow control or
// anywhere else). The per-connection cap is at its default (auto: twice
// the in-flight cap), and more calls are refused than it has room for
// beside the held ones: they get their refusals as the refused before them
// free their slots.
func TestEveryRefusalSaysSoAtOnce(t *testing.T) {
	const held, refused = 3, 10
	plain := func() *completionv1.CompleteRequest { return prompt("hold", map[string]string{metaHold: "1"}) }
	resumable := func() *completionv1.CompleteRequest {
		r := plain()
		r.ResumeGrace = durationpb.New(time.Minute)
		return r
	}
	for _, tc := range []struct {
		name   string
		limits func(*Config)
		// open starts a call and returns its first message: the one that
		// fills the limit, held open until its context ends, or the one
		// more, which must fail.
		open   func(ctx context.Context, conn *grpc.ClientConn) error
		code   codes.Code
		reason string
	}{
		{"in flight", func(c *Config) { c.Limits.MaxInFlight = held }, openStream(plain), codes.Unavailable, "OVERLOADED"},
		{"key concurrency", func(c *Config) { c.Limits.KeyMaxConcurrent = held }, openStream(plain), codes.ResourceExhausted, "KEY_CONCURRENCY"},
		{"key rate", func(c *Config) { c.Limits.KeyRate, c.Limits.KeyBurst = 0.001, held }, openStream(plain), codes.ResourceExhausted, "KEY_RATE"},
		{"event log", func(c *Config) { c.EventLog.MaxCompletions = held }, openStream(resumable), codes.Unavailable, "EVENT_LOG_FULL"},
		{"health watches", func(c *Config) { c.Limits.MaxHealthWatches = held }, openWatch, codes.ResourceExhausted, reasonHealthBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn, _ := holdEnv(t, func(*config.Limits) {}, func(c *Config) {
				c.Limits, c.Memory = config.DefaultLimits(), MemoryLimit{Bytes: 1 << 30, Source: "test"}
				tc.limits(c)
			})
			ctx, cancel := context.WithTimeout(bearer(t.Context(), "Bearer ops-secret-key"), time.Minute) // a bound, not a measurement
			defer cancel()
			holding, stop := context.WithCancel(ctx)
			defer stop()
			for i := range held {
				if err := tc.open(holding, conn); err != nil {
					t.Fatalf("call %d within the limit: %v", i+1, err)
				}
			}
			errs := make([]error, refused)
			var wg sync.WaitGroup
			for i := range refused {
				wg.Go(func() { errs[i] = tc.open(ctx, conn) })
			}
			wg.Wait() // every refusal came while the held calls still run
			for i, err := range errs {
				st := status.Convert(err)
				if st.Code() != tc.code || errorInfo(st).GetReason() != tc.reason || retryInfo(st) == nil {
					t.Errorf("call %d past the limit: %v (ErrorInfo %v, RetryInfo %v), want %v with %s and RetryInfo",
						i+1, err, errorInfo(st), retryInfo(st), tc.code, tc.reason)
				}
			}
		})
	}
}

// openStream starts a Stream of req() and returns once its first event
// came: it was admitted, and runs until ctx ends.
func openStream(req func() *completionv1.CompleteRequest) func(ctx context.Context, conn *grpc.ClientConn) error {
	return func(ctx context.Context, conn *grpc.ClientConn) error {
		st, err := completionv1.NewCompletionClient(conn).Stream(ctx, req())
		if err == nil {
			_, err = st.Recv()
		}
		return err
	}
}

// openWatch starts a Health.Watch and returns once its first status came.
func openWatch(ctx context.Context, conn *grpc.ClientConn) error {
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	return err
}
