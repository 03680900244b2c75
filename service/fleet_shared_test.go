package service

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// logBuffer is a slog handler's output, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// flaky is an upstream whose model sim-1 answers 500 while down is set.
type flaky struct {
	provider.Provider
	down  atomic.Bool
	calls atomic.Int64 // attempts on sim-1
}

func (f *flaky) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	if req.Model == "sim-1" {
		f.calls.Add(1)
		if f.down.Load() {
			return provider.Finish{}, &recovery.Failure{Kind: recovery.FailServer, Provider: "sim", HTTPStatus: 500, Message: "down"}
		}
	}
	return f.Provider.Stream(ctx, req, emit)
}

// fleetEnvs are n replicas (servers on bufconn) sharing the Redis at addr,
// each with its own client and upstream up.
func fleetEnvs(t *testing.T, addr string, n int, up provider.Provider, mutate func(*Config)) []*testEnv {
	t.Helper()
	out := make([]*testEnv, n)
	for i := range out {
		rdb := testkit.RedisClient(t, addr)
		out[i] = newTestEnv(t, func(c *Config) {
			c.Redis = rdb
			for _, r := range c.Routes {
				r.Upstream = up
			}
			if mutate != nil {
				mutate(c)
			}
		})
	}
	return out
}

// TestFleetCircuitOpensOnEveryReplica: completions through replica A meet a
// primary that is down; its circuit opens for B and C at once, whose
// completions go straight to the fallback without touching the primary.
func TestFleetCircuitOpensOnEveryReplica(t *testing.T) {
	testkit.NoLeaks(t)
	up := &flaky{Provider: sim.New(sim.Config{Words: 12})}
	up.down.Store(true)
	fleet := fleetEnvs(t, redistest.Start(t), 3, up, func(c *Config) {
		c.Breaker = config.BreakerSettings{Failures: 3, Cooldown: time.Hour}
	})
	evs, st := fleet[0].streamAll(t, prompt("hi", nil))
	if st.Code() != codes.OK {
		t.Fatalf("A: %v", st)
	}
	if got := transitions(evs); got[len(got)-2] != "MODEL_FALLBACK" {
		t.Fatalf("A: transitions %v, want a fallback", got)
	}
	seen := up.calls.Load()
	if seen < 3 {
		t.Fatalf("the primary saw %d attempts, want ≥ 3", seen)
	}
	for i, e := range fleet[1:] {
		evs, st := e.streamAll(t, prompt("hi", nil))
		if st.Code() != codes.OK {
			t.Fatalf("replica %d: %v", i+1, st)
		}
		if got := transitions(evs); len(got) != 2 || got[0] != "MODEL_FALLBACK" {
			t.Errorf("replica %d: transitions %v, want MODEL_FALLBACK, COMPLETED", i+1, got)
		}
		if d := e.grpc.Completion.breakers.RetryAfter("sim"); d < 59*time.Minute {
			t.Errorf("replica %d: retryAfter %v, want the shared cool-down (≈1h)", i+1, d)
		}
	}
	if got := up.calls.Load(); got != seen {
		t.Errorf("B and C attempted the open primary %d times", got-seen)
	}
}

// holdAll is an upstream that holds every attempt of a request with metaHold
// until release is closed.
func holdAll(up provider.Provider) *holdProvider {
	return &holdProvider{Provider: up, entered: make(chan struct{}, 8), release: make(chan struct{})}
}

// holdStream starts a Stream with key whose attempt e's upstream holds, and
// waits until it is held. wait ends it (once hold is released) and checks it
// ended OK.
func holdStream(t *testing.T, e *testEnv, hold *holdProvider, key string) (wait func()) {
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
		t.Helper()
		if _, s := recvAll(st.Recv); s.Code() != codes.OK {
			t.Errorf("held stream: %v", s)
		}
	}
}

