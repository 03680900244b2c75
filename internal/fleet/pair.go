package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
)

// PairLog is the Log of a replica with Redis: every completion that
// runs here is logged in this process's memory (its attachers here read
// it there, and it is whole whatever Redis does) and, while Redis answers,
// in the shared RedisLog, which the other replicas read. A read finds
// a completion here first, then in Redis.
//
// Degrading: a completion opened while Redis is down, or whose Redis
// append fails (Redis down, or restarted and its log gone), goes on
// logged in memory only (apart): no gap is ever written in Redis. (One
// whose last events Redis lost, a failover's lost writes, is published
// again at once: fillGap.) A log
// line and the completiond.redis.local_only counter say so; the
// completion is not stopped, whatever its lease says (ownership).
//
// Reconciling: once Redis answers again, the next event of a completion
// apart (at most one try per reshareEvery, and always its end) publishes
// its log again — Redis gets the events it lacks and the end
// (RedisLog.reshare), and the completion is shared from then on: an
// Attach through any replica, or a takeover, sees all of it. A completion
// with a lease is published again only while no other replica was granted
// the lease meanwhile (the fence); if one was — it took the completion
// over from the stale shared log while this replica ran on alone —, this
// replica finishes it for its own callers and never writes it to Redis
// again (orphan): the two never mix in one log.
type PairLog struct {
	mem   *MemLog
	redis *RedisLog
	watch *Health
	log   *slog.Logger
	local metric.Int64Counter
	now   func() time.Time

	mu     sync.Mutex
	shared map[string]bool        // the live completions of this replica logged in Redis too
	apart  map[string]*apartState // the live ones logged here only, for now or for good
	// unpublished are the completions that ended apart while Redis did
	// not answer, with the lease value that fences them ("" for none):
	// they are published once it answers again, so that no replica finds
	// their stale log live and takes over a completion that has ended.
	unpublished map[string]string
	// ends are the last completions whose end Redis acknowledged (at most
	// maxEnds, the oldest first), looked at again when a new Redis process
	// answers (republishLostEnds).
	ends []endedLog
}

// endedLog is a completion that ended shared in Redis, and the lease
// value that fenced its writes ("" for none).
type endedLog struct{ id, fence string }

// maxEnds bounds PairLog.ends: what a failover may have lost of the ends
// of this replica's last completions (those still in its memory) is
// published again; past it, an end lost leaves its log looking live until
// it lapses (LiveTTL).
const maxEnds = 10_000

// maxUnpublished bounds PairLog.unpublished; past it the oldest are
// forgotten (their stale logs in Redis lapse with LiveTTL).
const maxUnpublished = 10_000

// apartState is what PairLog knows of a completion logged here only.
type apartState struct {
	retry  time.Time // when to try to publish it again
	orphan bool      // another replica was granted its lease meanwhile: never again
}

// reshareEvery is how often, at most, a completion logged here only tries
// to publish its log again while it runs.
const reshareEvery = time.Second

// NewPairLog returns the log of a replica with Redis: mem and rl
// together, rl's writes skipped while watch says Redis is down; local
// counts the completions logged here only (RedisInstruments).
func NewPairLog(mem *MemLog, rl *RedisLog, watch *Health, log *slog.Logger, local metric.Int64Counter) *PairLog {
	f := &PairLog{mem: mem, redis: rl, watch: watch, log: log, local: local, now: time.Now,
		shared: map[string]bool{}, apart: map[string]*apartState{}, unpublished: map[string]string{}}
	watch.WatchBack(f.publishEnded)
	watch.WatchReplaced(f.redisReplaced)
	rl.scriptsGone = watch.Kick
	return f
}

// redisReplaced: a Redis process answers that did not before (Health: a
// restart, or a replica promoted), which may lack writes its predecessor
// acknowledged. The running completions' next writes check that their
// logs follow on (RedisLog.suspect: fillGap publishes the events lost),
// and the ends lost are published again now (republishLostEnds). It runs
// on the watch's goroutine for its watchers (Health.WatchReplaced); it is
// not done while Redis fails the check or a republication, which the
// watch's next PING that finds Redis up tries again.
func (f *PairLog) redisReplaced() (done bool) {
	f.redis.mayHaveLost()
	return f.republishLostEnds()
}

