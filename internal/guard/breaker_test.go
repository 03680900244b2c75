package guard

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/recovery"
)

func failed(kind recovery.FailureKind) recovery.Event {
	return recovery.Event{Kind: recovery.EvAttemptFailed, Failure: &recovery.Failure{Kind: kind}}
}

var (
	breakerAnswered  = recovery.Event{Kind: recovery.EvAttemptDone, StopReason: recovery.StopEndTurn}
	breakerCancelled = recovery.Event{Kind: recovery.EvCancelled, Reason: "client went away"}
)

// useBreaker asks route a of b for a call and, if allowed, reports ev.
func useBreaker(b *Breakers, ev recovery.Event) bool {
	report, ok := b.Allow("a")
	if ok {
		report(ev)
	}
	return ok
}

func TestBreakerOutcome(t *testing.T) {
	tests := []struct {
		name string
		ev   recovery.Event
		want error
	}{
		{"answered", breakerAnswered, nil},
		{"answered, truncated", recovery.Event{Kind: recovery.EvAttemptDone, StopReason: recovery.StopMaxTokens}, nil},
		{"cancelled", breakerCancelled, errNotTheRoute},
		{"failure without a Failure", recovery.Event{Kind: recovery.EvAttemptFailed}, errNotTheRoute},
		{"wait elapsed (never reported)", recovery.Event{Kind: recovery.EvWaitElapsed}, errNotTheRoute},
		{"connection", failed(recovery.FailConnection), errUpstreamFailed},
		{"timeout", failed(recovery.FailTimeout), errUpstreamFailed},
		{"server", failed(recovery.FailServer), errUpstreamFailed},
		{"overloaded", failed(recovery.FailOverloaded), errUpstreamFailed},
		{"stream broken", failed(recovery.FailStreamBroken), errUpstreamFailed},
		{"unknown", failed(recovery.FailUnknown), errNotTheRoute},
		{"rate limit", failed(recovery.FailRateLimit), errNotTheRoute},
		{"quota", failed(recovery.FailQuota), errNotTheRoute},
		{"invalid request", failed(recovery.FailInvalidRequest), errNotTheRoute},
		{"auth", failed(recovery.FailAuth), errNotTheRoute},
		{"not found", failed(recovery.FailNotFound), errNotTheRoute},
		{"content filter", failed(recovery.FailContentFilter), errNotTheRoute},
		{"prompt too long", failed(recovery.FailPromptTooLong), errNotTheRoute},
		{"context limit", failed(recovery.FailContextLimit), errNotTheRoute},
		{"media", failed(recovery.FailMedia), errNotTheRoute},
		{"prefill rejected", failed(recovery.FailPrefillRejected), errNotTheRoute},
		{"circuit open", failed(recovery.FailCircuitOpen), errNotTheRoute},
		{"replica lost (never reported: no call failed)", failed(recovery.FailReplicaLost), errNotTheRoute},
	}
	kinds := map[recovery.FailureKind]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := breakerOutcome(tt.ev); !errors.Is(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("breakerOutcome = %v, want %v", got, tt.want)
			}
		})
		if tt.ev.Kind == recovery.EvAttemptFailed && tt.ev.Failure != nil {
			kinds[tt.ev.Failure.Kind] = true
		}
	}
	// A new failure kind must be placed in the table: decide what it says
	// about the route.
	for k := recovery.FailUnknown; k == recovery.FailUnknown || k.String() != "unknown"; k++ {
		if !kinds[k] {
			t.Errorf("failure kind %v is not in the table", k)
		}
	}
}

func TestBreakerOpensOnUpstreamFailuresOnly(t *testing.T) {
	b := newBreakers(config.BreakerSettings{Failures: 3, Cooldown: time.Hour})
	// Back-pressure, bad requests and cancellations say nothing about the route.
	for _, ev := range []recovery.Event{failed(recovery.FailRateLimit), failed(recovery.FailInvalidRequest),
		breakerCancelled, failed(recovery.FailRateLimit), failed(recovery.FailAuth), failed(recovery.FailNotFound)} {
		useBreaker(b, ev)
	}
	if b.States()["a"] != 0 {
		t.Fatal("the circuit opened on failures that are not the route's")
	}
	for range 3 {
		useBreaker(b, failed(recovery.FailServer))
	}
	if b.States()["a"] != 2 {
		t.Fatalf("state %d after 3 server failures, want open (2)", b.States()["a"])
	}
	if useBreaker(b, breakerAnswered) {
		t.Error("an open circuit let a call through")
	}
	if _, ok := b.Allow("b"); !ok {
		t.Error("another route's circuit must stay closed")
	}
}

