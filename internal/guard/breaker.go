package guard

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/recovery"
)

// probeRetryAfter is what retryAfter answers while a half-open circuit's
// probe is in flight: the probe's outcome is not known yet, so the caller is
// told to come back shortly rather than after a whole cool-down.
const probeRetryAfter = time.Second

var (
	// errUpstreamFailed is what the breaker is told about an attempt that
	// counts against the route.
	errUpstreamFailed = errors.New("upstream failed")
	// errNotTheRoute is what the breaker is told about an attempt whose
	// outcome says nothing about the route's health: it is excluded, counted
	// neither as a success nor as a failure.
	errNotTheRoute = errors.New("outcome says nothing about the route")
)

// Breakers holds one circuit breaker per route, shared by all completions.
type Breakers struct {
	settings config.BreakerSettings
	// now is the clock retryAfter measures the cool-down with (time.Now by
	// default). gobreaker reads time.Now itself to end the cool-down.
	now     func() time.Time
	mu      sync.Mutex
	byRoute map[string]*routeBreaker // the local breakers
	// shared, with Config.Redis, are the fleet's breakers in Redis; the
	// local ones answer whenever the shared ones cannot.
	shared *sharedBreakers
}

// routeBreaker is one route's circuit breaker and when it last opened.
type routeBreaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	// mu guards openedAt. OnStateChange takes it while gobreaker holds its
	// own lock, so mu is never held around a call into cb.
	mu       sync.Mutex
	openedAt time.Time
}

func newBreakers(s config.BreakerSettings) *Breakers {
	if s.Failures == 0 {
		s.Failures = 5
	}
	if s.Cooldown <= 0 {
		s.Cooldown = 30 * time.Second
	}
	return &Breakers{settings: s, now: time.Now, byRoute: map[string]*routeBreaker{}}
}

// NewFleetBreakers are newBreakers shared through g's Redis (local-only
// when g is nil).
func NewFleetBreakers(s config.BreakerSettings, g *RedisGate) *Breakers {
	b := newBreakers(s)
	b.shared = newSharedBreakers(g, b.settings, func() time.Time { return b.now() })
	return b
}

// gobreakerSettings are the settings of route's local breaker (the
// shared ones keep the same rule in Redis: breaker_shared.go).
func (b *Breakers) gobreakerSettings(route string) gobreaker.Settings {
	failures := uint32(b.settings.Failures)
	return gobreaker.Settings{
		Name:        route,
		MaxRequests: 1,
		Timeout:     b.settings.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// An excluded outcome leaves the counts alone. In the half-open
		// state gobreaker subtracts it from the requests in flight, so
		// an excluded probe lets the next probe through.
		IsExcluded: func(err error) bool { return errors.Is(err, errNotTheRoute) },
	}
}

// useShared reports whether to ask the shared breakers now.
func (b *Breakers) useShared() bool { return b.shared != nil && b.shared.g.usable() }

// fallBack logs, at debug level, that the local breakers answered a call the
// shared ones could not (a Redis failure is logged by the gate, once).
func (b *Breakers) fallBack(route string, err error) {
	b.shared.g.log.Debug("circuit breaker: local state answers", "route", route, "error", err)
}

func (b *Breakers) disabled() bool { return b == nil || b.settings.Failures < 0 }

// lookup returns route's breaker, or nil if route has never been called.
func (b *Breakers) lookup(route string) *routeBreaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byRoute[route]
}

func (b *Breakers) get(route string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	b.mu.Lock()
	defer b.mu.Unlock()
	rb, ok := b.byRoute[route]
	if !ok {
		rb = &routeBreaker{}
		st := b.gobreakerSettings(route)
		st.OnStateChange = func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				rb.mu.Lock()
				rb.openedAt = b.now()
				rb.mu.Unlock()
			}
		}
		rb.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
		b.byRoute[route] = rb
	}
	return rb.cb
}

// Allow asks route's breaker for a call. When the circuit is open, or
// half-open with its probe in flight, it returns false; otherwise report
// must be called exactly once with the attempt's outcome (see
// breakerOutcome).
func (b *Breakers) Allow(route string) (report func(recovery.Event), ok bool) {
	if b.disabled() {
		return func(recovery.Event) {}, true
	}
	if b.useShared() {
		report, ok, err := b.shared.Allow(route)
		if err == nil {
			return report, ok
		}
		b.fallBack(route, err)
	}
	done, err := b.get(route).Allow()
	if err != nil {
		return nil, false
	}
	return func(ev recovery.Event) { done(breakerOutcome(ev)) }, true
}