// endedShared notes that Redis acknowledged the end of id, fenced by fence.
func (f *PairLog) endedShared(id, fence string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ends) >= maxEnds {
		f.ends = f.ends[len(f.ends)-maxEnds+1:]
	}
	f.ends = append(f.ends, endedLog{id: id, fence: fence})
}

// republishLostEnds publishes again, from this replica's memory, the
// logs of the completions that ended here whose end Redis no longer holds
// (a failover or a restart lost it): such a log looks live, and a replica
// that an attach reaches would take over a completion that has ended, and
// run it on to another ending than its callers got. A log Redis still
// holds, not ended, gets what it lacks; one Redis lost whole (a restart
// that came back empty) is restored whole, unless the bounds say it went
// their way (its retention passed, or the bounds, full, would evict it
// first: RedisLog.restoreEnded), so that an attach through any replica
// reads it again. Each is fenced by its last lease: a completion another
// replica took over meanwhile is left to it. The ends no longer in memory
// are forgotten. It answers false when Redis failed the check or a
// republication (to be tried again), and stops at the first that Redis
// did not answer.
func (f *PairLog) republishLostEnds() (done bool) {
	f.mu.Lock()
	ends := slices.Clone(f.ends)
	f.mu.Unlock()
	copies := map[string]logCopy{}
	var ids []string
	for _, e := range ends {
		if c, ok := f.mem.copyOf(e.id); ok && c.ended {
			copies[e.id] = c
			ids = append(ids, e.id)
		}
	}
	f.forgetEnds(ends, copies)
	lost, gone, err := f.redis.endsLost(ids)
	if err != nil {
		f.log.Warn("redis: could not check which ends a new Redis process lost: tried again at the next PING", "error", err)
		return false
	}
	done = true
	for _, e := range ends {
		var err error
		switch {
		case lost[e.id]:
			err = f.publishLostEnd(e, copies[e.id])
		case gone[e.id]:
			err = f.restoreGone(e, copies[e.id])
		default:
			continue
		}
		switch {
		case errors.Is(err, errLogFenced):
			f.log.Warn("redis: a completion's end was lost by Redis, and another replica took the completion over meanwhile: its attachers there may get another ending",
				"completion_id", e.id)
		case errors.Is(err, ErrUnavailable):
			// Redis stopped answering: the rest would each wait their
			// timeout, and the watchers after this one with them.
			f.log.Warn("redis: the ends Redis lost could not all be published again: Redis stopped answering; tried again at the next PING that finds it up",
				"completion_id", e.id, "error", err)
			return false
		case err != nil:
			f.log.Warn("redis: a completion's end was lost by Redis and could not be published again: tried again at the next PING",
				"completion_id", e.id, "error", err)
			done = false
		}
	}
	return done
}

// publishLostEnd publishes again, from c, this replica's copy, what Redis
// lacks of the log of e, which it holds without its end.
func (f *PairLog) publishLostEnd(e endedLog, c logCopy) error {
	if err := f.redis.reshareFenced(e.id, c, e.fence); err != nil {
		return err
	}
	f.redis.m.republished.Add(context.Background(), 1)
	f.log.Info("redis: a completion's end was lost by Redis (a failover or a restart): published again from this replica's copy",
		"completion_id", e.id)
	return nil
}

// restoreGone puts back the log of e, which Redis holds no longer at all,
// from c, this replica's copy, unless it went the bounds' way
// (RedisLog.restoreEnded).
func (f *PairLog) restoreGone(e endedLog, c logCopy) error {
	res, err := f.redis.restoreEnded(e.id, c, e.fence)
	switch {
	case err != nil:
		return err
	case res == restoreDone:
		f.redis.m.republished.Add(context.Background(), 1)
		f.log.Info("redis: a completion's log was lost whole by Redis (a restart that came back empty, a failover): restored from this replica's copy",
			"completion_id", e.id, "events", len(c.events))
	case res == restoreThere: // written since the check: another replica's now, or reshare's
	default:
		f.log.Debug("redis: a completion's log is gone from Redis as its bounds would have it: not restored",
			"completion_id", e.id, "why", res)
	}
	return nil
}

