package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redisscript"
)

// Errors of Leases.
var (
	// ErrLeaseHeld is the error of an Acquire that finds the lease held
	// by another replica (or by its owner, which renewed it meanwhile).
	ErrLeaseHeld = errors.New("lease held by another replica")
	// errLeaseLost: the lease is no longer the caller's (it lapsed, and
	// maybe another replica took it).
	errLeaseLost = errors.New("lease lost")
)

// Lease is one replica's ownership of one completion. Token is its fencing
// token: every lease granted for a completion has a larger token than the
// ones granted before it, so that a store can refuse the writes of an
// owner that was superseded.
type Lease struct {
	ID      string
	Token   uint64
	Replica string
}

// Value is the lease as its store keeps it: "token replica". A write is
// fenced by comparing the stored value with the writer's (lua/commit.lua).
func (l Lease) Value() string { return strconv.FormatUint(l.Token, 10) + " " + l.Replica }

func parseLease(id, v string) (Lease, bool) {
	tok, replica, ok := strings.Cut(v, " ")
	n, err := strconv.ParseUint(tok, 10, 64)
	if !ok || err != nil {
		return Lease{}, false
	}
	return Lease{ID: id, Token: n, Replica: replica}, true
}

// Leases grant the ownership of completions to one replica at a time, for
// a bounded time the owner renews: a completion of a fleet runs on the
// replica that holds its lease, and when that replica dies its lease
// lapses and another replica may take the completion over (takeover.go).
// Implementations are safe for concurrent use.
//
// A replica that cannot renew in time must stop writing: the owner keeps
// its own deadline (ownership.valid), measured from before each renewal
// was sent, so that it stops before the store lets anybody else in; and a
// log that can check the lease atomically with each write (a Log that is Fenced)
// refuses a superseded owner's writes whatever its clock says.
type Leases interface {
	// Acquire takes the lease of completion id for replica, if nobody holds
	// it (ErrLeaseHeld otherwise), with a token larger than any given
	// for id before.
	Acquire(ctx context.Context, id, replica string) (Lease, error)
	// Renew extends l by the lease length if it is still held as l, or
	// takes it again if it lapsed and nobody was granted it since (a
	// Redis that lost its keys); errLeaseLost otherwise.
	Renew(ctx context.Context, l Lease) error
	// Release gives l up, if it is still held as l.
	Release(ctx context.Context, l Lease) error
	// Holder returns the lease of id, if somebody holds it.
	Holder(ctx context.Context, id string) (Lease, bool, error)
	// TTL is the lease length: how long a lease lasts without a renewal.
	TTL() time.Duration
}

// memLeases are Leases in this process's memory: for tests, and for
// replicas in one process.
type memLeases struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	leases map[string]memLease
	tokens map[string]uint64
}

type memLease struct {
	Lease
	until time.Time
}

// NewMemLeases returns in-memory Leases of length ttl.
func NewMemLeases(ttl time.Duration) Leases {
	return &memLeases{ttl: ttl, now: time.Now, leases: map[string]memLease{}, tokens: map[string]uint64{}}
}

func (m *memLeases) TTL() time.Duration { return m.ttl }

func (m *memLeases) held(id string) (memLease, bool) {
	l, ok := m.leases[id]
	if ok && !m.now().Before(l.until) {
		delete(m.leases, id)
		return memLease{}, false
	}
	return l, ok
}

func (m *memLeases) Acquire(_ context.Context, id, replica string) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held(id); ok {
		return Lease{}, ErrLeaseHeld
	}
	m.tokens[id]++
	l := Lease{ID: id, Token: m.tokens[id], Replica: replica}
	m.leases[id] = memLease{Lease: l, until: m.now().Add(m.ttl)}
	return l, nil
}

func (m *memLeases) Renew(_ context.Context, l Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.held(l.ID); ok && cur.Lease != l || !ok && m.tokens[l.ID] != l.Token {
		return errLeaseLost
	}
	m.leases[l.ID] = memLease{Lease: l, until: m.now().Add(m.ttl)}
	return nil
}

func (m *memLeases) Release(_ context.Context, l Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.held(l.ID); ok && cur.Lease == l {
		delete(m.leases, l.ID)
	}
	return nil
}

