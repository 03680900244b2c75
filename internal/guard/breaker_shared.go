package guard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/recovery"
)

// The shared breakers are the local ones' rule (breaker.go: the
// Failures-th consecutive upstream failure opens the circuit for the
// cool-down, then one probe closes or reopens it, excluded outcomes change
// nothing) kept in Redis, one route's state in one string key
// (breakerKey) moved by two scripts, each one round trip and atomic, with
// no lock: breaker_admit.lua admits a call (a closed circuit writes
// nothing), breaker_report.lua records its outcome. So the replicas'
// admissions never wait for one another. A replica reads a route's state
// at most every defaultViewFor while the circuit is closed, and admits
// from what it read: an attempt costs no round trip of its own, and one
// for an outcome that changes the state.
//
// The one probe of a half-open circuit is a lease, probeKey, that its
// replica renews while the probe runs: a replica that died during its
// probe would otherwise wedge the circuit half-open for the whole fleet.
//
// An outcome reported in a later generation than its admission (the circuit
// opened, or half-opened, meanwhile) is ignored, as gobreaker does.
//
// A success admitted in a closed circuit with no failure counted is not
// reported: it would clear nothing that was there when it started. What
// that gives up: failures counted elsewhere while it ran are not cleared
// by it, so a burst of failures that overlaps such a call opens the
// circuit at the count it would have reached had the call ended before
// the burst. It never opens it later than the rule says.

const (
	// defaultProbeLease is how long a half-open probe's lease lasts unless
	// its replica renews it (every third of it): a dead replica's probe is
	// replaced after this long.
	defaultProbeLease = 15 * time.Second
	// defaultViewFor is how long a replica goes by the states it last
	// learnt of (each route's) before it reads them again: Open answers from
	// them, and Allow admits a call through a circuit seen closed without a
	// round trip (breaker_admit.lua would write nothing either). Both run
	// before every attempt of every completion; a circuit another replica
	// opened is seen by every replica within this long. What this replica's
	// own admissions and reports learn replaces the view at once.
	defaultViewFor = 100 * time.Millisecond
)

// sharedBreakers are the routes' breakers in Redis.
type sharedBreakers struct {
	g        *RedisGate
	settings config.BreakerSettings
	now      func() time.Time
	// probeLease is defaultProbeLease; tests shorten it.
	probeLease time.Duration
	// viewFor is defaultViewFor; tests set 0 to read at every Open.
	viewFor time.Duration

	mu     sync.Mutex
	routes map[string]bool // the routes this process has asked about
	view   map[string]seenState
}

// seenState is a route's state as this replica last learnt it, and when.
type seenState struct {
	st breakerState
	at time.Time
}

// breakerState is a route's shared state, as breaker_admit.lua reads it.
type breakerState struct {
	state      gobreaker.State
	generation int64
	failures   int64
	expiry     time.Time // an open circuit's end of cool-down
}

func newSharedBreakers(g *RedisGate, s config.BreakerSettings, now func() time.Time) *sharedBreakers {
	if g == nil {
		return nil
	}
	return &sharedBreakers{g: g, settings: s, now: now, probeLease: defaultProbeLease, viewFor: defaultViewFor,
		routes: map[string]bool{}, view: map[string]seenState{}}
}

// parseBreakerState decodes a route's state key; "" is a closed circuit.
func parseBreakerState(v string) (breakerState, error) {
	var st breakerState
	if v == "" {
		return st, nil
	}
	f := strings.Fields(v)
	n := make([]int64, len(f))
	for i := range f {
		var err error
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			break
		}
	}
	if len(f) != 4 || n[0] < 0 || n[0] > int64(gobreaker.StateOpen) {
		return st, fmt.Errorf("breaker state %.40q is not \"state generation failures expiry\"", v)
	}
	return breakerState{state: gobreaker.State(n[0]), generation: n[1], failures: n[2], expiry: time.UnixMilli(n[3])}, nil
}

