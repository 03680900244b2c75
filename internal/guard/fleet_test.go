package guard

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/recovery"
)

// gate is one replica's gate to the Redis at addr, following the server's
// one Redis health tracker.
func gate(t *testing.T, addr string) *RedisGate {
	rdb := testkit.RedisClient(t, addr)
	log := slog.New(slog.DiscardHandler)
	// PINGs far apart, each bounded by as much: on a loaded machine a PING
	// that takes a second must not make the shared state local mid-test.
	h := fleet.NewHealth(rdb, 10*time.Second, log)
	t.Cleanup(h.Close)
	return NewRedisGate(rdb, h, log)
}

// fleetBreakers are n replicas' breakers sharing the Redis at addr, each
// reading the shared states at every Open (TestSharedBreakerView tests the
// view they keep otherwise).
func fleetBreakers(t *testing.T, addr string, n int, s config.BreakerSettings) []*Breakers {
	t.Helper()
	out := make([]*Breakers, n)
	for i := range out {
		out[i] = NewFleetBreakers(s, gate(t, addr))
		out[i].shared.viewFor = 0
	}
	return out
}

// use asks b for a call on route and reports ev if allowed.
func use(b *Breakers, route string, ev recovery.Event) bool {
	report, ok := b.Allow(route)
	if ok {
		report(ev)
	}
	return ok
}

