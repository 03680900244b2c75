package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// noLeaks checks, when t ends (after its other cleanups), that the
// goroutines t started are gone: renewals, Redis clients, servers.
func noLeaks(t *testing.T) {
	t.Helper()
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, current) })
}

// redisClient is a client of addr, one per replica as in a fleet; closed
// when t ends.
func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

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

// fleetBreakers are n replicas' breakers sharing the Redis at addr.
func fleetBreakers(t *testing.T, addr string, n int, s config.BreakerSettings) []*breakers {
	t.Helper()
	out := make([]*breakers, n)
	for i := range out {
		out[i] = newFleetBreakers(s, newRedisGate(redisClient(t, addr), slog.New(slog.DiscardHandler)))
	}
	return out
}

// use asks b for a call on route and reports ev if allowed.
func use(b *breakers, route string, ev recovery.Event) bool {
	report, ok := b.allow(route)
	if ok {
		report(ev)
	}
	return ok
}

func TestSharedBreakerOpensOnEveryReplica(t *testing.T) {
	noLeaks(t)
	const cooldown = 2 * time.Second
	fleet := fleetBreakers(t, redistest.Start(t), 3, config.BreakerSettings{Failures: 3, Cooldown: cooldown})
	a, b, c := fleet[0], fleet[1], fleet[2]
	routes := []recovery.Route{{Name: "r"}, {Name: "other"}}

	// Two failures through A, an answer through B resets the count for
	// all, then three failures through A open the circuit everywhere.
	use(a, "r", failed(recovery.FailServer))
	use(a, "r", failed(recovery.FailServer))
	use(b, "r", breakerAnswered)
	use(c, "r", failed(recovery.FailRateLimit)) // excluded: says nothing
	use(a, "r", failed(recovery.FailServer))
	use(a, "r", failed(recovery.FailServer))
	for i, r := range fleet {
		if got := r.open(routes); len(got) != 0 {
			t.Fatalf("replica %d sees %v open after two consecutive failures", i, got)
		}
	}
	before := time.Now()
	use(a, "r", failed(recovery.FailTimeout))
	opened := time.Now()
	for i, r := range fleet {
		if got := r.open(routes); len(got) != 1 || got[0] != "r" {
			t.Fatalf("replica %d sees %v open, want [r]", i, got)
		}
		if _, ok := r.allow("r"); ok {
			t.Errorf("replica %d let a call through an open circuit", i)
		}
		if d := r.retryAfter("r"); d < cooldown-time.Since(before) || d > cooldown-time.Since(opened)+10*time.Millisecond {
			t.Errorf("replica %d: retryAfter %v, want the rest of the shared cool-down (≤ %v)", i, d, cooldown)
		}
		if _, ok := r.allow("other"); !ok {
			t.Errorf("replica %d: another route's circuit must stay closed", i)
		}
	}
	if got := c.states()["r"]; got != int(gobreaker.StateOpen) {
		t.Errorf("replica C's states say %d, want open", got)
	}

	// After the cool-down one probe for the fleet: B's. A and C are
	// refused while it runs and told to come back in probeRetryAfter.
	time.Sleep(time.Until(opened.Add(cooldown + 50*time.Millisecond)))
	probe, ok := b.allow("r")
	if !ok {
		t.Fatal("no probe after the cool-down")
	}
	for i, r := range []*breakers{a, c, b} {
		if _, ok := r.allow("r"); ok {
			t.Errorf("replica %d probed while B's probe runs", i)
		}
		if d := r.retryAfter("r"); d != probeRetryAfter {
			t.Errorf("replica %d: retryAfter %v while B's probe runs, want %v", i, d, probeRetryAfter)
		}
	}
	// An excluded probe lets the next probe through, on any replica.
	probe(breakerCancelled)
	next, ok := c.allow("r")
	if !ok {
		t.Fatal("the excluded probe wedged the shared breaker")
	}
	if _, ok := a.allow("r"); ok {
		t.Error("A probed while C's probe runs")
	}
	next(breakerAnswered)
	for i, r := range fleet {
		if got := r.open(routes); len(got) != 0 {
			t.Errorf("replica %d sees %v open after a good probe", i, got)
		}
		if d := r.retryAfter("r"); d != 0 {
			t.Errorf("replica %d: retryAfter %v on a closed circuit", i, d)
		}
	}
	if !use(a, "r", breakerAnswered) {
		t.Error("A refused after the circuit closed")
	}
}