// TestBreakerExcludedOutcomesKeepTheFailureCount checks that outcomes which
// say nothing about the route neither count as failures nor reset the
// consecutive-failure count, while a real answer does reset it.
func TestBreakerExcludedOutcomesKeepTheFailureCount(t *testing.T) {
	server, ratelimit, invalid := failed(recovery.FailServer), failed(recovery.FailRateLimit), failed(recovery.FailInvalidRequest)
	tests := []struct {
		name string
		evs  []recovery.Event
		want int // circuit state after evs: 0 closed, 2 open
	}{
		{"three failures", []recovery.Event{server, server, server}, 2},
		{"429s and 400s between failures", []recovery.Event{server, ratelimit, invalid, ratelimit, server, invalid, invalid, server}, 2},
		{"cancellations and refused prefills between failures",
			[]recovery.Event{failed(recovery.FailTimeout), breakerCancelled, failed(recovery.FailPrefillRejected), breakerCancelled,
				failed(recovery.FailConnection), breakerCancelled, failed(recovery.FailOverloaded)}, 2},
		{"auth, not found, quota between failures",
			[]recovery.Event{server, failed(recovery.FailAuth), server, failed(recovery.FailNotFound), failed(recovery.FailQuota), server}, 2},
		{"only excluded outcomes", []recovery.Event{ratelimit, invalid, breakerCancelled, ratelimit, invalid, breakerCancelled}, 0},
		{"an answer resets the count", []recovery.Event{server, server, breakerAnswered, server, server}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreakers(config.BreakerSettings{Failures: 3, Cooldown: time.Hour})
			for i, ev := range tt.evs {
				if !useBreaker(b, ev) {
					t.Fatalf("call %d refused", i)
				}
			}
			if got := b.States()["a"]; got != tt.want {
				t.Errorf("state %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBreakerProbesAfterCooldownAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // gobreaker reads the clock: the bubble's is fake
		b := newBreakers(config.BreakerSettings{Failures: 1, Cooldown: 30 * time.Second})
		report, _ := b.Allow("a")
		report(failed(recovery.FailConnection))
		if _, ok := b.Allow("a"); ok {
			t.Fatal("open circuit allowed a call")
		}
		time.Sleep(29 * time.Second)
		if _, ok := b.Allow("a"); ok {
			t.Fatal("a call went through before the cooldown ended")
		}
		time.Sleep(2 * time.Second)
		probe, ok := b.Allow("a")
		if !ok {
			t.Fatal("no probe after the cooldown")
		}
		if _, ok := b.Allow("a"); ok {
			t.Error("a second call went through while the probe runs")
		}
		probe(breakerAnswered)
		if b.States()["a"] != 0 {
			t.Errorf("state %d after a good probe, want closed", b.States()["a"])
		}
	})
}

// TestBreakerExcludedProbeLetsTheNextProbeThrough checks that a half-open
// probe whose outcome says nothing about the route neither closes the
// circuit nor wedges it: the next call is the new probe, and only a real
// answer closes the circuit (a real failure reopens it).
func TestBreakerExcludedProbeLetsTheNextProbeThrough(t *testing.T) {
	tests := []struct {
		name     string
		excluded recovery.Event
		then     recovery.Event
		want     int // state after then: 0 closed, 2 open
	}{
		{"cancelled, then answered", breakerCancelled, breakerAnswered, 0},
		{"cancelled, then failed", breakerCancelled, failed(recovery.FailServer), 2},
		{"rate limited, then answered", failed(recovery.FailRateLimit), breakerAnswered, 0},
		{"invalid request, then failed", failed(recovery.FailInvalidRequest), failed(recovery.FailTimeout), 2},
		{"prefill rejected, then answered", failed(recovery.FailPrefillRejected), breakerAnswered, 0},
		{"auth, then answered", failed(recovery.FailAuth), breakerAnswered, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const cooldown = 30 * time.Second
				b := newBreakers(config.BreakerSettings{Failures: 1, Cooldown: cooldown})
				useBreaker(b, failed(recovery.FailServer))
				time.Sleep(cooldown + time.Second)

				probe, ok := b.Allow("a")
				if !ok {
					t.Fatal("no probe after the cooldown")
				}
				if _, ok := b.Allow("a"); ok {
					t.Fatal("a second call went through while the probe runs")
				}
				if got := b.RetryAfter("a"); got != probeRetryAfter {
					t.Errorf("retryAfter %v while the probe runs, want %v", got, probeRetryAfter)
				}
				probe(tt.excluded)
				if got := b.States()["a"]; got != 1 {
					t.Fatalf("state %d after an excluded probe, want half-open (1)", got)
				}
				if got := b.RetryAfter("a"); got != 0 {
					t.Errorf("retryAfter %v while half-open with no probe, want 0", got)
				}

				next, ok := b.Allow("a")
				if !ok {
					t.Fatal("the excluded probe wedged the breaker: no next probe")
				}
				if _, ok := b.Allow("a"); ok {
					t.Error("a second call went through while the next probe runs")
				}
				next(tt.then)
				if got := b.States()["a"]; got != tt.want {
					t.Fatalf("state %d after the next probe, want %d", got, tt.want)
				}
				if tt.want == 2 {
					if got := b.RetryAfter("a"); got != cooldown {
						t.Errorf("retryAfter %v just after reopening, want %v", got, cooldown)
					}
				}
			})
		})
	}
}