// RetryAfter returns how long until route's breaker lets a call through
// again, for the RetryInfo of a refused call:
//
//   - open: what is left of the cool-down since the circuit opened, measured
//     with b.now and floored at 0;
//   - half-open with its probe in flight: probeRetryAfter (1 s), since the
//     circuit closes or reopens as soon as the probe ends;
//   - otherwise (closed, half-open awaiting a probe, unknown route, breakers
//     disabled): 0, a call would be let through now.
//
// A shared breaker answers from the shared state: the cool-down of the
// fleet's circuit, whichever replica opened it, measured with b.now against
// the expiry that replica set; probeRetryAfter while any replica's probe
// runs.
func (b *Breakers) RetryAfter(route string) time.Duration {
	if b.disabled() {
		return 0
	}
	if b.useShared() {
		d, err := b.shared.RetryAfter(route, b.now())
		if err == nil {
			return d
		}
		b.fallBack(route, err)
	}
	rb := b.lookup(route)
	if rb == nil {
		return 0
	}
	switch rb.cb.State() {
	case gobreaker.StateOpen:
		rb.mu.Lock()
		openedAt := rb.openedAt
		rb.mu.Unlock()
		return max(0, b.settings.Cooldown-b.now().Sub(openedAt))
	case gobreaker.StateHalfOpen:
		if c := rb.cb.Counts(); c.Requests > c.TotalExclusions {
			return probeRetryAfter
		}
	}
	return 0
}

// breakerOutcome says what an attempt's outcome tells route's breaker:
//
//   - success (nil): the upstream answered (EvAttemptDone), whatever its stop
//     reason;
//   - failure (errUpstreamFailed): the upstream itself is down, overloaded,
//     silent or broken: connection, timeout, server (5xx), overloaded,
//     stream broken;
//   - excluded (errNotTheRoute): everything else, which says nothing about
//     the route's health. A cancelled call is the caller leaving. A rate
//     limit or an exhausted quota is back-pressure with its own Retry-After.
//     An invalid request, a prompt too long, a context limit, a rejected
//     image, a content filter or a refused prefill are this request's
//     fault. Auth and not-found mean a live upstream answered quickly that
//     this route's key or model is wrong: the machine falls back on them at
//     once, so opening the circuit would save nothing, while counting them
//     as successes would close a half-open circuit on a route that cannot
//     answer. Unknown failures are unclassified, so they are not held against
//     the route, and a failure event without a Failure says nothing either.
//
// Excluded outcomes neither reset the consecutive-failure count nor close a
// half-open circuit; an excluded probe lets the next probe through.
func breakerOutcome(ev recovery.Event) error {
	switch ev.Kind {
	case recovery.EvAttemptDone:
		return nil
	case recovery.EvAttemptFailed:
		if ev.Failure == nil {
			return errNotTheRoute
		}
		switch ev.Failure.Kind {
		case recovery.FailConnection, recovery.FailTimeout, recovery.FailServer, recovery.FailOverloaded, recovery.FailStreamBroken:
			return errUpstreamFailed
		}
	}
	return errNotTheRoute
}

// routeBreakers returns a snapshot of the known routes' breakers.
func (b *Breakers) routeBreakers() map[string]*routeBreaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.byRoute)
}

// States returns each known route's circuit state: 0 closed, 1 half-open, 2 open.
func (b *Breakers) States() map[string]int {
	if b == nil {
		return nil
	}
	rbs := b.routeBreakers()
	out := make(map[string]int, len(rbs))
	for name, rb := range rbs {
		out[name] = int(rb.cb.State())
	}
	if b.disabled() || !b.useShared() {
		return out
	}
	b.shared.mu.Lock()
	for r := range b.shared.routes {
		if _, ok := out[r]; !ok {
			out[r] = 0
		}
	}
	b.shared.mu.Unlock()
	routes := slices.Sorted(maps.Keys(out))
	if len(routes) == 0 {
		return out
	}
	sts, err := b.shared.read(routes...)
	if err != nil {
		return out
	}
	now := b.now()
	for i, r := range routes {
		out[r] = int(effective(sts[i], now))
	}
	return out
}

// Open returns which of routes have an open circuit now, for the machine.
// The shared breakers answer from what this replica last learnt of each
// route's shared state, read again once it is defaultViewFor old.
func (b *Breakers) Open(routes []recovery.Route) []string {
	if b.disabled() {
		return nil
	}
	var out []string
	if b.useShared() && len(routes) > 0 {
		names := make([]string, len(routes))
		for i, r := range routes {
			names[i] = r.Name
		}
		sts, err := b.shared.viewed(names)
		if err == nil {
			now := b.now()
			for i, st := range sts {
				if effective(st, now) == gobreaker.StateOpen {
					out = append(out, names[i])
				}
			}
			return out
		}
		b.fallBack("", err)
	}
	for _, r := range routes {
		if b.get(r.Name).State() == gobreaker.StateOpen {
			out = append(out, r.Name)
		}
	}
	return out
}