// refusal checks that err is RESOURCE_EXHAUSTED with ErrorInfo reason and
// key ops, message msg, and returns its RetryInfo delay.
func refusal(t *testing.T, err error, reason, msg string) time.Duration {
	t.Helper()
	st := statusOf(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != msg {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED %q", err, msg)
	}
	if info := errorInfo(st); info.GetReason() != reason || info.GetDomain() != ErrorDomain || info.GetMetadata()["key"] != "ops" {
		t.Errorf("ErrorInfo %v, want reason %s, key ops", info, reason)
	}
	return retryDelay(err)
}

func TestFleetKeyLimitsHoldAcrossReplicas(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	rdb := testkit.RedisClient(t, addr)
	t.Run("concurrency", func(t *testing.T) {
		hold := holdAll(sim.New(sim.Config{Words: 4}))
		fleet := fleetEnvs(t, addr, 3, hold, func(c *Config) {
			c.Auth = testKeys()
			c.Limits.KeyMaxConcurrent, c.Limits.KeyRate = 2, 0
			for _, r := range c.Routes {
				r.Timeouts.Idle = 20 * time.Second
			}
		})
		waitA := holdStream(t, fleet[0], hold, "ops-secret-key")
		waitB := holdStream(t, fleet[1], hold, "ops-secret-key")
		if n := rdb.ZCard(t.Context(), "completiond:inflight:ops").Val(); n != 2 {
			t.Errorf("completiond:inflight:ops has %d slots, want 2", n)
		}
		err := complete(t.Context(), fleet[2], "ops-secret-key")
		if d := refusal(t, err, "KEY_CONCURRENCY", `key "ops" runs 2 completions, its limit`); d < guard.ShedRetryDelay || d > 2*guard.ShedRetryDelay {
			t.Errorf("RetryInfo %v, want %v spread by up to as much again", d, guard.ShedRetryDelay)
		}
		if err := complete(t.Context(), fleet[2], "narrow-secret-key"); err != nil {
			t.Errorf("another key on C: %v", err)
		}
		close(hold.release)
		waitA()
		waitB()
		if err := complete(t.Context(), fleet[2], "ops-secret-key"); err != nil {
			t.Errorf("C once A's and B's completions ended: %v", err)
		}
		if n := rdb.ZCard(t.Context(), "completiond:inflight:ops").Val(); n != 0 {
			t.Errorf("%d slots left once every completion ended", n)
		}
	})
	t.Run("rate", func(t *testing.T) {
		fleet := fleetEnvs(t, addr, 3, sim.New(sim.Config{Words: 4}), func(c *Config) {
			c.Auth = testKeys()
			c.Limits.KeyMaxConcurrent, c.Limits.KeyRate, c.Limits.KeyBurst = 0, 0.1, 2 // one per 10 s, two at once
		})
		for i, e := range fleet[:2] {
			if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
				t.Fatalf("replica %d, within the burst: %v", i, err)
			}
		}
		err := complete(t.Context(), fleet[2], "ops-secret-key")
		if d := refusal(t, err, "KEY_RATE", `key "ops" exceeds its rate of 0.1 completions per second`); d <= 5*time.Second || d > 20*time.Second {
			t.Errorf("RetryInfo %v, want about 10s spread by up to 10s", d)
		}
		if err := complete(t.Context(), fleet[2], "narrow-secret-key"); err != nil {
			t.Errorf("another key on C: %v", err)
		}
		if rdb.Exists(t.Context(), "completiond:rate:ops").Val() != 1 {
			t.Error("no completiond:rate:ops in Redis")
		}
	})
}

// TestFleetRedisDownFallsBackLocally: Redis stops while a completion runs;
// the completion ends well, later completions work on every replica, the
// limits and breakers hold locally, and the logs say so.
func TestFleetRedisDownFallsBackLocally(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	up := &flaky{Provider: sim.New(sim.Config{Words: 4})}
	hold := holdAll(up)
	var logs logBuffer
	fleet := fleetEnvs(t, addr, 2, hold, func(c *Config) {
		c.Auth = testKeys()
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Limits.KeyMaxConcurrent, c.Limits.KeyRate, c.Limits.KeyBurst = 1, 1000, 1000
		c.Breaker = config.BreakerSettings{Failures: 3, Cooldown: time.Hour}
		for _, r := range c.Routes {
			r.Timeouts.Idle = 20 * time.Second
		}
	})
	a, b := fleet[0], fleet[1]
	wait := holdStream(t, a, hold, "ops-secret-key")
	if err := complete(t.Context(), b, "ops-secret-key"); statusOf(err).Code() != codes.ResourceExhausted {
		t.Fatalf("B while A runs ops's one completion: %v", err)
	}
	_ = testkit.RedisClient(t, addr).ShutdownNoSave(context.Background()).Err()

	close(hold.release) // the running completion ends after Redis is gone
	wait()
	var worst time.Duration
	for i := range 5 {
		for j, e := range fleet {
			start := time.Now()
			if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
				t.Fatalf("completion %d on replica %d with Redis down: %v", i, j, err)
			}
			worst = max(worst, time.Since(start))
		}
	}
	t.Logf("slowest completion with Redis down: %v", worst)
	if !strings.Contains(logs.String(), "redis unreachable") {
		t.Errorf("no log says Redis is unreachable:\n%s", logs.String())
	}

	// The local breaker: A's failures open A's circuit, B knows nothing.
	up.down.Store(true)
	if err := complete(t.Context(), a, "ops-secret-key"); err != nil {
		t.Fatalf("A with the primary down: %v", err)
	}
	if got := a.grpc.Completion.breakers.Open([]recovery.Route{{Name: "sim"}}); len(got) != 1 {
		t.Errorf("A's local circuit: open %v, want [sim]", got)
	}
	if got := b.grpc.Completion.breakers.Open([]recovery.Route{{Name: "sim"}}); len(got) != 0 {
		t.Errorf("B's local circuit: open %v, want none", got)
	}
	// The local concurrency limit.
	hold.release = make(chan struct{})
	wait = holdStream(t, a, hold, "ops-secret-key")
	if err := complete(t.Context(), a, "ops-secret-key"); statusOf(err).Code() != codes.ResourceExhausted {
		t.Errorf("A over ops's local concurrency: %v", err)
	}
	close(hold.release)
	wait()
}