// TestBreakerRetryAfter checks the remaining cool-down against an injected
// clock. gobreaker keeps real time: with an hour's cool-down the circuit
// stays open through the test whatever the injected clock says.
func TestBreakerRetryAfter(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		failures int
		evs      []recovery.Event // reported at epoch
		elapsed  time.Duration    // then the injected clock moves by this
		route    string
		want     time.Duration
	}{
		{"unknown route", 1, nil, 0, "nowhere", 0},
		{"closed", 3, []recovery.Event{failed(recovery.FailServer)}, 0, "a", 0},
		{"just opened", 1, []recovery.Event{failed(recovery.FailServer)}, 0, "a", time.Hour},
		{"opened ten minutes ago", 1, []recovery.Event{failed(recovery.FailServer)}, 10 * time.Minute, "a", 50 * time.Minute},
		{"cool-down over by the injected clock", 1, []recovery.Event{failed(recovery.FailServer)}, 2 * time.Hour, "a", 0},
		{"another route's circuit", 1, []recovery.Event{failed(recovery.FailServer)}, 0, "b", 0},
		{"disabled", -1, []recovery.Event{failed(recovery.FailServer)}, 0, "a", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreakers(config.BreakerSettings{Failures: tt.failures, Cooldown: time.Hour})
			clock := epoch
			b.now = func() time.Time { return clock }
			report, ok := b.Allow("b") // route b is known and closed
			if !ok {
				t.Fatal("route b refused a call")
			}
			report(breakerAnswered)
			for _, ev := range tt.evs {
				useBreaker(b, ev)
			}
			clock = clock.Add(tt.elapsed)
			if got := b.RetryAfter(tt.route); got != tt.want {
				t.Errorf("retryAfter(%q) = %v, want %v", tt.route, got, tt.want)
			}
		})
	}
}

// TestBreakerConcurrentUse hammers one route from several goroutines with a
// cool-down short enough for the circuit to open, half-open and close under
// them, so that -race and the lock order of OnStateChange are exercised.
func TestBreakerConcurrentUse(t *testing.T) {
	b := newBreakers(config.BreakerSettings{Failures: 2, Cooldown: time.Microsecond})
	routes := []recovery.Route{{Name: "a"}, {Name: "b"}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				ev := breakerAnswered
				switch (g + i) % 3 {
				case 0:
					ev = failed(recovery.FailServer)
				case 1:
					ev = breakerCancelled
				}
				useBreaker(b, ev)
				_ = b.RetryAfter("a")
				_ = b.States()
				_ = b.Open(routes)
			}
		})
	}
	wg.Wait()
}

func TestBreakersCanBeDisabled(t *testing.T) {
	b := newBreakers(config.BreakerSettings{Failures: -1})
	for range 20 {
		report, ok := b.Allow("a")
		if !ok {
			t.Fatal("disabled breaker refused a call")
		}
		report(failed(recovery.FailServer))
	}
	if got := b.Open([]recovery.Route{{Name: "a"}}); got != nil {
		t.Errorf("disabled breakers report open routes %v", got)
	}
	if got := b.RetryAfter("a"); got != 0 {
		t.Errorf("disabled breakers ask to retry after %v", got)
	}
}