// forgetEnds takes off f.ends those of looked (a copy of it) that are not
// in kept (no longer in memory); the ends noted since stay.
func (f *PairLog) forgetEnds(looked []endedLog, kept map[string]logCopy) {
	gone := map[string]bool{}
	for _, e := range looked {
		if _, ok := kept[e.id]; !ok {
			gone[e.id] = true
		}
	}
	if len(gone) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ends = slices.DeleteFunc(f.ends, func(e endedLog) bool { return gone[e.id] })
}

// publishEnded publishes the completions that ended apart while Redis was
// away. It runs on the watch's goroutine for its watchers when Redis answers again
// (Health.WatchBack), and answers false when Redis failed a publication:
// that one and those not tried yet wait for the watch's next PING that
// finds Redis up.
func (f *PairLog) publishEnded() (done bool) {
	f.mu.Lock()
	pending := f.unpublished
	f.unpublished = map[string]string{}
	f.mu.Unlock()
	for id, fence := range pending {
		c, ok := f.mem.copyOf(id)
		if !ok || !c.ended {
			delete(pending, id) // expired here meanwhile
			continue
		}
		switch err := f.redis.reshareFenced(id, c, fence); {
		case err == nil:
			f.endedShared(id, fence)
			f.log.Info("redis: a completion that ended in this replica's memory only is shared: other replicas can attach to it",
				"completion_id", id, "events", len(c.events))
		case errors.Is(err, errLogFenced):
			f.log.Warn("redis: another replica took over a completion that ended here alone: this replica never shares it", "completion_id", id)
		default:
			f.log.Warn("redis: the completions that ended in this replica's memory only could not be shared yet: tried again at the next PING that finds Redis up",
				"completions", len(pending), "error", err)
			f.keepUnpublishedAll(pending)
			return false
		}
		delete(pending, id)
	}
	return true
}

// Open implements Log.
func (f *PairLog) Open(id string, meta Meta) error {
	if err := f.mem.Open(id, meta); err != nil {
		return err
	}
	if !f.watch.Up() {
		f.setApart(id, "redis unreachable", nil)
		return nil
	}
	f.openShared(id, meta)
	return nil
}

// openShared opens the Redis log of id, opened here already: shared from
// now on, or apart when Redis has no room or fails.
func (f *PairLog) openShared(id string, meta Meta) {
	switch err := f.redis.open(id, meta); {
	case err == nil:
		f.mu.Lock()
		f.shared[id] = true
		f.mu.Unlock()
	case errors.Is(err, errLogFull):
		f.setApart(id, f.redis.fullReason(id), nil)
	default:
		f.degrade(id, err)
	}
}

// Append implements Log. A completion shared in Redis is written there
// first and here once Redis acknowledged it, so that this replica's
// followers, who read here, never read an event Redis does not hold (this
// replica may die before the write); a write Redis refuses (ErrFenced) is
// kept nowhere.
func (f *PairLog) Append(id string, ev *completionv1.CompletionEvent) error {
	if err := f.share(id, nil, ev, nil, false); err != nil {
		return err
	}
	f.mem.Append(id, ev)
	f.reshareApart(id, false)
	return nil
}

// End implements Log, as Append: before and the result are one write to
// Redis.
func (f *PairLog) End(id string, before []*completionv1.CompletionEvent, result *completionv1.CompletionEvent, status []byte) error {
	if err := f.share(id, before, result, status, true); err != nil {
		return err
	}
	f.mem.End(id, before, result, status)
	f.reshareApart(id, true)
	return nil
}

