package service

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

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
func fleetBreakers(t *testing.T, addr string, n int, s BreakerSettings) []*breakers {
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
	fleet := fleetBreakers(t, redistest.Start(t), 3, BreakerSettings{Failures: 3, Cooldown: cooldown})
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
	use(a, "r", failed(recovery.FailTimeout))
	opened := time.Now()
	for i, r := range fleet {
		if got := r.open(routes); len(got) != 1 || got[0] != "r" {
			t.Fatalf("replica %d sees %v open, want [r]", i, got)
		}
		if _, ok := r.allow("r"); ok {
			t.Errorf("replica %d let a call through an open circuit", i)
		}
		if d := r.retryAfter("r"); d <= cooldown-time.Since(opened)-50*time.Millisecond || d > cooldown {
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
	fleet := fleetBreakers(t, redistest.Start(t), 3, BreakerSettings{Failures: 3*per + 1, Cooldown: time.Hour})
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
	fleet := fleetBreakers(t, addr, 2, BreakerSettings{Failures: 1, Cooldown: 100 * time.Millisecond})
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
	if time.Since(died) < 250*time.Millisecond {
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
		c.Breaker = BreakerSettings{Failures: 3, Cooldown: time.Hour}
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