func (m *memLeases) Holder(_ context.Context, id string) (Lease, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.held(id)
	return l.Lease, ok, nil
}

// leaseTokenTTL is how long a completion's token counter lives after its
// last lease was granted: far longer than any completion runs.
const leaseTokenTTL = 24 * time.Hour

// redisLeases are Leases in Redis: LeaseKey(id) holds "token replica" with
// a PX expiry, set by lua/acquire.lua with a token drawn from INCR of
// leaseTokenKey(id); a renewal is a compare-and-PEXPIRE (lua/renew.lua,
// which renews a batch of them), a release a compare-and-DEL
// (lua/release.lua).
type redisLeases struct {
	rdb      redis.UniversalClient
	ks       *keyspace
	ttl      time.Duration
	m        *metrics // rdb's (Instrument): what befalls the Ownerships of these leases
	renewals *renewals
}

// NewRedisLeases returns Leases of length ttl kept in rdb. The renewals
// of its leases go to Redis in batches (renewals).
func NewRedisLeases(rdb redis.UniversalClient, ttl time.Duration) Leases {
	r := &redisLeases{rdb: rdb, ks: keyspaceOf(rdb), ttl: ttl, m: metricsOf(rdb)}
	r.renewals = &renewals{r: r}
	return r
}

func (r *redisLeases) TTL() time.Duration { return r.ttl }

func (r *redisLeases) Acquire(ctx context.Context, id, replica string) (Lease, error) {
	n, err := r.ks.scripts.acquire.Run(ctx, r.rdb, id, replica, r.ttl.Milliseconds(), leaseTokenTTL.Milliseconds()).Int64()
	if err != nil {
		return Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	if n == 0 {
		return Lease{}, ErrLeaseHeld
	}
	return Lease{ID: id, Token: uint64(n), Replica: replica}, nil
}

func (r *redisLeases) Renew(ctx context.Context, l Lease) error {
	return r.renewals.renew(ctx, l)
}

// renewWait is how long the first renewal of a batch waits for others,
// as a share of the lease's length: a twentieth, so that the renewals of
// every lease of this replica that fall within it (RenewEvery is a
// third) go to Redis in one call, and a renewal still lands well within
// its lease (Ownership measures its deadline from before the wait).
const renewWait = 20

// renewals batches the renewals of a replica's leases: the first renewal
// to arrive waits TTL/renewWait for others, then one call of
// lua/renew.lua renews them all; a renewal arriving during that call
// starts the next batch. A replica running a thousand completions renews
// them in a few calls per second rather than a thousand.
type renewals struct {
	r *redisLeases

	mu   sync.Mutex
	next *renewBatch // gathering, with a first renewal waiting
}

// renewBatch is the leases of one call of lua/renew.lua and, once done is
// closed, its answers (1 renewed, 0 lost) or the error of each lease's
// call (on a Cluster, a node that did not answer fails its shards' leases
// only).
type renewBatch struct {
	leases  []Lease
	done    chan struct{}
	renewed []int64
	errs    []error
}

// renew renews l with the others of its batch.
func (b *renewals) renew(ctx context.Context, l Lease) error {
	b.mu.Lock()
	first := b.next == nil
	if first {
		b.next = &renewBatch{done: make(chan struct{})}
	}
	batch := b.next
	i := len(batch.leases)
	batch.leases = append(batch.leases, l)
	b.mu.Unlock()
	if first {
		go b.flush(batch)
	}
	select {
	case <-batch.done:
	case <-ctx.Done():
		return fmt.Errorf("renew lease: %w", ctx.Err())
	}
	switch {
	case batch.errs[i] != nil:
		return fmt.Errorf("renew lease: %w", batch.errs[i])
	case batch.renewed[i] == 0:
		return errLeaseLost
	}
	return nil
}

// flush waits for the renewals of batch, then renews them in one call
// (one per shard on a Cluster, at once, so that a node that does not
// answer holds no other shard's), within what is left of the time a
// renewal may take (Timing.StoreCall), so that its first renewal's caller
// still has its answer.
func (b *renewals) flush(batch *renewBatch) {
	defer close(batch.done)
	ttl := b.r.ttl
	wait := ttl / renewWait
	time.Sleep(wait)
	b.mu.Lock()
	b.next = nil
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), TimingOf(b.r).StoreCall()-wait)
	defer cancel()
	leases := batch.leases
	batch.renewed, batch.errs = make([]int64, len(leases)), make([]error, len(leases))
	var wg sync.WaitGroup
	for _, shard := range b.r.ks.byShard(len(leases), func(i int) string { return leases[i].ID }) {
		wg.Go(func() { b.renewShard(ctx, batch, shard) })
	}
	wg.Wait()
}