// share adds ev, after the events before it, to the Redis log of id in
// one write, if it is shared there, and degrades id to memory when that
// fails. It answers ErrFenced when Redis refused the write. The events of
// one completion come from one goroutine, its driver's, so that share
// never races with itself for an id.
func (f *PairLog) share(id string, before []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent, status []byte, end bool) error {
	f.mu.Lock()
	shared := f.shared[id]
	if end {
		delete(f.shared, id)
	}
	f.mu.Unlock()
	if !shared {
		return nil
	}
	res, err := f.redis.add(id, before, ev, status, end)
	switch {
	case err != nil:
		f.degrade(id, err)
	case res == "fenced":
		f.fencedOut(id)
		return ErrFenced
	case res == "missing":
		f.degrade(id, errors.New("its log is no longer in Redis (Redis restarted, or evicted it)"))
	case res == "gap":
		f.fillGap(id, append(slices.Clip(before), ev), status, end)
	case res == "ok" && end:
		f.endedShared(id, f.redis.fence(id))
	}
	return nil
}

// fillGap publishes again the log of id, whose last events Redis lost (a
// failover, or a restart from a saved copy, lost acknowledged writes: it
// answered gap to the write of evs), from this replica's copy and evs
// (with status when they end the log), before evs are readable here: so
// the shared log gets no hole, and holds evs before any caller sees them.
// A log that cannot be published now is kept apart (setApart) until it
// can.
func (f *PairLog) fillGap(id string, evs []*completionv1.CompletionEvent, status []byte, end bool) {
	c, ok := f.mem.copyOf(id)
	var err error
	for _, ev := range evs {
		var b []byte
		if b, err = proto.Marshal(ev); err != nil {
			break
		}
		c.events, c.seqs = append(c.events, b), append(c.seqs, ev.GetSeq())
	}
	if ok && err == nil {
		if end {
			c.ended, c.status = true, status
		}
		err = f.redis.reshare(id, c)
	}
	const why = "its log in Redis lost its last events (a failover or a restart lost acknowledged writes)"
	if !ok || err != nil {
		f.setApart(id, why, err)
		return
	}
	if end {
		f.endedShared(id, f.redis.fence(id))
	}
	f.redis.m.republished.Add(context.Background(), 1)
	f.log.Info("redis: "+why+": published again from this replica's copy", "completion_id", id, "events", len(c.events))
}

// reshareApart publishes again the log of id, if it is kept here apart
// and the time has come (always at its end), from this replica's copy,
// which holds the event just appended; ended says whether it just ended.
func (f *PairLog) reshareApart(id string, ended bool) {
	f.mu.Lock()
	apart := f.apart[id]
	if ended {
		delete(f.apart, id)
	}
	try := apart != nil && !apart.orphan && (ended || !f.now().Before(apart.retry))
	f.mu.Unlock()
	switch {
	case apart == nil:
	case try && f.watch.Up():
		f.reshare(id, apart, ended)
	case ended && !apart.orphan:
		f.keepUnpublished(id)
	}
}

// reshare publishes again the log of id, apart until now; ended is
// whether it just ended (it is off the maps already).
func (f *PairLog) reshare(id string, apart *apartState, ended bool) {
	c, ok := f.mem.copyOf(id)
	if !ok {
		return
	}
	fence := f.redis.fence(id)
	err := f.redis.reshare(id, c)
	if err == nil && ended {
		f.endedShared(id, fence)
	}
	f.mu.Lock()
	switch {
	case err == nil && !ended:
		delete(f.apart, id)
		f.shared[id] = true
	case errors.Is(err, errLogFenced):
		apart.orphan = true
	case err != nil:
		apart.retry = f.now().Add(reshareEvery)
	}
	f.mu.Unlock()
	switch {
	case err == nil:
		f.log.Info("redis: a completion logged in this replica's memory only is shared again: other replicas can attach to it",
			"completion_id", id, "events", len(c.events), "ended", ended)
	case errors.Is(err, errLogFenced):
		f.log.Warn("redis: another replica took the completion over while it ran here alone: this replica finishes it for its own callers and never shares it",
			"completion_id", id)
	default:
		if ended && errors.Is(err, ErrUnavailable) {
			f.keepUnpublished(id)
		} else if ended {
			// What Redis kept of it stops short and would never end: other
			// replicas are better told NOT_FOUND than left following it.
			_ = f.redis.dropUnlessFenced(id)
		}
		if ended && slotMoving(err) {
			// Only a PING after Redis was down publishes the completions
			// that ended apart (publishEnded, a watcher of WatchBack): a
			// slot that stays mid-move for longer than a write waits
			// counts as down for this one.
			err = fmt.Errorf("%w: an ended completion could not be published: %v", ErrUnavailable, err.Error())
		}
		if errors.Is(err, ErrUnavailable) {
			f.watch.Failed(err)
		}
	}
}