func TestSharedBreakerOpensOnEveryReplica(t *testing.T) {
	testkit.NoLeaks(t)
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
		if got := r.Open(routes); len(got) != 0 {
			t.Fatalf("replica %d sees %v open after two consecutive failures", i, got)
		}
	}
	before := time.Now()
	use(a, "r", failed(recovery.FailTimeout))
	opened := time.Now()
	for i, r := range fleet {
		if got := r.Open(routes); len(got) != 1 || got[0] != "r" {
			t.Fatalf("replica %d sees %v open, want [r]", i, got)
		}
		if _, ok := r.Allow("r"); ok {
			t.Errorf("replica %d let a call through an open circuit", i)
		}
		if d := r.RetryAfter("r"); d < cooldown-time.Since(before) || d > cooldown-time.Since(opened)+10*time.Millisecond {
			t.Errorf("replica %d: retryAfter %v, want the rest of the shared cool-down (≤ %v)", i, d, cooldown)
		}
		if _, ok := r.Allow("other"); !ok {
			t.Errorf("replica %d: another route's circuit must stay closed", i)
		}
	}
	if got := c.States()["r"]; got != int(gobreaker.StateOpen) {
		t.Errorf("replica C's states say %d, want open", got)
	}

	// After the cool-down one probe for the fleet: B's. A and C are
	// refused while it runs and told to come back in probeRetryAfter.
	time.Sleep(time.Until(opened.Add(cooldown + 50*time.Millisecond)))
	probe, ok := b.Allow("r")
	if !ok {
		t.Fatal("no probe after the cool-down")
	}
	for i, r := range []*Breakers{a, c, b} {
		if _, ok := r.Allow("r"); ok {
			t.Errorf("replica %d probed while B's probe runs", i)
		}
		if d := r.RetryAfter("r"); d != probeRetryAfter {
			t.Errorf("replica %d: retryAfter %v while B's probe runs, want %v", i, d, probeRetryAfter)
		}
	}
	// An excluded probe lets the next probe through, on any replica.
	probe(breakerCancelled)
	next, ok := c.Allow("r")
	if !ok {
		t.Fatal("the excluded probe wedged the shared breaker")
	}
	if _, ok := a.Allow("r"); ok {
		t.Error("A probed while C's probe runs")
	}
	next(breakerAnswered)
	for i, r := range fleet {
		if got := r.Open(routes); len(got) != 0 {
			t.Errorf("replica %d sees %v open after a good probe", i, got)
		}
		if d := r.RetryAfter("r"); d != 0 {
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
	testkit.NoLeaks(t)
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
	if got := fleet[0].Open([]recovery.Route{{Name: "r"}}); len(got) != 0 {
		t.Fatalf("open %v after %d failures, threshold %d", got, 3*per, 3*per+1)
	}
	use(fleet[1], "r", failed(recovery.FailServer))
	if got := fleet[2].Open([]recovery.Route{{Name: "r"}}); len(got) != 1 {
		t.Fatalf("closed after %d failures: failures were lost", 3*per+1)
	}
}

// TestSharedBreakerDeadProbeLapses: a replica that dies during its probe
// (it never reports) holds the probe only for the probe lease.
func TestSharedBreakerDeadProbeLapses(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	fleet := fleetBreakers(t, addr, 2, config.BreakerSettings{Failures: 1, Cooldown: 100 * time.Millisecond})
	for _, r := range fleet {
		r.shared.probeLease = 300 * time.Millisecond
	}
	use(fleet[0], "r", failed(recovery.FailServer))
	time.Sleep(150 * time.Millisecond)
	probe, ok := fleet[0].Allow("r")
	if !ok {
		t.Fatal("no probe after the cool-down")
	}
	if _, ok := fleet[1].Allow("r"); ok {
		t.Fatal("B probed while A's probe runs")
	}
	_ = fleet[0].shared.g.rdb.Close() // A dies: it renews its probe lease no more
	died := time.Now()
	for {
		next, ok := fleet[1].Allow("r")
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
	if got := fleet[1].Open([]recovery.Route{{Name: "r"}}); len(got) != 0 {
		t.Errorf("open %v after B's good probe", got)
	}
	probe(breakerAnswered) // ends A's renewal (its report goes nowhere)
}

// TestSharedKeySlotsOfADeadReplicaLapse: a live replica's slot is renewed
// past its TTL; a dead replica's slot lapses after it.
func TestSharedKeySlotsOfADeadReplicaLapse(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	replica := func() *sharedLimits {
		s := NewSharedLimits(gate(t, addr))
		s.slotTTL = ttl
		return s
	}
	a, b := replica(), replica()
	l := config.Limits{KeyMaxConcurrent: 1}
	releaseA, shared, err := a.Admit("ops", l)
	if !shared || err != nil {
		t.Fatalf("A: shared %v, %v", shared, err)
	}
	time.Sleep(3 * ttl)
	var refused *Refusal
	if _, shared, err := b.Admit("ops", l); !shared || !errors.As(err, &refused) || refused.Reason != ReasonKeyConcurrency {
		t.Fatalf("B while A's renewed slot runs: shared %v, %v", shared, err)
	}
	_ = a.g.rdb.Close() // A dies: its slot is renewed no more
	died := time.Now()
	for {
		release, shared, err := b.Admit("ops", l)
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

// TestSharedKeySlotsAfterRedisLostItsData: a Redis that restarts empty
// (here FLUSHALL) loses the slots of a key's running completions; the
// next renewal of A's slot takes it again, and the key is at its maximum
// for B once more.
func TestSharedKeySlotsAfterRedisLostItsData(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	a, b := NewSharedLimits(gate(t, addr)), NewSharedLimits(gate(t, addr))
	a.slotTTL = ttl
	l := config.Limits{KeyMaxConcurrent: 1}
	releaseA, shared, err := a.Admit("ops", l)
	if !shared || err != nil {
		t.Fatalf("A: shared %v, %v", shared, err)
	}
	defer releaseA()
	if err := a.g.rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.g.rdb.ZCard(t.Context(), inflightKey("ops")).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("A's running completion has no slot 5s after Redis lost it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var refused *Refusal
	if _, shared, err := b.Admit("ops", l); !shared || !errors.As(err, &refused) || refused.Reason != ReasonKeyConcurrency {
		t.Fatalf("B once A's slot is back: shared %v, %v; want KEY_CONCURRENCY", shared, err)
	}
}

// TestSharedBreakerAfterRedisLostItsData: a Redis that restarts empty (here
// FLUSHALL) leaves the breakers without a shared state; they seed a closed
// one and count again.
func TestSharedBreakerAfterRedisLostItsData(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	fleet := fleetBreakers(t, addr, 2, config.BreakerSettings{Failures: 2, Cooldown: time.Hour})
	routes := []recovery.Route{{Name: "r"}}
	use(fleet[0], "r", failed(recovery.FailServer))
	use(fleet[0], "r", failed(recovery.FailServer))
	if got := fleet[1].Open(routes); len(got) != 1 {
		t.Fatalf("open %v, want [r]", got)
	}
	if err := testkit.RedisClient(t, addr).FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	for i, r := range fleet {
		if !use(r, "r", failed(recovery.FailServer)) {
			t.Fatalf("replica %d refused a call once the shared state was gone", i)
		}
	}
	for i, r := range fleet {
		if got := r.Open(routes); len(got) != 1 {
			t.Errorf("replica %d: open %v after two failures on the new state, want [r]", i, got)
		}
	}
}

// fakeHealth is a Health whose state the test sets.
type fakeHealth struct {
	up     atomic.Bool
	failed atomic.Int32
}

func (h *fakeHealth) Up() bool { return h.up.Load() }
func (h *fakeHealth) Failed(error) {
	h.failed.Add(1)
	h.up.Store(false)
}

// TestGateFollowsTheOneHealth: the shared state is used exactly while the
// server's Redis health says up, and a failed operation marks it down at
// once (redis.Nil, an answer, does not).
func TestGateFollowsTheOneHealth(t *testing.T) {
	h := &fakeHealth{}
	h.up.Store(true)
	g := NewRedisGate(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), h, slog.New(slog.DiscardHandler))
	if !g.usable() {
		t.Fatal("not usable while the health says up")
	}
	if err := g.observe("get", redis.Nil); err != nil || h.failed.Load() != 0 {
		t.Fatalf("redis.Nil: %v, %d failures", err, h.failed.Load())
	}
	if err := g.observe("get", errors.New("connection refused")); err == nil || h.failed.Load() != 1 {
		t.Fatalf("a failure: %v, %d failures", err, h.failed.Load())
	}
	if g.usable() {
		t.Fatal("usable after a failure, before the health says up")
	}
	h.up.Store(true) // a PING answered
	if !g.usable() {
		t.Fatal("not usable once the health is up again")
	}
	var none *RedisGate
	if none.usable() {
		t.Fatal("a nil gate (no Redis) is usable")
	}
}

// TestSharedBreakerRoundTrips: an attempt through a closed shared breaker
// costs no Redis command while the replica's view of it is fresh (Open
// read it within defaultViewFor), one (its admission) once the view is
// stale; a success with no failure counted reports nothing, and an
// outcome that changes the state costs one more. The admissions of
// several replicas take no lock, so none waits for another.
func TestSharedBreakerRoundTrips(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	b := NewFleetBreakers(config.BreakerSettings{Failures: 3, Cooldown: time.Hour}, gate(t, addr))
	use(b, "warm", failed(recovery.FailServer)) // loads both scripts: a first
	use(b, "warm", breakerAnswered)             // call's NOSCRIPT is not counted
	hook := &testkit.CommandCounter{}
	b.shared.g.rdb.AddHook(hook)
	routes := []recovery.Route{{Name: "r"}}
	cases := []struct {
		name  string
		fresh bool // the view is fresh: Open just read it
		ev    recovery.Event
		want  int64
	}{
		{"stale view, answered, no failure counted", false, breakerAnswered, 1},
		{"stale view, excluded", false, failed(recovery.FailRateLimit), 1},
		{"stale view, failed: counted", false, failed(recovery.FailServer), 2},
		{"stale view, answered after a failure: clears it", false, breakerAnswered, 2},
		{"fresh view, answered", true, breakerAnswered, 0},
		{"fresh view, failed: counted", true, failed(recovery.FailServer), 1},
		{"fresh view, answered after a failure: clears it", true, breakerAnswered, 1},
	}
	for _, c := range cases {
		b.shared.viewFor = 0
		if c.fresh {
			b.shared.viewFor = time.Hour
			b.Open(routes)
		}
		before := hook.Count()
		if !use(b, "r", c.ev) {
			t.Fatalf("%s: refused on a closed circuit", c.name)
		}
		if got := hook.Count() - before; got != c.want {
			t.Errorf("%s: %d commands, want %d", c.name, got, c.want)
		}
	}
	// The successes cleared the failures: two more do not open the circuit.
	b.shared.viewFor = 0
	use(b, "r", failed(recovery.FailServer))
	use(b, "r", failed(recovery.FailServer))
	if got := b.Open(routes); len(got) != 0 {
		t.Fatalf("open %v after a success and two failures (threshold 3)", got)
	}
}

// TestSharedBreakerIgnoresAnOlderGeneration: the outcome of a call admitted
// before the circuit opened (or before a probe closed it) changes nothing
// when it ends.
func TestSharedBreakerIgnoresAnOlderGeneration(t *testing.T) {
	testkit.NoLeaks(t)
	fleet := fleetBreakers(t, redistest.Start(t), 2, config.BreakerSettings{Failures: 2, Cooldown: 200 * time.Millisecond})
	a, b := fleet[0], fleet[1]
	routes := []recovery.Route{{Name: "r"}}
	slow, ok := a.Allow("r") // admitted in the first generation, ends late
	slower, ok2 := b.Allow("r")
	if !ok || !ok2 {
		t.Fatal("refused on a closed circuit")
	}
	use(b, "r", failed(recovery.FailServer))
	use(b, "r", failed(recovery.FailServer))
	if got := a.Open(routes); len(got) != 1 {
		t.Fatalf("open %v after two failures, want [r]", got)
	}
	slow(breakerAnswered) // an older generation: must not close the circuit
	if got := b.Open(routes); len(got) != 1 {
		t.Fatalf("a success admitted before the circuit opened closed it: open %v", got)
	}
	time.Sleep(250 * time.Millisecond)
	probe, ok := b.Allow("r")
	if !ok {
		t.Fatal("no probe after the cool-down")
	}
	probe(breakerAnswered)
	slower(failed(recovery.FailServer)) // admitted before the circuit opened: not counted
	use(a, "r", failed(recovery.FailServer))
	if got := a.Open(routes); len(got) != 0 {
		t.Fatalf("open %v after one failure of the closed circuit's generation (threshold 2)", got)
	}
	use(a, "r", failed(recovery.FailServer))
	if got := b.Open(routes); len(got) != 1 {
		t.Fatalf("open %v after two failures in a row, want [r]", got)
	}
}

// TestSharedBreakerView: a replica goes by the states it last learnt for
// defaultViewFor: Open answers from them, and Allow admits through a
// circuit seen closed. A circuit another replica opened is seen once the
// view is that old; this replica's own admissions and reports replace the
// view at once.
func TestSharedBreakerView(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	replica := func() *Breakers {
		b := NewFleetBreakers(config.BreakerSettings{Failures: 1, Cooldown: time.Hour}, gate(t, addr))
		b.now = now
		return b
	}
	a, b := replica(), replica()
	r := []recovery.Route{{Name: "r"}}
	if got := b.Open(r); len(got) != 0 { // B's view of r: closed
		t.Fatalf("open %v on a fresh breaker", got)
	}
	use(a, "r", failed(recovery.FailServer))
	if got := a.Open(r); len(got) != 1 {
		t.Fatalf("A opened the circuit and sees %v open, want [r] at once", got)
	}
	if _, ok := a.Allow("r"); ok {
		t.Fatal("A let a call through the circuit it opened")
	}
	if got := replica().Open(r); len(got) != 1 {
		t.Fatalf("a replica with no view sees %v open, want [r]", got)
	}
	advance(defaultViewFor / 2)
	if got := b.Open(r); len(got) != 0 {
		t.Fatalf("B read the state again within its view's time: open %v", got)
	}
	if report, ok := b.Allow("r"); !ok {
		t.Fatal("B's admission read the state within its view's time")
	} else {
		report(failed(recovery.FailServer)) // of the closed generation: ignored
	}
	advance(defaultViewFor / 2)
	if got := b.Open(r); len(got) != 1 {
		t.Fatalf("B's view did not end after %v: open %v, want [r]", defaultViewFor, got)
	}
	if _, ok := b.Allow("r"); ok {
		t.Fatal("B let a call through an open circuit it has seen")
	}
	if d := b.RetryAfter("r"); d <= 0 || d > time.Hour {
		t.Errorf("B: retry after %v, want the rest of the hour's cool-down", d)
	}
}