// renewShard renews the leases of batch at the indexes of one shard, in
// one call of lua/renew.lua.
func (b *renewals) renewShard(ctx context.Context, batch *renewBatch, shard []int) {
	groups := make([]redisscript.Group, len(shard))
	for i, at := range shard {
		l := batch.leases[at]
		groups[i] = redisscript.Group{Subject: l.ID, Args: []any{l.Value(), l.Token}}
	}
	renewed, err := b.r.ks.scripts.renew.RunGroups(ctx, b.r.rdb, []any{b.r.ttl.Milliseconds(), leaseTokenTTL.Milliseconds()}, groups).Int64Slice()
	if err == nil && len(renewed) != len(shard) {
		err = fmt.Errorf("lua/renew.lua answered %d of %d", len(renewed), len(shard))
	}
	for i, at := range shard {
		if err != nil {
			batch.errs[at] = err
		} else {
			batch.renewed[at] = renewed[i]
		}
	}
}

func (r *redisLeases) Release(ctx context.Context, l Lease) error {
	if err := r.ks.scripts.release.Run(ctx, r.rdb, l.ID, l.Value()).Err(); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

func (r *redisLeases) Holder(ctx context.Context, id string) (Lease, bool, error) {
	v, err := r.rdb.Get(ctx, r.ks.lease(id)).Result()
	if errors.Is(err, redis.Nil) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("lease holder: %w", err)
	}
	l, ok := parseLease(id, v)
	return l, ok, nil
}

// Ownership is a replica's hold on one completion's lease: it renews the
// lease at a third of its length and knows until when it may write.
//
// Losing the lease: a renewal refused means another replica holds it now
// (it took the completion over); lost runs once and says whether the
// completion stops here (valid is false for good from then on) or goes on
// for the callers of this replica (its log never reached the shared log
// whole: see PairLog). Halting (the death of the replica, in tests) stops
// it too.
//
// A renewal that fails because the store does not answer is not a loss.
// Without a store that fences each write (storeFenced false: the owner's
// deadline is the only fence), passing the deadline is: the completion
// stops, as another replica may take it over once the store answers it.
// With one (a Log that is Fenced), the completion goes on: nobody can take it over
// without the store, the store refuses a superseded owner's writes, and
// when the store answers again the renewal takes the lease back unless
// another replica was granted it meanwhile (Leases.Renew).
type Ownership struct {
	leases      Leases
	m           *metrics
	lease       Lease
	lost        func() (stop bool)
	stale       func() // the deadline passed without a renewal (storeFenced only)
	storeFenced bool
	stop        chan struct{}
	done        chan struct{}

	mu    sync.Mutex
	until time.Time // the last renewal's start + TTL − margin
	gone  bool      // the completion stops here: lost, or halted
	late  bool      // stale was told, and no renewal succeeded since
}

// Timing is when the parts of a fleet act on a lease of length TTL, each a
// fixed part of it. The invariant they keep: an owner renews often enough
// that a renewal, or the next one, lands before the lease could lapse in
// the store, and it writes only while the store would still hold the
// lease for it; the others take a completion over only after its lease
// lapsed, and look often enough that a dead owner's completion waits at
// most about a lease and a half.
type Timing struct {
	// TTL is the lease length (Leases.TTL).
	TTL time.Duration
}

// RenewEvery is how often the owner renews: three tries within a length,
// so that one renewal lost (or slow) leaves the next time to land.
func (t Timing) RenewEvery() time.Duration { return t.TTL / 3 }

// StoreCall bounds one call to the store for the lease (acquire, renew,
// release): no longer than the time between renewals, so that a store
// that hangs cannot make the owner miss the next one.
func (t Timing) StoreCall() time.Duration { return t.TTL / 3 }