// keepUnpublished remembers that id ended apart while Redis did not
// answer, with its fence, for publishEnded.
func (f *PairLog) keepUnpublished(id string) {
	v := f.redis.fence(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.unpublished) >= maxUnpublished {
		for old := range f.unpublished { // any: they are all as old as an outage
			delete(f.unpublished, old)
			break
		}
	}
	f.unpublished[id] = v
}

// keepUnpublishedAll remembers again the completions of pending, which
// ended apart, with their fences: an id noted since keeps its newer fence.
func (f *PairLog) keepUnpublishedAll(pending map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, fence := range pending {
		if _, noted := f.unpublished[id]; !noted && len(f.unpublished) < maxUnpublished {
			f.unpublished[id] = fence
		}
	}
}

// KeptHere implements Log.
func (f *PairLog) KeptHere(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apart[id] != nil
}

// Fenced implements Log: the Redis writes check a lease.
func (f *PairLog) Fenced() bool { return true }

// Fence implements Log: the Redis writes of id check its lease.
func (f *PairLog) Fence(id string, l Lease) { f.redis.Fence(id, l) }

// Unfence implements Log. A completion whose run is over while its
// log in memory is still live was fenced (this replica lost its lease
// and wrote nothing more): its copy here is dropped, so that the readers
// on this replica read the log of the replica that took it over, in Redis.
func (f *PairLog) Unfence(id string) (released bool) {
	released = f.redis.Unfence(id)
	if f.mem.forgetLive(id) {
		f.mu.Lock()
		delete(f.shared, id)
		delete(f.apart, id)
		f.mu.Unlock()
	}
	return released
}

// fencedOut: Redis refused a write of id, whose lease another replica
// holds now. Nothing more of id is written here (the owner's renewal
// finds the lease lost and stops the completion), and this replica's
// readers read the new owner's log in Redis.
func (f *PairLog) fencedOut(id string) {
	f.mu.Lock()
	delete(f.shared, id)
	f.mu.Unlock()
	f.mem.forgetLive(id)
	f.log.Warn("redis: a write refused, the completion's lease is another replica's: this replica stops writing it", "completion_id", id)
}

// Adopt implements Log: it starts logging here completion id, which
// this replica takes over:
// its log in Redis goes on (shared), and this replica's memory gets a copy
// of what Redis kept (meta, evs and the checkpoint ck of seq ckSeq, read
// for the rebuild), so that its readers read it here first as for the
// completions it started, and so that the log stays whole if Redis fails
// from now on. It counts the takeover (completiond.takeovers): Adopt is
// what a replica does once it has the lease and the rebuild of a
// completion another replica ran.
func (f *PairLog) Adopt(id string, meta Meta, evs []*completionv1.CompletionEvent, ckSeq uint64, ck []byte) {
	f.redis.m.takeovers.Add(context.Background(), 1)
	f.mem.forgetLive(id) // a stale copy: this replica owned it before
	if err := f.mem.Open(id, meta); err == nil {
		for _, ev := range evs {
			f.mem.Append(id, ev)
		}
		if ck != nil {
			f.mem.SaveCheckpoint(id, ckSeq, ck)
		}
	}
	f.mu.Lock()
	f.shared[id] = true
	delete(f.apart, id)
	f.mu.Unlock()
}

// degrade takes id off Redis until it is published again.
func (f *PairLog) degrade(id string, err error) {
	if errors.Is(err, ErrUnavailable) {
		f.watch.Failed(err)
	}
	f.setApart(id, "redis failed", err)
}

// setApart logs id in memory only, until it is published again.
func (f *PairLog) setApart(id, why string, err error) {
	f.mu.Lock()
	delete(f.shared, id)
	f.apart[id] = &apartState{retry: f.now().Add(reshareEvery)}
	f.mu.Unlock()
	attrs := []any{"completion_id", id, "reason", why}
	if err != nil {
		attrs = append(attrs, "error", err)
	}
	f.log.Warn("redis: completion logged in this replica's memory only: other replicas cannot attach to it until it is published there (Redis answers again, or its log has room)",
		attrs...)
	f.local.Add(context.Background(), 1)
}