// effective is the state st is in at now: an open circuit whose cool-down
// is over is half-open (the next admission moves it there).
func effective(st breakerState, now time.Time) gobreaker.State {
	if st.state == gobreaker.StateOpen && !st.expiry.After(now) {
		return gobreaker.StateHalfOpen
	}
	return st.state
}

// Allow asks route's shared breaker for a call, like breakers.allow. A
// non-nil error says the shared breaker could not answer (Redis failed):
// the caller asks the local breaker instead.
func (s *sharedBreakers) Allow(route string) (report func(recovery.Event), ok bool, err error) {
	s.mu.Lock()
	s.routes[route] = true
	seen, known := s.view[route]
	s.mu.Unlock()
	if known && seen.st.state == gobreaker.StateClosed && s.now().Sub(seen.at) < s.viewFor {
		// Closed as read within viewFor: admitted as the script would,
		// which writes nothing for a closed circuit.
		return s.reporter(route, seen.st.generation, seen.st.failures, nil), true, nil
	}
	token := randomToken()
	ctx, cancel := s.g.ctx()
	defer cancel()
	v, err := breakerAdmitScript.Run(ctx, s.g.rdb, route, s.now().UnixMilli(), token, s.probeLease.Milliseconds()).Int64Slice()
	if s.g.observe("breaker admit", err) != nil {
		return nil, false, err
	}
	if len(v) != 5 {
		return nil, false, fmt.Errorf("shared breaker of route %q: admission answered %d values, want 5", route, len(v))
	}
	state, generation, failures := gobreaker.State(v[1]), v[2], v[3]
	s.learn(route, breakerState{state: state, generation: generation, failures: failures, expiry: time.UnixMilli(v[4])})
	if v[0] != 1 {
		return nil, false, nil
	}
	var probe *probeLeaseHolder
	if state == gobreaker.StateHalfOpen {
		probe = s.holdProbe(route, token)
	}
	return s.reporter(route, generation, failures, probe), true, nil
}

// reporter is the report of a call of route admitted in generation, with
// failures counted then; probe is its probe lease if it probes.
func (s *sharedBreakers) reporter(route string, generation, failures int64, probe *probeLeaseHolder) func(recovery.Event) {
	return func(ev recovery.Event) {
		probe.stop()
		outcome := breakerOutcome(ev)
		if probe == nil && (errors.Is(outcome, errNotTheRoute) || outcome == nil && failures == 0) {
			return // changes nothing (see above)
		}
		if err := s.report(route, generation, outcome, probe); err != nil {
			s.g.log.Warn("the outcome of an attempt was not recorded in the shared circuit breaker",
				"route", route, "error", err)
		}
	}
}

// report runs breaker_report.lua for a call of route admitted in
// generation, whose outcome is breakerOutcome's; probe is its probe lease
// if it probed.
func (s *sharedBreakers) report(route string, generation int64, outcome error, probe *probeLeaseHolder) error {
	name := "ok"
	switch {
	case errors.Is(outcome, errNotTheRoute):
		name = "excluded"
	case outcome != nil:
		name = "fail"
	}
	token := ""
	if probe != nil {
		token = probe.token
	}
	ctx, cancel := s.g.ctx()
	defer cancel()
	// The cool-down starts at now rounded up to the millisecond: never
	// shorter than configured.
	now := (s.now().UnixMicro() + 999) / 1000
	after, err := breakerReportScript.Run(ctx, s.g.rdb, route, generation, name, now,
		s.settings.Failures, s.settings.Cooldown.Milliseconds(), token).Int64()
	if s.g.observe("breaker report", err) != nil {
		return err
	}
	if gobreaker.State(after) == gobreaker.StateOpen {
		s.learn(route, breakerState{state: gobreaker.StateOpen, expiry: time.UnixMilli(now).Add(s.settings.Cooldown)})
	} else {
		s.forget(route) // closed again, or moved on: Open reads it anew
	}
	return nil
}