// TestSharedBreakerCountsConcurrentFailures: failures reported at once on
// three replicas are all counted (gobreaker's own Execute reads the state
// outside its lock and would lose some).
func TestSharedBreakerCountsConcurrentFailures(t *testing.T) {
	noLeaks(t)
	const per = 10
	fleet := fleetBreakers(t, redistest.Start(t), 3, config.BreakerSettings{Failures: 3*per + 1, Cooldown: time.Hour})
	var wg sync.WaitGroup
	for _, r := range fleet {
		wg.Go(func() {
			for range per {
				if !use(r, "r", failed(recovery.FailServer)) {
					t.Error("a call was refused before the threshold")
				}
			}
		})
	}
	wg.Wait()
	if got := fleet[0].open([]recovery.Route{{Name: "r"}}); len(got) != 0 {
		t.Fatalf("open %v after %d failures, threshold %d", got, 3*per, 3*per+1)
	}
	use(fleet[1], "r", failed(recovery.FailServer))
	if got := fleet[2].open([]recovery.Route{{Name: "r"}}); len(got) != 1 {
		t.Fatalf("closed after %d failures: failures were lost", 3*per+1)
	}
}

// TestSharedBreakerDeadProbeLapses: a replica that dies during its probe
// (it never reports) holds the probe only for the probe lease.
func TestSharedBreakerDeadProbeLapses(t *testing.T) {
	noLeaks(t)
	addr := redistest.Start(t)
	fleet := fleetBreakers(t, addr, 2, config.BreakerSettings{Failures: 1, Cooldown: 100 * time.Millisecond})
	for _, r := range fleet {
		r.shared.probeLease = 300 * time.Millisecond
	}
	use(fleet[0], "r", failed(recovery.FailServer))
	time.Sleep(150 * time.Millisecond)
	probe, ok := fleet[0].allow("r")
	if !ok {
		t.Fatal("no probe after the cool-down")
	}
	if _, ok := fleet[1].allow("r"); ok {
		t.Fatal("B probed while A's probe runs")
	}
	_ = fleet[0].shared.g.rdb.Close() // A dies: it renews its probe lease no more
	died := time.Now()
	for {
		next, ok := fleet[1].allow("r")
		if ok {
			t.Logf("B probed %v after A died (lease 300ms)", time.Since(died).Round(time.Millisecond))
			next(breakerAnswered)
			break
		}
		if time.Since(died) > 2*time.Second {
			t.Fatal("A's dead probe wedged the circuit half-open")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Since(died) < 150*time.Millisecond { // the last renewal was at most 100ms before A died
		t.Errorf("B probed %v after A died, before A's lease lapsed", time.Since(died))
	}
	if got := fleet[1].open([]recovery.Route{{Name: "r"}}); len(got) != 0 {
		t.Errorf("open %v after B's good probe", got)
	}
	probe(breakerAnswered) // ends A's renewal (its report goes nowhere)
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
		rdb := redisClient(t, addr)
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
	noLeaks(t)
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
		if d := e.grpc.Completion.breakers.retryAfter("sim"); d < 59*time.Minute {
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
	noLeaks(t)
	addr := redistest.Start(t)
	rdb := redisClient(t, addr)
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
		if d := refusal(t, err, "KEY_CONCURRENCY", `key "ops" runs 2 completions, its limit`); d != shedRetryDelay {
			t.Errorf("RetryInfo %v, want %v", d, shedRetryDelay)
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
		if d := refusal(t, err, "KEY_RATE", `key "ops" exceeds its rate of 0.1 completions per second`); d <= 5*time.Second || d > 10*time.Second {
			t.Errorf("RetryInfo %v, want about 10s", d)
		}
		if err := complete(t.Context(), fleet[2], "narrow-secret-key"); err != nil {
			t.Errorf("another key on C: %v", err)
		}
		if rdb.Exists(t.Context(), "completiond:rate:ops").Val() != 1 {
			t.Error("no completiond:rate:ops in Redis")
		}
	})
}

// TestSharedKeySlotsOfADeadReplicaLapse: a live replica's slot is renewed
// past its TTL; a dead replica's slot lapses after it.
func TestSharedKeySlotsOfADeadReplicaLapse(t *testing.T) {
	noLeaks(t)
	addr := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	replica := func() *sharedLimits {
		s := newSharedLimits(newRedisGate(redisClient(t, addr), slog.New(slog.DiscardHandler)))
		s.slotTTL = ttl
		return s
	}
	a, b := replica(), replica()
	l := config.Limits{KeyMaxConcurrent: 1}
	releaseA, shared, err := a.admit("ops", l)
	if !shared || err != nil {
		t.Fatalf("A: shared %v, %v", shared, err)
	}
	time.Sleep(3 * ttl)
	var refused *Refusal
	if _, shared, err := b.admit("ops", l); !shared || !errors.As(err, &refused) || refused.Reason != ReasonKeyConcurrency {
		t.Fatalf("B while A's renewed slot runs: shared %v, %v", shared, err)
	}
	_ = a.g.rdb.Close() // A dies: its slot is renewed no more
	died := time.Now()
	for {
		release, shared, err := b.admit("ops", l)
		if shared && err == nil {
			t.Logf("A's slot lapsed %v after it died (TTL %v)", time.Since(died).Round(time.Millisecond), ttl)
			release()
			break
		}
		if time.Since(died) > 3*time.Second {
			t.Fatal("the dead replica's slot never lapsed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Since(died) < ttl/2 {
		t.Errorf("A's slot went %v after A died, before its TTL", time.Since(died))
	}
	releaseA() // ends A's renewal
}

// TestFleetRedisDownFallsBackLocally: Redis stops while a completion runs;
// the completion ends well, later completions work on every replica, the
// limits and breakers hold locally, and the logs say so.
func TestFleetRedisDownFallsBackLocally(t *testing.T) {
	noLeaks(t)
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
	_ = redisClient(t, addr).ShutdownNoSave(context.Background()).Err()

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
	if got := a.grpc.Completion.breakers.open([]recovery.Route{{Name: "sim"}}); len(got) != 1 {
		t.Errorf("A's local circuit: open %v, want [sim]", got)
	}
	if got := b.grpc.Completion.breakers.open([]recovery.Route{{Name: "sim"}}); len(got) != 0 {
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

// TestSharedBreakerAfterRedisLostItsData: a Redis that restarts empty (here
// FLUSHALL) leaves the breakers without a shared state; they seed a closed
// one and count again.
func TestSharedBreakerAfterRedisLostItsData(t *testing.T) {
	noLeaks(t)
	addr := redistest.Start(t)
	fleet := fleetBreakers(t, addr, 2, config.BreakerSettings{Failures: 2, Cooldown: time.Hour})
	routes := []recovery.Route{{Name: "r"}}
	use(fleet[0], "r", failed(recovery.FailServer))
	use(fleet[0], "r", failed(recovery.FailServer))
	if got := fleet[1].open(routes); len(got) != 1 {
		t.Fatalf("open %v, want [r]", got)
	}
	if err := redisClient(t, addr).FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	for i, r := range fleet {
		if !use(r, "r", failed(recovery.FailServer)) {
			t.Fatalf("replica %d refused a call once the shared state was gone", i)
		}
	}
	for i, r := range fleet {
		if got := r.open(routes); len(got) != 1 {
			t.Errorf("replica %d: open %v after two failures on the new state, want [r]", i, got)
		}
	}
}