// Read implements Log.
func (f *PairLog) Read(id string, after uint64) (Page, error) {
	p, err := f.mem.Read(id, after)
	if !errors.Is(err, ErrNotFound) {
		return p, err
	}
	return f.redis.Read(id, after)
}

// Expire implements Log.
func (f *PairLog) Expire(now time.Time) {
	f.mem.Expire(now)
	f.redis.Expire(now)
}

// RedisInstruments registers the Redis metrics on mp: the gauge
// completiond.redis.degraded (1 while Redis does not answer) and the
// counter completiond.redis.local_only, which it returns. The fleet's
// other instruments come with the client (Instrument).
func RedisInstruments(mp metric.MeterProvider, up func() bool) metric.Int64Counter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter(telemetry.Instrumentation)
	local, _ := m.Int64Counter("completiond.redis.local_only", metric.WithUnit("{completion}"),
		metric.WithDescription("Completions whose events this replica kept in its memory only, as Redis did not answer when they started or failed while they ran: other replicas cannot attach to them."))
	local.Add(context.Background(), 0) // the series exists, at 0, before the first
	// The unit is an annotation, not "1": Prometheus would name the gauge
	// completiond_redis_degraded_ratio, which it is not.
	_, _ = m.Int64ObservableGauge("completiond.redis.degraded", metric.WithUnit("{state}"),
		metric.WithDescription("1 while Redis does not answer (completions are logged in this replica's memory only, health is NOT_SERVING), 0 when it does."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			v := int64(0)
			if !up() {
				v = 1
			}
			o.Observe(v)
			return nil
		}))
	return local
}

// openLeased is OpenLeased where the leases are in the same Redis as the
// log: one script opens the log and takes the lease (RedisLog.openLeased).
func (f *PairLog) openLeased(id, replica string, ttl time.Duration, meta Meta) (lease *Lease, leaseErr, openErr error) {
	if err := f.mem.Open(id, meta); err != nil {
		return nil, nil, err
	}
	lease, leaseErr = f.shareLeased(id, replica, ttl, meta, nil)
	return lease, leaseErr, nil
}

// shareLeased opens in Redis the log of id, open here already, and takes
// its lease for replica in the same script; with first (not nil), the
// log's first event, which is then logged here and in Redis as Append
// would, in that same script when it can. Without a lease (nil, and why),
// the completion is logged here only, or shared without its request when
// another holds the lease.
func (f *PairLog) shareLeased(id, replica string, ttl time.Duration, meta Meta, first *completionv1.CompletionEvent) (*Lease, error) {
	if !f.watch.Up() {
		f.mem.clearRequest(id)
		f.setApart(id, "redis unreachable", nil)
		f.appendFirst(id, first)
		return nil, fmt.Errorf("%w: redis is down", ErrUnavailable)
	}
	token, added, err := f.redis.openFirst(id, meta, replica, ttl, first)
	if err == nil {
		f.mu.Lock()
		f.shared[id] = true
		f.mu.Unlock()
		lease := &Lease{ID: id, Token: token, Replica: replica}
		if added {
			f.mem.Append(id, first)
		} else if first != nil { // its log was there already: a write of its own
			f.redis.Fence(id, *lease)
			f.appendFirst(id, first)
		}
		return lease, nil
	}
	f.mem.clearRequest(id)
	meta.Request = nil
	switch {
	case errors.Is(err, ErrLeaseHeld):
		f.openShared(id, meta)
	case errors.Is(err, errLogFull):
		f.setApart(id, f.redis.fullReason(id), nil)
	default:
		f.degrade(id, err)
	}
	f.appendFirst(id, first)
	return nil, err
}

// appendFirst appends first, unless nil, as Append does. The write is
// not refused: it is unfenced, or fenced by the lease just taken.
func (f *PairLog) appendFirst(id string, first *completionv1.CompletionEvent) {
	if first != nil {
		_ = f.Append(id, first)
	}
}