// learn records st as route's state seen now.
func (s *sharedBreakers) learn(route string, st breakerState) {
	s.mu.Lock()
	s.view[route] = seenState{st: st, at: s.now()}
	s.mu.Unlock()
}

// forget drops route's state from the view.
func (s *sharedBreakers) forget(route string) {
	s.mu.Lock()
	delete(s.view, route)
	s.mu.Unlock()
}

// viewed returns the states of routes, from the view where it is fresher
// than viewFor and read from Redis (in one round trip) for the rest.
func (s *sharedBreakers) viewed(routes []string) ([]breakerState, error) {
	out := make([]breakerState, len(routes))
	var stale []int
	now := s.now()
	s.mu.Lock()
	for i, r := range routes {
		if v, ok := s.view[r]; ok && now.Sub(v.at) < s.viewFor {
			out[i] = v.st
		} else {
			stale = append(stale, i)
		}
	}
	s.mu.Unlock()
	if len(stale) == 0 {
		return out, nil
	}
	names := make([]string, len(stale))
	for j, i := range stale {
		names[j] = routes[i]
	}
	read, err := s.read(names...)
	if err != nil {
		return nil, err
	}
	for j, i := range stale {
		out[i] = read[j]
		s.learn(routes[i], read[j])
	}
	return out, nil
}

// probeLeaseHolder is this replica's lease on route's half-open probe,
// renewed until its report.
type probeLeaseHolder struct {
	s            *sharedBreakers
	route, token string
	quit, done   chan struct{}
}

// holdProbe renews the probe lease breaker_admit.lua gave token, until
// stopped.
func (s *sharedBreakers) holdProbe(route, token string) *probeLeaseHolder {
	p := &probeLeaseHolder{s: s, route: route, token: token, quit: make(chan struct{}), done: make(chan struct{})}
	go p.renew()
	return p
}

func (p *probeLeaseHolder) renew() {
	renewLoop(p.s.probeLease/3, p.quit, p.done, func() {
		ctx, cancel := p.s.g.ctx()
		err := probeRenewScript.Run(ctx, p.s.g.rdb, p.route, p.token, p.s.probeLease.Milliseconds()).Err()
		cancel()
		p.s.g.observe("breaker probe renew", err)
	})
}

// stop ends the renewals; the report deletes the lease.
func (p *probeLeaseHolder) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
}

// read returns the shared states of routes, in one round trip (one GET
// each, pipelined: the routes' keys are in different slots of a cluster).
func (s *sharedBreakers) read(routes ...string) ([]breakerState, error) {
	ctx, cancel := s.g.ctx()
	defer cancel()
	p := s.g.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(routes))
	for i, r := range routes {
		gets[i] = p.Get(ctx, breakerKey(r))
	}
	_, err := p.Exec(ctx)
	if s.g.observe("breaker read", err) != nil {
		return nil, err
	}
	out := make([]breakerState, len(routes))
	for i, g := range gets {
		if out[i], err = parseBreakerState(g.Val()); err != nil {
			return nil, fmt.Errorf("shared breaker of route %q: %w", routes[i], err)
		}
	}
	return out, nil
}

// RetryAfter is breakers.retryAfter from the shared state: the rest of the
// cool-down the fleet's circuit has, or probeRetryAfter while some replica's
// probe runs.
func (s *sharedBreakers) RetryAfter(route string, now time.Time) (time.Duration, error) {
	sts, err := s.read(route)
	if err != nil {
		return 0, err
	}
	switch effective(sts[0], now) {
	case gobreaker.StateOpen:
		return max(0, sts[0].expiry.Sub(now)), nil
	case gobreaker.StateHalfOpen:
		ctx, cancel := s.g.ctx()
		defer cancel()
		n, err := s.g.rdb.Exists(ctx, probeKey(route)).Result()
		if s.g.observe("breaker probe read", err) != nil {
			return 0, err
		}
		if n > 0 {
			return probeRetryAfter, nil
		}
	}
	return 0, nil
}
