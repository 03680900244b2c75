package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/completiond/completiond/recovery"
)

// The shared breakers are gobreaker's DistributedCircuitBreaker over
// redisStore, used in two steps like the local TwoStepCircuitBreaker: an
// admission, then the attempt's outcome once the attempt ends, each a short
// Execute whose request returns at once. Three things of gobreaker v2.4.0's
// DistributedCircuitBreaker are worked around:
//
//   - its Execute holds the store's lock while the request runs, so the
//     attempt itself (seconds to minutes of streaming) cannot run inside
//     it: the admission and the outcome are two Executes;
//   - its Execute reads the shared state before it takes the lock, so two
//     replicas can each count a failure on the same old state and one
//     failure is lost; and its lock retries a refused Lock for 5 s with
//     500 ms sleeps, which an unreachable Redis would add to every attempt.
//     So this code takes the route's Redis lock itself (a local mutex first,
//     so that one replica's calls queue in memory, not on Redis) around the
//     whole Execute, and hands the DistributedCircuitBreaker a store whose
//     Lock and Unlock are no-ops (heldStore): the state is read and written
//     under the lock, and a Redis failure is answered at once;
//   - in the half-open state it counts the probe in flight in the shared
//     state, so a replica that died during its probe would wedge the circuit
//     half-open for the whole fleet. Admissions are excluded outcomes (they
//     leave no request in flight in the shared counts), and the one probe of
//     the fleet is a lease, completiond:cb:{route}:probe, that its replica
//     renews while the probe runs and that lapses when it dies.
//
// An outcome reported in a later generation than its admission (the circuit
// opened, or half-opened, meanwhile) is excluded, as gobreaker does.

var (
	// errAdmitted is the request of an admission's Execute: excluded, so
	// that an admission changes nothing but the state's clock.
	errAdmitted = errors.New("admitted")
	// errLockContended is the answer when another replica held a route's
	// lock for longer than cbLockWait: this call uses the local breaker.
	errLockContended = errors.New("breaker lock contended")
)

const (
	// cbLockWait bounds how long a call waits for the route's Redis lock.
	cbLockWait = 250 * time.Millisecond
	// cbLockPoll is how often a held lock is tried again.
	cbLockPoll = 2 * time.Millisecond
	// defaultProbeLease is how long a half-open probe's lease lasts unless
	// its replica renews it (every third of it): a dead replica's probe is
	// replaced after this long.
	defaultProbeLease = 15 * time.Second
)

// sharedBreakers are the routes' breakers in Redis.
type sharedBreakers struct {
	g        *RedisGate
	store    *redisStore
	settings func(route string) gobreaker.Settings
	// probeLease is defaultProbeLease; tests shorten it.
	probeLease time.Duration

	mu     sync.Mutex
	routes map[string]*sharedRoute
}

// sharedRoute is one route's DistributedCircuitBreaker in this process.
type sharedRoute struct {
	mu   sync.Mutex // held around every operation, with the Redis lock
	held *heldStore
	dcb  *gobreaker.DistributedCircuitBreaker[struct{}]
}

// heldStore is the store the DistributedCircuitBreaker sees: the route's
// lock is already held by the caller, so Lock and Unlock do nothing. It
// keeps what it read and wrote and the last Redis error, for the caller.
type heldStore struct {
	s           *redisStore
	read, wrote []byte
	err         error
}

func (h *heldStore) Lock(string) error   { return nil }
func (h *heldStore) Unlock(string) error { return nil }

func (h *heldStore) GetData(name string) ([]byte, error) {
	b, err := h.s.GetData(name)
	h.read, h.err = b, errors.Join(h.err, err)
	return b, err
}

func (h *heldStore) SetData(name string, data []byte) error {
	err := h.s.SetData(name, data)
	h.wrote, h.err = data, errors.Join(h.err, err)
	return err
}

func newSharedBreakers(g *RedisGate, settings func(string) gobreaker.Settings) *sharedBreakers {
	if g == nil {
		return nil
	}
	return &sharedBreakers{g: g, store: newRedisStore(g), settings: settings,
		probeLease: defaultProbeLease, routes: map[string]*sharedRoute{}}
}

func (s *sharedBreakers) route(name string) *sharedRoute {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.routes[name]
	if sr == nil {
		sr = &sharedRoute{held: &heldStore{s: s.store}}
		s.routes[name] = sr
	}
	return sr
}

// with runs op on route's DistributedCircuitBreaker under the route's lock.
// It creates the breaker (and the shared state if there is none) first, and
// again if the shared state vanished (Redis restarted empty). A Redis error
// or a contended lock is returned; op's own result is op's business.
func (s *sharedBreakers) with(route string, op func(*sharedRoute)) error {
	sr := s.route(route)
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if err := s.lock(route); err != nil {
		return err
	}
	defer func() { _ = s.store.Unlock(route) }()
	for try := 0; ; try++ {
		sr.held.read, sr.held.wrote, sr.held.err = nil, nil, nil
		if sr.dcb == nil {
			dcb, err := gobreaker.NewDistributedCircuitBreaker[struct{}](sr.held, s.settings(route))
			if err != nil {
				return errors.Join(sr.held.err, err)
			}
			sr.dcb = dcb
			sr.held.read, sr.held.wrote = nil, nil
		}
		op(sr)
		if sr.held.err != nil {
			return sr.held.err
		}
		if sr.held.read != nil || try > 0 {
			return nil
		}
		sr.dcb = nil // no shared state: op did nothing, seed it and run op again
	}
}