// Margin is the part of the lease the owner gives up to clock drift: it
// stops writing this much before the store could expire the lease.
func (t Timing) Margin() time.Duration { return t.TTL / 10 }

// CheckEvery is how often a follower of a live completion that may be
// taken over looks at its lease: twice a length, so that a lapse is seen
// within half a lease of happening.
func (t Timing) CheckEvery() time.Duration { return t.TTL / 2 }

// TakeoverWait is how long a Session resume on another replica waits for
// the lease to lapse to take the Session over: a length, and the half
// a follower may take to see the lapse.
func (t Timing) TakeoverWait() time.Duration { return t.TTL + t.TTL/2 }

// TakeoverPoll is how often that wait tries the takeover again.
func (t Timing) TakeoverPoll() time.Duration { return t.TTL / 4 }

// TimingOf is the Timing of ls's leases.
func TimingOf(ls Leases) Timing { return Timing{TTL: ls.TTL()} }

// Own starts holding l, acquired at from (before the request was sent):
// lost is called if another replica is granted the lease, stale (when the
// log fences its writes itself: storeFenced) when the lease lapses for
// want of a store that answers. Call End when the completion ends.
func Own(leases Leases, l Lease, from time.Time, storeFenced bool, lost func() (stop bool), stale func()) *Ownership {
	tm := TimingOf(leases)
	o := &Ownership{leases: leases, m: leaseMetrics(leases), lease: l, lost: lost, stale: stale, storeFenced: storeFenced,
		stop: make(chan struct{}), done: make(chan struct{}), until: from.Add(tm.TTL - tm.Margin())}
	go o.renew()
	return o
}

// valid reports whether the owner holds the lease: it may write to a log
// fenced by the deadline alone.
func (o *Ownership) valid() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.gone && time.Now().Before(o.until)
}

// Running reports whether the completion goes on here: the lease was
// neither lost to another replica (with stop) nor was the owner halted.
// With a store that fences each write, that is what the outbox checks; a
// lapse for want of a store goes on.
func (o *Ownership) Running() bool {
	if !o.storeFenced {
		return o.valid()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.gone
}

func (o *Ownership) renew() {
	defer close(o.done)
	tm := TimingOf(o.leases)
	t := time.NewTicker(tm.RenewEvery())
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		o.mu.Lock()
		halted := o.gone
		o.mu.Unlock()
		if halted {
			o.lost()
			return
		}
		from := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), tm.StoreCall())
		err := o.leases.Renew(ctx, o.lease)
		cancel()
		if errors.Is(err, errLeaseLost) {
			o.m.lost.Add(context.Background(), 1)
			stop := o.lost()
			o.mu.Lock()
			o.gone = o.gone || stop
			o.mu.Unlock()
			return
		}
		o.mu.Lock()
		if err == nil {
			o.until, o.late = from.Add(tm.TTL-tm.Margin()), false
		}
		lapsed := err != nil && !time.Now().Before(o.until)
		tell := lapsed && o.storeFenced && !o.late
		o.late = o.late || tell
		stop := lapsed && !o.storeFenced
		o.gone = o.gone || stop
		o.mu.Unlock()
		if tell || stop {
			o.m.lapsed.Add(context.Background(), 1)
		}
		if tell && o.stale != nil {
			o.stale()
		}
		if stop {
			o.lost()
			return
		}
	}
}

// leaseMetrics are the instruments of ls's Ownerships: those of the
// Redis client of Leases in Redis, no-ops for the others.
func leaseMetrics(ls Leases) *metrics {
	if r, ok := ls.(*redisLeases); ok {
		return r.m
	}
	return noMetrics
}

// End stops renewing and releases the lease if it is still held, so that
// nobody takes over a completion that has ended.
func (o *Ownership) End() {
	close(o.stop)
	<-o.done
	if o.valid() {
		ctx, cancel := context.WithTimeout(context.Background(), TimingOf(o.leases).StoreCall())
		defer cancel()
		_ = o.leases.Release(ctx, o.lease)
	}
}