// lock takes route's Redis lock, waiting up to cbLockWait while another
// replica holds it.
func (s *sharedBreakers) lock(route string) error {
	deadline := time.Now().Add(cbLockWait)
	for {
		err := s.store.Lock(route)
		if !errors.Is(err, errLockHeld) {
			return err
		}
		if time.Now().After(deadline) {
			return errLockContended
		}
		time.Sleep(cbLockPoll)
	}
}

// sharedState decodes a breaker's shared state; nil data is a closed
// circuit.
func sharedState(data []byte) (gobreaker.SharedState, error) {
	var st gobreaker.SharedState
	if data == nil {
		return st, nil
	}
	err := json.Unmarshal(data, &st)
	return st, err
}

// effective is the state st is in at now: an open circuit whose cool-down
// is over is half-open (gobreaker moves it there on its next call).
func effective(st gobreaker.SharedState, now time.Time) gobreaker.State {
	if st.State == gobreaker.StateOpen && !st.Expiry.After(now) {
		return gobreaker.StateHalfOpen
	}
	return st.State
}

// Allow asks route's shared breaker for a call, like breakers.allow. A
// non-nil error says the shared breaker could not answer (Redis failed, or
// the lock was contended): the caller asks the local breaker instead.
func (s *sharedBreakers) Allow(route string) (report func(recovery.Event), ok bool, err error) {
	var result error
	var admitted gobreaker.SharedState
	err = s.with(route, func(sr *sharedRoute) {
		_, result = sr.dcb.Execute(func() (struct{}, error) { return struct{}{}, errAdmitted })
		if errors.Is(result, errAdmitted) {
			admitted, result = sharedState(sr.held.wrote)
		}
	})
	switch {
	case err != nil:
		return nil, false, err
	case errors.Is(result, gobreaker.ErrOpenState), errors.Is(result, gobreaker.ErrTooManyRequests):
		return nil, false, nil
	case result != nil:
		return nil, false, fmt.Errorf("shared breaker of route %q: %w", route, result)
	}
	var probe *probeLeaseHolder
	if admitted.State == gobreaker.StateHalfOpen {
		probe, err = s.takeProbe(route)
		if err != nil || probe == nil {
			return nil, false, err // nil, nil: another replica's probe runs
		}
	}
	return func(ev recovery.Event) {
		outcome := breakerOutcome(ev)
		err := s.with(route, func(sr *sharedRoute) {
			_, _ = sr.dcb.Execute(func() (struct{}, error) {
				if generation(sr.held.read) != admitted.Generation {
					return struct{}{}, errNotTheRoute // the circuit moved on since the admission
				}
				return struct{}{}, outcome
			})
		})
		if err != nil {
			s.g.log.Warn("the outcome of an attempt was not recorded in the shared circuit breaker",
				"route", route, "error", err)
		}
		probe.release()
	}, true, nil
}

// generation is the generation the breaker is in once gobreaker has read
// data and let a call through: an open circuit past its cool-down has just
// become half-open, a new generation.
func generation(data []byte) uint64 {
	st, _ := sharedState(data)
	if st.State == gobreaker.StateOpen {
		return st.Generation + 1
	}
	return st.Generation
}

// probeLeaseHolder is this replica's lease on route's half-open probe,
// renewed until released.
type probeLeaseHolder struct {
	s            *sharedBreakers
	route, token string
	stop, done   chan struct{}
}

// takeProbe takes the lease on route's half-open probe, or returns nil when
// another replica's probe holds it.
func (s *sharedBreakers) takeProbe(route string) (*probeLeaseHolder, error) {
	token := randomToken()
	ctx, cancel := s.g.ctx()
	defer cancel()
	ok, err := s.g.rdb.SetNX(ctx, cbProbeKey(route), token, s.probeLease).Result()
	if s.g.observe("breaker probe", err) != nil || !ok {
		return nil, err
	}
	p := &probeLeaseHolder{s: s, route: route, token: token, stop: make(chan struct{}), done: make(chan struct{})}
	go p.renew()
	return p, nil
}

func (p *probeLeaseHolder) renew() {
	renewLoop(p.s.probeLease/3, p.stop, p.done, func() {
		ctx, cancel := p.s.g.ctx()
		err := probeRenewScript.Run(ctx, p.s.g.rdb, p.route, p.token, p.s.probeLease.Milliseconds()).Err()
		cancel()
		p.s.g.observe("breaker probe renew", err)
	})
}

// release ends the probe: the next call may probe.
func (p *probeLeaseHolder) release() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
	ctx, cancel := p.s.g.ctx()
	defer cancel()
	p.s.g.observe("breaker probe release", probeReleaseScript.Run(ctx, p.s.g.rdb, p.route, p.token).Err())
}

// read returns the shared states of routes at once, without the lock.
func (s *sharedBreakers) read(routes ...string) ([]gobreaker.SharedState, error) {
	keys := make([]string, len(routes))
	for i, r := range routes {
		keys[i] = cbKey(r)
	}
	ctx, cancel := s.g.ctx()
	defer cancel()
	vals, err := s.g.rdb.MGet(ctx, keys...).Result()
	if s.g.observe("breaker read", err) != nil {
		return nil, err
	}
	out := make([]gobreaker.SharedState, len(routes))
	for i, v := range vals {
		str, _ := v.(string)
		if str == "" {
			continue
		}
		if out[i], err = sharedState([]byte(str)); err != nil {
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
		return max(0, sts[0].Expiry.Sub(now)), nil
	case gobreaker.StateHalfOpen:
		ctx, cancel := s.g.ctx()
		defer cancel()
		n, err := s.g.rdb.Exists(ctx, cbProbeKey(route)).Result()
		if s.g.observe("breaker probe read", err) != nil {
			return 0, err
		}
		if n > 0 {
			return probeRetryAfter, nil
		}
	}
	return 0, nil
}