// EndReleased is End for a lease the store gave up already, with the
// completion's end (Log.Unfence said so): it stops renewing and releases
// nothing, which saves the release its round trip. A renewal that ran
// between the end's write and this call may have taken the lease back
// (renew.lua takes back a lease that is gone): it lapses within the
// lease's length, on a log that has ended, which no replica takes over.
func (o *Ownership) EndReleased() {
	close(o.stop)
	<-o.done
}

// Halt stops renewing without releasing and stops every write, as the
// death of the replica would (tests kill replicas with it).
func (o *Ownership) Halt() {
	o.mu.Lock()
	o.gone = true
	o.mu.Unlock()
}

// OpenLeased opens the log of a new completion id in lg with meta, under
// the lease of id for replica from leases: where lg is a PairLog and
// leases are in its Redis, in one script and one round trip (open.lua);
// otherwise the lease is acquired, then the log opened. Only a completion
// whose replica knows its lease keeps meta.Request in its shared log (what
// a takeover runs again; in one script, it joins the log with the first
// fenced write, RedisLog.openLeased): without one it runs on this replica
// alone and is never taken over.
//
// It returns the lease, or nil and leaseErr, why none could be had (the
// log is opened without the request then); and openErr, the log's
// refusal (errLogFull: a resumable completion cannot run), with no lease
// held.
func OpenLeased(ctx context.Context, lg Log, leases Leases, id, replica string, meta Meta) (lease *Lease, leaseErr, openErr error) {
	if p, ok := lg.(*PairLog); ok {
		if rl, ok := leases.(*redisLeases); ok && rl.rdb == p.redis.rdb {
			return p.openLeased(id, replica, rl.ttl, meta)
		}
	}
	l, err := leases.Acquire(ctx, id, replica)
	if err != nil {
		meta.Request = nil
		return nil, err, lg.Open(id, meta)
	}
	if err := lg.Open(id, meta); err != nil {
		_ = leases.Release(context.WithoutCancel(ctx), l)
		return nil, nil, err
	}
	return &l, nil, nil
}

// Opening is a new completion whose log is open in this replica's memory,
// and opens in Redis with its first event, under the completion's lease
// (Open). OpenAhead makes one.
type Opening struct {
	log         *PairLog
	ttl         time.Duration
	id, replica string
	meta        Meta
}

// OpenAhead opens the log of a new completion id in lg's memory, with
// meta, and answers the Opening that opens it in Redis, under the lease of
// id for replica, with the completion's first event: where lg is a
// PairLog whose Redis holds leases too. Otherwise it answers nil and does
// nothing (OpenLeased opens the log). The error is the memory log's
// refusal (errLogFull: a resumable completion cannot run).
//
// So the first round trip of a new completion to Redis, its open with its
// lease, goes with its first event (the started event, which the driver
// writes beside the upstream call) instead of coming before the call.
func OpenAhead(lg Log, leases Leases, id, replica string, meta Meta) (*Opening, error) {
	p, ok := lg.(*PairLog)
	if !ok {
		return nil, nil
	}
	rl, ok := leases.(*redisLeases)
	if !ok || rl.rdb != p.redis.rdb {
		return nil, nil
	}
	if err := p.mem.Open(id, meta); err != nil {
		return nil, err
	}
	return &Opening{log: p, ttl: rl.ttl, id: id, replica: replica, meta: meta}, nil
}

// Open opens the completion's log in Redis with first, its first event,
// and takes its lease, in one round trip (open.lua), then logs first here
// too. Without a lease (nil, and why: Redis down or full, or the lease
// held), the completion runs on this replica alone and is never taken
// over, as OpenLeased's would; first is logged all the same.
func (o *Opening) Open(first *completionv1.CompletionEvent) (*Lease, error) {
	return o.log.shareLeased(o.id, o.replica, o.ttl, o.meta, first)
}

// JoinRequest writes the completion's request into its Redis log, fenced
// by the lease Open gave, unless a write of the log carried it already:
// from then on another replica may take the completion over (run its
// request again) should this one die. Call it once the log is fenced by
// that lease (Log.Fence); a write that fails leaves the request to the
// log's next write. It may run beside the log's writes.
func (o *Opening) JoinRequest() { o.log.redis.joinRequest(o.id) }
