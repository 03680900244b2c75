package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redisscript"
)

// errLogFenced: another replica holds the completion's lease, or was
// granted it since the writer's.
var errLogFenced = ErrFenced

// ErrUnavailable wraps the errors of a Redis that does not answer.
var ErrUnavailable = errors.New("event log unavailable")

// DefaultRedisLiveTTL is RedisLog.LiveTTL when unset.
const DefaultRedisLiveTTL = time.Hour

// DefaultRedisOpTimeout bounds each command of the Redis event log.
const DefaultRedisOpTimeout = time.Second

// redisWakeAll is how often, at most, the followers of a Redis log read
// again without a notice: a notice lost while the subscription was down,
// or a log dropped by its TTL rather than by a script, is seen by then.
const redisWakeAll = 5 * time.Second

// redisFollowedFor is how long a Read marks a log followed: past the
// longest a follower waits without reading again (redisWakeAll, twice
// when a Receive times out just before the wake), with room to spare.
const redisFollowedFor = 4 * redisWakeAll

// RedisLog is the Log in Redis, shared by every replica: one Redis Stream
// per completion (redisLogKey, entry 0-N for seq N), its meta in a hash
// (redisMetaKey), and the bounds of EventLogLimits over the whole Redis
// (the completions and bytes kept, counted in completiond:logs:*). The
// scripts in lua/ keep them, each atomic and declaring every key it
// touches (keys.go has the one table of them): an Open is one call, and the
// Appends and Ends of all the completions of this replica go together, one
// call of lua/commit.lua per flush of the group commit (committer), fenced
// per completion inside it. Each answers the ids of the other logs its
// bound evicts, which the writer then drops one by one (lua/drop.lua), each
// with its own keys declared.
// Retention is kept both ways: every replica drops, every redisWakeAll, the
// logs that ended Retention ago (by the log's clock) and the live logs that
// lapsed (sweep), and every key also expires (PEXPIRE) on its own, so that
// nothing outlives a fleet that stopped. A live log lapses after LiveTTL
// without an event (its replica died), give or take LiveTTL/16 (renewed
// once that much has passed, not at every event).
//
// Following: one Pub/Sub subscription per process, on redisLogChanged,
// whose messages name the logs that changed and the seq appended ("id seq"
// lines, or "id" for a log dropped). Only the logs that some replica
// follows are published: each Read marks its log followed for a while
// (redisFollowedKey), so that a replica is not woken by every append of
// every other replica; the Read that sets the mark announces it ("+id",
// announce), so that the log's writer notifies its events from then on
// without looking the mark up at each. A Read's More is a channel of a per-id
// registry, closed when a notice of the id above the last seq the Read saw
// arrives (no goroutine and no Redis connection per follower; XREAD BLOCK
// per follower would hold a connection of the pool each). Every
// redisWakeAll, and on each resubscription, all of them are closed, so that
// a notice lost while the subscription was down delays a follower by that
// much at most.
//
// A script writes one completion's keys and the counts of
// completiond:logs:*: on one Redis (standalone, or behind Sentinel) the
// whole fleet's; on a Redis Cluster (a cluster client), its shard's, in
// the slot of the completion's keys, so that the bounds are kept per
// shard (keyspace, ClusterShards) and a flush makes one call per shard it
// writes.
type RedisLog struct {
	rdb    redis.UniversalClient
	ks     *keyspace
	limits config.EventLogLimits
	now    func() time.Time
	// LiveTTL is how long a live log is kept without an event.
	LiveTTL time.Duration
	// OpTimeout bounds each command.
	OpTimeout time.Duration
	// LeaseTTL is the length of the leases that fence the writes (Fence):
	// a replica publishing again a log it kept alone for a while takes its
	// lapsed lease back for this long (DefaultLeaseTTL when zero).
	LeaseTTL time.Duration
	// CommitDelay is the longest a flush of the group commit waits for
	// more appends while other completions write (committer's wait;
	// config.DefaultRedisCommitDelay when zero). Set it before the first
	// append.
	CommitDelay time.Duration

	fences sync.Map // id → the lease value its writes need (Fence)
	// released are the ids whose end's write deleted their lease, which
	// was the writer's (lua/commit.lua answered okr), until Unfence.
	released sync.Map
	// writing is the logWriter of each log this replica writes: when it
	// last renewed the log, and the bytes of its events not counted yet.
	writing sync.Map
	pruned  atomic.Int64 // when forgetStale last ran (Unix ms)
	// pendingMeta is the encoded meta, with its request, of each log
	// openLeased opened: it replaces the log's meta with the first write
	// fenced by the lease.
	pendingMeta sync.Map
	m           *metrics // rdb's (Instrument)
	// losses counts the moments Redis may have lost acknowledged writes
	// (mayHaveLost): a writer whose last write came before one checks
	// that its log follows on (suspect).
	losses atomic.Uint64
	// traffic is, per shard (one on one Redis), when this replica last
	// wrote it and when its writes last resumed after a quiet spell
	// (suspect).
	traffic []shardTraffic
	// scriptsGone, unless nil, is called when a flush finds a Redis
	// without its scripts (restarted, or a replica promoted): NewPairLog
	// has Health look at once for the new process (Health.Kick).
	scriptsGone func()

	commit *committer
	wake   *wakeRegistry
	ps     *redis.PubSub
	stop   context.CancelFunc
	closed chan struct{}
}

// NewRedisLog returns the Log in rdb with limits (zero fields
// take their defaults) reading the time from now (nil: time.Now). It
// subscribes to the change notices at once; Close ends that.
func NewRedisLog(rdb redis.UniversalClient, limits config.EventLogLimits, now func() time.Time) *RedisLog {
	return newRedisLogIn(keyspaceOf(rdb), rdb, limits, now)
}

// newRedisLogIn is NewRedisLog with the keys laid out as ks says.
func newRedisLogIn(ks *keyspace, rdb redis.UniversalClient, limits config.EventLogLimits, now func() time.Time) *RedisLog {
	limits.FillDefaults()
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &RedisLog{rdb: rdb, ks: ks, limits: limits, now: now, LiveTTL: DefaultRedisLiveTTL, OpTimeout: DefaultRedisOpTimeout,
		m: metricsOf(rdb), wake: newWakeRegistry(), stop: cancel, closed: make(chan struct{}),
		traffic: make([]shardTraffic, max(ks.shards, 1))}
	ps := rdb.Subscribe(ctx, redisLogChanged)
	// The first confirmation is awaited here (within OpTimeout), so that a
	// Read made after New is woken by the next change, not by it.
	if _, err := ps.ReceiveTimeout(ctx, l.OpTimeout); err != nil {
		l.wake.all(2 * redisWakeAll) // harmless: nobody waits yet
	}
	l.ps = ps
	l.commit = newCommitter(l.flush, l.evict, l.commitDelay, l.m.recordBatch, l.m.recordWait)
	go l.listen(ctx, ps)
	return l
}

// commitDelay is the committer's wait: CommitDelay, or its default.
func (l *RedisLog) commitDelay() time.Duration {
	return cmp.Or(l.CommitDelay, config.DefaultRedisCommitDelay)
}

// Close flushes the appends under way, stops following the change notices
// and wakes every follower. Appends after it fail (ErrUnavailable).
func (l *RedisLog) Close() {
	l.commit.close()
	l.stop()
	_ = l.ps.Close() // ends a Receive under way
	<-l.closed
}

// listen closes the More of every log whose notice arrives, and all of
// them on each (re)subscription and every redisWakeAll.
func (l *RedisLog) listen(ctx context.Context, ps *redis.PubSub) {
	defer close(l.closed)
	defer l.wake.all(2 * redisWakeAll)
	defer ps.Close()
	last := time.Now()
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, redisWakeAll)
		if testHookRedisReceive != nil {
			testHookRedisReceive(msg, err)
		}
		switch m := msg.(type) {
		case *redis.Message:
			for _, line := range strings.Split(m.Payload, "\n") {
				if id, ok := strings.CutPrefix(line, redisFollowedNotice); ok {
					l.followedNow(id)
					continue
				}
				l.wake.notice(parseNotice(line))
			}
		case *redis.Subscription:
			l.wake.all(2 * redisWakeAll)
			last = time.Now()
		}
		if err != nil && ctx.Err() == nil {
			var nerr interface{ Timeout() bool }
			if !errors.As(err, &nerr) || !nerr.Timeout() {
				// Redis is away: the next Receive reconnects; do not spin.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		if time.Since(last) >= redisWakeAll {
			l.wake.all(2 * redisWakeAll)
			_ = l.expire(l.now())
			last = time.Now()
		}
	}
}

// testHookRedisAdd, when set, is called before each append to Redis.
var testHookRedisAdd func(id string, seq uint64)

// testHookReshare, when set, is called before each reshare of a log.
var testHookReshare func(id string)

// testHookRedisReceive, when set, sees each Receive of the listener.
var testHookRedisReceive func(any, error)

func (l *RedisLog) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), l.OpTimeout)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// Open implements Log.
func (l *RedisLog) Open(id string, meta Meta) error { return l.open(id, meta) }

// open is Open, with errLogFull or the error of a Redis that did not answer.
func (l *RedisLog) open(id string, meta Meta) error {
	_, err := l.openLeased(id, meta, "", 0)
	return err
}

// openLeased is open, which also takes the lease of id for replica (for
// ttl) in the same script unless replica is empty, and answers its token:
// ErrLeaseHeld when another holds it (nothing is done then), errLogFull
// when the log has no room (no lease is taken then).
//
// Under a lease, the log is opened without meta.Request (what a takeover
// runs again): the request goes to Redis with the writer's first write
// fenced by the lease (add, or joinRequest), so only a writer that learnt
// its token can make the completion one another replica may take over. A
// reply lost on the way (Redis slow past the timeout) leaves a lease
// nobody renews on a log no replica would run a second time.
func (l *RedisLog) openLeased(id string, meta Meta, replica string, ttl time.Duration) (uint64, error) {
	token, _, err := l.openFirst(id, meta, replica, ttl, nil)
	return token, err
}

// openFirst is openLeased, which under a lease also adds first (when not
// nil) to a new log as its first event, in the same script: the
// completion's started event, which then costs no round trip of its own.
// added says whether it did (not when the log existed already: the caller
// appends first then). The open renewed the log as a writer's first write
// would, so the writer's next write is no renewal (RedisLog.renewal), and
// first's bytes are counted in the bound late, as an appended event's are
// (sizeOf).
func (l *RedisLog) openFirst(id string, meta Meta, replica string, ttl time.Duration, first *completionv1.CompletionEvent) (token uint64, added bool, err error) {
	full := ""
	if replica != "" && len(meta.Request) > 0 {
		if full, err = encodeLogMeta(meta); err != nil {
			return 0, false, err
		}
		meta.Request = nil
	}
	m, err := encodeLogMeta(meta)
	if err != nil {
		return 0, false, err
	}
	var event []byte
	if first != nil && replica != "" {
		if event, err = proto.Marshal(first); err != nil {
			return 0, false, err // cannot happen: the service builds every event
		}
	}
	// Each try has its own OpTimeout: a move that refuses it ends within
	// untilMoved's OpTimeout, or the open fails.
	var res []string
	try := func() bool {
		ctx, cancel := l.ctx()
		defer cancel()
		res, err = l.ks.scripts.open.Run(ctx, l.rdb, id, id, m, ms(l.now()), l.ks.share(int64(l.limits.MaxCompletions)), l.LiveTTL.Milliseconds(),
			replica, ttl.Milliseconds(), leaseTokenTTL.Milliseconds(), event, l.evictAhead()).StringSlice()
		return refusedMoving(err)
	}
	if moving := l.untilMoved(id, try); moving != nil {
		return 0, false, moving
	}
	ctx, cancel := l.ctx()
	defer cancel()
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case res[0] == "full":
		return 0, false, errLogFull
	case res[0] == "held":
		return 0, false, ErrLeaseHeld
	case len(res) < 3:
		return 0, false, fmt.Errorf("%w: open.lua answered %q", ErrUnavailable, res)
	}
	token, err = strconv.ParseUint(res[1], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: open.lua answered the token %q", ErrUnavailable, res[1])
	}
	if full != "" {
		l.pendingMeta.Store(id, full)
	}
	if added = res[2] == "1"; added {
		lw := l.writer(id)
		lw.renewed.Store(ms(l.now()))
		lw.unsized.Add(int64(len(event)))
	}
	return token, added, l.dropAll(ctx, res[3:])
}

// fullReason says why the log of id has no room (errLogFull): on a
// Cluster, its shard's share of the bound is all running completions.
func (l *RedisLog) fullReason(id string) string {
	if l.ks.shards == 0 {
		return "the Redis log is full of running completions"
	}
	return fmt.Sprintf("its shard of the Redis log (s%d of %d) is full of running completions: each shard keeps %d (the bound on completions divided by the shards)",
		l.ks.shard(id), l.ks.shards, l.ks.share(int64(l.limits.MaxCompletions)))
}

// evictAhead is how many ended logs an open that finds the Redis log full
// evicts beyond the one it needs (lua/open.lua): a 64th of the bound, so
// that a fleet at its bound drops once every so many opens, not at each;
// the oldest ended logs go that much early (of a shard's, on a Cluster).
func (l *RedisLog) evictAhead() int64 { return max(1, l.ks.share(int64(l.limits.MaxCompletions))/64) }

// joinRequest writes the request a takeover runs again (what openLeased
// left pending) into the log of id, fenced by its lease, unless a write
// of the log carried it already: a write without an event in the group
// commit, so that it costs Redis no call of its own. A write that fails
// leaves it pending, for the log's next fenced write.
func (l *RedisLog) joinRequest(id string) {
	fence := l.fence(id)
	if fence == "" {
		return
	}
	m, ok := l.pendingMeta.LoadAndDelete(id)
	if !ok {
		return
	}
	if _, err := l.commitWrite(commitWrite{id: id, fence: fence, meta: m.(string), args: l.writer(id).args}); err != nil {
		l.pendingMeta.LoadOrStore(id, m)
	}
}

// Append implements Log: ErrFenced when the lease refused the write;
// another failure is dropped (PairLog is the log that degrades).
func (l *RedisLog) Append(id string, ev *completionv1.CompletionEvent) error {
	return refusal(l.add(id, nil, ev, nil, false))
}

// End implements Log, as Append: before and the result are one write
// (commitWrite.before), which lua/commit.lua appends whole or not at all.
func (l *RedisLog) End(id string, before []*completionv1.CompletionEvent, result *completionv1.CompletionEvent, status []byte) error {
	return refusal(l.add(id, before, result, status, true))
}

// refusal is ErrFenced when a script answered fenced.
func refusal(res string, _ error) error {
	if res == "fenced" {
		return ErrFenced
	}
	return nil
}

// Fenced implements Log: Redis checks a lease with each write.
func (l *RedisLog) Fenced() bool { return true }

// Fence implements Log: from now on, the writes of id happen only
// while l is its lease, checked by each script that writes atomically with
// the write (lua/commit.lua and lua/checkpoint.lua compare LeaseKey(id)
// with the lease's Value); a write refused is dropped (add answers fenced).
func (l *RedisLog) Fence(id string, lease Lease) { l.fences.Store(id, lease.Value()) }

// Unfence implements Log.
//
// The writes of id are over: a request still pending (joinRequest and the
// writes after it failed) goes too. Its lease is released when the write
// that ended it found the lease the writer's and deleted it (lua/commit.lua
// answered okr); a lease gone already, or one kept elsewhere (Leases not in
// this Redis), is left to the owner's own release.
func (l *RedisLog) Unfence(id string) (released bool) {
	l.fences.Delete(id)
	l.pendingMeta.Delete(id)
	_, released = l.released.LoadAndDelete(id)
	return released
}

// KeptHere implements Log: nothing is kept apart from Redis.
func (l *RedisLog) KeptHere(string) bool { return false }

// Adopt implements Log: a completion taken over is logged in Redis
// already.
func (l *RedisLog) Adopt(string, Meta, []*completionv1.CompletionEvent, uint64, []byte) {}

// logWriter is what a replica keeps of a log it writes (RedisLog.add):
// the events of one completion come from one goroutine, its driver's, but
// forgetStale reads every writer's renewal.
type logWriter struct {
	// renewed is when this writer last renewed the log (Unix ms):
	// lua/commit.lua renews a log (and checks that it is there and has not
	// ended) at a writer's first write and then once LiveTTL/16 has
	// passed, not at every event (renewal).
	renewed atomic.Int64
	// unsized is the bytes of the events Redis acknowledged that its
	// bound does not count yet: lua/commit.lua counts an event's size
	// only when the write carries it (sizeOf), not at every event.
	unsized atomic.Int64
	// followed: a replica follows the log, so each event's write asks for
	// its notice (commitWrite.notify). Set when a follower announces
	// itself (announce), or when lua/commit.lua found the log marked at a
	// renewal or the end, where it looks; never cleared: a log followed
	// once is usually followed to its end.
	followed atomic.Bool
	// output is the attempt and turn of the last output written
	// (attempt<<32 | turn, plus one), 0 before any: the first output of
	// each is urgent (firstOutput).
	output atomic.Int64
	// args are the log's keys and id as lua/commit.lua's arguments,
	// built once for all its writes.
	args *commitArgs
	// acked is when Redis last acknowledged a write of this writer (Unix
	// ms), and losses the RedisLog's count of possible losses then
	// (suspect).
	acked  atomic.Int64
	losses atomic.Uint64
}

// firstOutput: ev is the first output (a token's delta, a tool call) of
// its attempt and turn that this writer writes — the one its caller waits
// for as the time to first token, whose flush waits for company at most
// urgentWait (commitWrite.urgent).
func (lw *logWriter) firstOutput(ev *completionv1.CompletionEvent) bool {
	if ev.GetDelta() == nil && ev.GetToolCall() == nil {
		return false
	}
	key := int64(ev.GetAttempt())<<32 | int64(uint32(ev.GetTurn())) + 1
	return lw.output.Swap(key) != key
}

// add appends ev, after the events before it (each numbered, the last
// of them just before ev), to the log of id in one write, and with end
// ends it with status, with the next flush of the group commit
// (committer). It answers what lua/commit.lua did (ok, missing, ended,
// order, gap when Redis lost the log's last events, or fenced when id is
// fenced and its lease is no longer the writer's) or the error of a Redis
// that did not answer.
func (l *RedisLog) add(id string, before []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent, status []byte, end bool) (string, error) {
	b, err := proto.Marshal(ev)
	if err != nil {
		return "", err // cannot happen: the service builds every event
	}
	w := commitWrite{id: id, seq: ev.GetSeq(), event: b, status: status, end: end}
	for _, e := range before {
		eb, err := proto.Marshal(e)
		if err != nil {
			return "", err
		}
		w.addBefore(eb)
	}
	if testHookRedisAdd != nil {
		testHookRedisAdd(id, ev.GetSeq())
	}
	w.fence = l.fence(id)
	if w.fence != "" {
		if m, ok := l.pendingMeta.LoadAndDelete(id); ok {
			w.meta = m.(string)
		}
	}
	lw := l.writer(id)
	w.args = lw.args
	w.renew = l.renewal(lw)
	w.check = l.suspect(id, lw) && !w.renew
	// The count of possible losses before the write: one counted while it
	// is in flight (the node that acknowledges it may die just after)
	// makes the writer's next write check.
	losses := l.losses.Load()
	unsized := lw.unsized.Load()
	w.size = l.sizeOf(w, unsized)
	w.notify = lw.followed.Load()
	w.urgent = end || ev.GetStopHookRequest() != nil || lw.firstOutput(ev)
	res, err := l.commitWrite(w)
	res, followed, released := commitFlags(res)
	if followed {
		lw.followed.Store(true)
	}
	if err == nil && res == "ok" {
		lw.acked.Store(ms(l.now()))
		lw.losses.Store(losses)
	}
	switch {
	case err != nil || res != "ok":
		l.writing.Delete(id) // the next write checks the log again
	case end:
		l.writing.Delete(id)
		l.pendingMeta.Delete(id)
		if released {
			l.released.Store(id, struct{}{})
		}
	case w.size > 0:
		lw.unsized.Add(-unsized)
	default:
		lw.unsized.Add(w.beforeSize + int64(len(b)+len(status)))
	}
	if err == nil && res == "fenced" {
		l.refused()
	}
	return res, err
}

// commitWrite writes w with the next flush of the group commit, and
// again while Redis refuses it because its shard's slot is moving to
// another node of the Cluster (untilMoved). The other writes of its flush
// are answered meanwhile.
func (l *RedisLog) commitWrite(w commitWrite) (res string, err error) {
	if moving := l.untilMoved(w.id, func() bool {
		res, err = l.commit.write(w)
		return res == commitTryAgain
	}); moving != nil {
		return "", moving
	}
	return res, err
}

// untilMoved makes a call of id's keys (try, which reports whether Redis
// refused it because the shard's slot is moving to another node of the
// Cluster: refusedMoving, or commitTryAgain) again while it is refused,
// after a pause that doubles from tryAgainFirst to tryAgainMost (a move
// takes milliseconds per batch of keys), within OpTimeout; then it
// answers errSlotMoving.
func (l *RedisLog) untilMoved(id string, try func() (refused bool)) error {
	start := time.Now()
	for pause := tryAgainFirst; try(); pause = min(2*pause, tryAgainMost) {
		if time.Since(start)+pause > l.OpTimeout {
			return fmt.Errorf("%w: %s's shard, for %s", errSlotMoving, id, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(pause)
	}
	return nil
}

// errSlotMoving: Redis refused a command (refusedMoving) for longer than
// it waits, its shard's slot moving to another node of the Cluster. It is
// ErrUnavailable (the completion is kept apart, and published again
// later), but Redis answers: Health.Failed does not take it for down.
var errSlotMoving = fmt.Errorf("%w: the slot is moving to another node of the cluster (TRYAGAIN)", ErrUnavailable)

// slotMoving reports whether err is a command refused because its slot is
// moving: errSlotMoving, or Redis's refusal once the client's own retries
// gave up (refusedMoving).
func slotMoving(err error) bool {
	return errors.Is(err, errSlotMoving) || refusedMoving(err)
}

// The pauses before a write refused because its slot is moving goes again
// (commitWrite).
const (
	tryAgainFirst = 2 * time.Millisecond
	tryAgainMost  = 100 * time.Millisecond
)

// followedNow marks the log of id followed, if this replica writes it.
func (l *RedisLog) followedNow(id string) {
	if lw, ok := l.writing.Load(id); ok {
		lw.(*logWriter).followed.Store(true)
	}
}

// writer is the logWriter of id, new at this replica's first write of it
// (or its first since the writer was forgotten).
func (l *RedisLog) writer(id string) *logWriter {
	if lw, ok := l.writing.Load(id); ok {
		return lw.(*logWriter)
	}
	lw, _ := l.writing.LoadOrStore(id, &logWriter{args: newCommitArgs(l.ks, id)})
	return lw.(*logWriter)
}

// renewal reports whether a write through lw is to renew its log: the
// first this writer makes, and then once LiveTTL/16 has passed since it
// last renewed it.
func (l *RedisLog) renewal(lw *logWriter) bool {
	now := ms(l.now())
	last := lw.renewed.Load()
	if last != 0 && now-last < l.LiveTTL.Milliseconds()/16 {
		return false
	}
	lw.renewed.Store(now)
	l.forgetStale(now)
	return true
}

// gapCheckAfter is the quiet spell after which a replica's next write of
// a shard checks that its log follows on (suspect). Redis loses
// acknowledged writes only when its primary dies or restarts (a
// failover, a restart from a saved copy), which takes longer: while the
// replica writes a shard at shorter intervals, some write of it lands in
// any such outage and fails (mayHaveLost).
const gapCheckAfter = 50 * time.Millisecond

// shardTraffic is when a replica last wrote a shard, and when its writes
// of it last resumed after gapCheckAfter or more without any (Unix ms).
type shardTraffic struct {
	mu      sync.Mutex
	last    int64
	resumed int64
}

// write notes a write of the shard at now, and answers when the shard's
// writes last resumed after a quiet spell (now, if this one does).
func (t *shardTraffic) write(now int64) (resumed int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now-t.last >= gapCheckAfter.Milliseconds() {
		t.resumed = now
	}
	t.last = now
	return t.resumed
}

// suspect reports whether Redis may have lost writes of id's shard since
// the last write of lw that it acknowledged, noting this write of the
// shard: the replica's writes of the shard paused gapCheckAfter or more
// since (an outage may have passed unseen), or a flush failed since
// (mayHaveLost). Its next write then checks that the log's last entry is
// the seq before its own (commitWrite.check), so that a log never gets a
// hole: lua/commit.lua answers gap, and PairLog publishes the log again
// from this replica's copy. A check costs a lookup in Redis (a third more
// of its time per event when made at every one); a replica that writes a
// shard steadily makes none.
func (l *RedisLog) suspect(id string, lw *logWriter) bool {
	resumed := l.traffic[l.ks.shard(id)].write(ms(l.now()))
	return lw.acked.Load() < resumed || lw.losses.Load() != l.losses.Load()
}

// mayHaveLost notes that Redis may have lost acknowledged writes: a call
// failed (its node did not answer), or found its script gone (restarted).
func (l *RedisLog) mayHaveLost() { l.losses.Add(1) }

// endsLostBatch is how many logs one pipeline of endsLost asks about.
const endsLostBatch = 500

// endsLost answers which of the logs of ids Redis holds without their
// end (lost: logs that ended, whose end Redis lost), and which it holds
// no longer at all (gone: lost whole, or dropped; RedisLog.restoreEnded
// tells which) (PairLog.republishLostEnds).
func (l *RedisLog) endsLost(ids []string) (lost, gone map[string]bool, err error) {
	lost, gone = map[string]bool{}, map[string]bool{}
	for batch := range slices.Chunk(ids, endsLostBatch) {
		ctx, cancel := l.ctx()
		cmds, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range batch {
				p.Exists(ctx, l.ks.meta(id))
				p.HExists(ctx, l.ks.meta(id), "ended")
			}
			return nil
		})
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		for i, id := range batch {
			there, ended := cmds[2*i].(*redis.IntCmd).Val() == 1, cmds[2*i+1].(*redis.BoolCmd).Val()
			switch {
			case !there:
				gone[id] = true
			case !ended:
				lost[id] = true
			}
		}
	}
	return lost, gone, nil
}

// sizeOf is the size w is to count in the bound of bytes (0: none), with
// unsized, the bytes of the writer's earlier events not counted yet: all of
// them and w's own at a renewal, at the end, or once they reach
// sizeEvery; otherwise nothing, and w's own are added to unsized once Redis
// has it. So a running completion's last events, up to sizeEvery bytes,
// are missing from the total, which is a sixteenth of MaxBytes at most over
// MaxCompletions logs; an ended log is counted exactly. A writer that
// stops (its replica died, the log was taken over) leaves its log counted
// short by as much: the total and the logs' sizes always agree, so that
// dropping the log takes off what was counted, no more.
func (l *RedisLog) sizeOf(w commitWrite, unsized int64) int64 {
	own := w.beforeSize + int64(len(w.event)+len(w.status))
	if w.renew || w.end || unsized+own >= l.sizeEvery() {
		return unsized + own
	}
	return 0
}

// sizeEvery is how many bytes of a log's events may wait to be counted:
// MaxBytes / MaxCompletions / 16.
func (l *RedisLog) sizeEvery() int64 {
	return max(1, l.limits.MaxBytes/int64(l.limits.MaxCompletions)/16)
}

// forgetStale drops the writers whose renewal is older than LiveTTL, at
// most once per LiveTTL/16: the logs of completions that neither ended nor
// wrote here since (fenced out, or abandoned) lapse in Redis by then.
func (l *RedisLog) forgetStale(now int64) {
	ttl := l.LiveTTL.Milliseconds()
	if last := l.pruned.Load(); now-last < ttl/16 || !l.pruned.CompareAndSwap(last, now) {
		return
	}
	l.writing.Range(func(id, lw any) bool {
		if now-lw.(*logWriter).renewed.Load() >= ttl {
			l.writing.Delete(id)
		}
		return true
	})
}

// flush is one flush of the group commit (committer): lua/commit.lua on
// writes, within OpTimeout.
func (l *RedisLog) flush(writes []commitWrite) (replies, evicted []string, err error) {
	ctx, cancel := l.ctx()
	defer cancel()
	return l.commitWrites(ctx, writes)
}

// evict drops the logs a flush's bound evicted. A failure leaves them in
// the ended set, where the next flush over the bound finds them again.
func (l *RedisLog) evict(ids []string) {
	ctx, cancel := l.ctx()
	defer cancel()
	_ = l.dropAll(ctx, ids)
}

// fence is the lease value the writes of id need (Fence), or "".
func (l *RedisLog) fence(id string) string {
	v, _ := l.fences.Load(id)
	s, _ := v.(string)
	return s
}

// fenced is the reply of a script that may be fenced by a lease: its
// strings, {"fenced"} when the lease refused the write (the error FENCED),
// or the error of a Redis that did not answer.
func fenced(cmd *redis.Cmd) ([]string, error) {
	v, err := cmd.Result()
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "FENCED"):
		return []string{"fenced"}, nil
	case err != nil:
		return []string{""}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if s, ok := v.(string); ok {
		return []string{s}, nil
	}
	res, err := cmd.StringSlice()
	if err != nil || len(res) == 0 {
		return []string{""}, fmt.Errorf("%w: a script answered %v", ErrUnavailable, v)
	}
	return res, nil
}

// countFenced counts a write that Redis refused because another replica
// holds the completion's lease.
func (l *RedisLog) countFenced(res []string, err error) {
	if err == nil && res[0] == "fenced" {
		l.refused()
	}
}

// refused counts a write that Redis refused because another replica holds
// the completion's lease.
func (l *RedisLog) refused() { l.m.fenced.Add(context.Background(), 1) }

// Read implements Log: the meta, the page and the first and last
// entries kept are read in one MULTI, so that they agree.
func (l *RedisLog) Read(id string, after uint64) (Page, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	var meta *redis.SliceCmd
	var page, first, last *redis.XMessageSliceCmd
	var mark *redis.StatusCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// Marked followed before the reads, in one transaction: an append
		// the reads miss publishes its notice, once its writer knows
		// (announce).
		mark = p.SetArgs(ctx, l.ks.followed(id), 1, redis.SetArgs{TTL: redisFollowedFor, Get: true})
		meta = p.HMGet(ctx, l.ks.meta(id), "m", "ended", "status")
		page = p.XRangeN(ctx, l.ks.log(id), "0-"+strconv.FormatUint(after+1, 10), "+", logPageSize+1)
		first = p.XRangeN(ctx, l.ks.log(id), "-", "+", 1)
		last = p.XRevRangeN(ctx, l.ks.log(id), "+", "-", 1)
		return nil
	})
	if err != nil { // the first error, which is the mark's Nil when it is new
		err = firstFailure(mark, meta, page, first, last)
	}
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	f := meta.Val()
	m, ok := f[0].(string)
	if !ok {
		return Page{}, ErrNotFound
	}
	var p Page
	if p.Meta, err = decodeLogMeta(m); err != nil {
		return Page{}, err
	}
	if e, ok := f[1].(string); ok {
		ended, _ := strconv.ParseInt(e, 10, 64)
		if l.now().Sub(time.UnixMilli(ended)) >= l.limits.Retention {
			return Page{}, ErrNotFound // expired; the next script drops it
		}
		p.Ended = true
		if s, ok := f[2].(string); ok && s != "" {
			p.Status = []byte(s)
		}
	}
	lo, hi := uint64(1), uint64(0)
	if len(first.Val()) > 0 && len(last.Val()) > 0 {
		lo, hi = entrySeq(first.Val()[0].ID), entrySeq(last.Val()[0].ID)
	}
	if after+1 < lo || after > hi {
		return Page{}, &RangeError{First: lo}
	}
	p.Last = hi
	if errors.Is(mark.Err(), redis.Nil) && !p.Ended { // a new follower of a log still written
		l.announce(ctx, id)
	}
	msgs := page.Val()
	// A notice above hi that came before wait is kept by the registry, so
	// that none is lost between the read and the wait.
	p.More = l.wake.wait(id, hi)
	if len(msgs) > logPageSize {
		msgs, p.More = msgs[:logPageSize], closed
	}
	p.Events = make([]*completionv1.CompletionEvent, len(msgs))
	for i, msg := range msgs {
		s, _ := msg.Values["e"].(string)
		p.Events[i] = &completionv1.CompletionEvent{}
		if err := proto.Unmarshal([]byte(s), p.Events[i]); err != nil {
			return Page{}, fmt.Errorf("event %s of %s: %w", msg.ID, id, err)
		}
	}
	return p, nil
}

// firstFailure is the first error of cmds, a Nil reply (no value) left
// out.
func firstFailure(cmds ...redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// announce tells the writer of id, whichever replica it is, that the log
// is followed from now on, so that it publishes a notice of each event it
// appends (logWriter.followed) without looking the mark up at every event.
// The events it appends before it hears this are noticed with its next
// one (an end is always: the writer checks the mark then), or by the
// wake of every follower each redisWakeAll.
func (l *RedisLog) announce(ctx context.Context, id string) {
	_ = l.rdb.Publish(ctx, redisLogChanged, redisFollowedNotice+id).Err()
}

// redisFollowedNotice starts the line of redisLogChanged that announces a
// log followed (announce).
const redisFollowedNotice = "+"

// reshare publishes again to Redis the log of id that this replica kept
// in its memory alone for a while (Redis did not answer, or lost it),
// from c, its copy: Redis gets the events it lacks, after the last it
// kept (those it kept are the same events: the writer is the same, and
// the fence below refuses it when another replica wrote since), and the
// End. A fenced id is refused (errLogFenced) once another replica was
// granted its lease; its lease is taken again if it lapsed. The appends
// go redisReshareBatch per call of lua/commit.lua.
func (l *RedisLog) reshare(id string, c logCopy) error {
	return l.reshareFenced(id, c, l.fence(id))
}

// reshareFenced is reshare with the writer's lease value given (empty:
// not fenced), for a completion whose run is over (its fence is gone).
func (l *RedisLog) reshareFenced(id string, c logCopy, fence string) error {
	if testHookReshare != nil {
		testHookReshare(id)
	}
	meta := c.meta
	if c.ended {
		meta.Request = nil // an ended completion is never taken over
	}
	var token any = ""
	if lease, ok := parseLease(id, fence); ok {
		token = lease.Token
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.OpTimeout+time.Duration(len(c.events)/redisReshareBatch+1)*l.OpTimeout)
	defer cancel()
	res, err := l.ks.scripts.reshare.Run(ctx, l.rdb, id, fence, token, l.leaseTTL().Milliseconds(), leaseTokenTTL.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var kept uint64
	switch {
	case res == "fenced":
		l.refused()
		return errLogFenced
	case res == "missing":
		// The lease is the writer's now (or the log is not fenced): the
		// log opened here is this writer's to fill.
		if err := l.open(id, meta); err != nil {
			return err
		}
	case res == "ended":
		return nil
	default:
		kept, _ = strconv.ParseUint(strings.TrimPrefix(res, "ok "), 10, 64)
	}
	if err := l.appendAll(ctx, id, c, kept, fence); err != nil {
		return err
	}
	return l.publishCheckpoint(id, c, fence)
}

// restoreEnded puts back in Redis, whole and ended, the log of id that
// ended here (c, this replica's copy, with the end's time) and that Redis
// no longer holds at all, fenced by fence, its last lease value (empty:
// none), in one call of lua/restore.lua: in its place among the ended
// logs, for what is left of its retention, the older ended logs evicted
// for it when the bounds are full. It answers what the script did:
// restoreDone; or nothing, and why: restoreExpired and restoreEvicted, a
// log whose time has passed or that the bounds would evict first (as
// they may have: a log dropped stays dropped), restoreThere for a log
// Redis holds (reshareFenced's), errLogFenced for one another replica
// took over.
func (l *RedisLog) restoreEnded(id string, c logCopy, fence string) (string, error) {
	meta := c.meta
	meta.Request = nil // an ended completion is never taken over
	m, err := encodeLogMeta(meta)
	if err != nil {
		return "", err
	}
	var token any = ""
	if lease, ok := parseLease(id, fence); ok {
		token = lease.Token
	}
	events, seqs := c.events, c.seqs
	if n := l.limits.MaxEvents; n > 0 && len(events) > n {
		events, seqs = events[len(events)-n:], seqs[len(seqs)-n:]
	}
	args := make([]any, 0, 11+2*len(events))
	args = append(args, id, m, c.status, ms(c.endedAt), ms(l.now()), l.limits.Retention.Milliseconds(),
		l.ks.share(int64(l.limits.MaxCompletions)), l.ks.share(l.limits.MaxBytes), fence, token, restoreScan)
	for i, ev := range events {
		args = append(args, seqs[i], ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.OpTimeout+time.Duration(len(events)/redisReshareBatch)*l.OpTimeout)
	defer cancel()
	res, err := l.ks.scripts.restore.Run(ctx, l.rdb, id, args...).StringSlice()
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	case res[0] == "fenced":
		l.refused()
		return "", errLogFenced
	case res[0] != restoreDone:
		return res[0], nil
	}
	return restoreDone, l.dropAll(ctx, res[1:])
}

// What restoreEnded did (lua/restore.lua's answers).
const (
	restoreDone    = "restored"
	restoreThere   = "there"
	restoreExpired = "expired"
	restoreEvicted = "evicted"
)

// restoreScan is how many of the oldest ended logs a restore looks at to
// make room (lua/restore.lua): past them, the log is not restored.
const restoreScan = 100

// redisReshareBatch is how many appends of a reshare go in one call.
const redisReshareBatch = 128

// appendAll appends the events of c after seq kept (reshareWrites),
// redisReshareBatch writes per call of lua/commit.lua.
func (l *RedisLog) appendAll(ctx context.Context, id string, c logCopy, kept uint64, fence string) error {
	writes := reshareWrites(id, c, kept, fence)
	for len(writes) > 0 {
		n := min(len(writes), redisReshareBatch)
		replies, evicted, err := l.commitWrites(ctx, writes[:n])
		if err != nil {
			return err
		}
		writes = writes[n:]
		for _, res := range replies {
			switch res {
			case "fenced":
				l.refused()
				return errLogFenced
			case "missing", "ended", "gap":
				return fmt.Errorf("%w: the log went while it was published again (%s)", ErrUnavailable, res)
			case commitTryAgain:
				return fmt.Errorf("%w: %s's shard", errSlotMoving, id)
			}
		}
		if err := l.dropAll(ctx, evicted); err != nil {
			return err
		}
	}
	return nil
}

// reshareWrites are the writes that publish the events of c after seq
// kept again, fenced by fence: one per event, the first renewing the log,
// each checking that it follows the last. An ended log's end is one write
// with the EndWith events before it, as RedisLog.End writes them: its
// terminal transition goes with its result, whatever the calls the writes
// are split into.
func reshareWrites(id string, c logCopy, kept uint64, fence string) []commitWrite {
	from := 0
	for from < len(c.seqs) && c.seqs[from] <= kept {
		from++
	}
	last := len(c.seqs) - 1
	tail := len(c.seqs) // the first event the end carries
	if c.ended && from <= last {
		tail = max(from, last-EndWith)
	}
	var writes []commitWrite
	for i := from; i < tail; i++ {
		w := commitWrite{id: id, seq: c.seqs[i], event: c.events[i], fence: fence, renew: len(writes) == 0, check: true}
		w.size = int64(len(w.event)) // each counted: a reshare is rare
		writes = append(writes, w)
	}
	if tail <= last {
		w := commitWrite{id: id, seq: c.seqs[last], event: c.events[last], status: c.status, end: true, fence: fence, renew: len(writes) == 0, check: true}
		for _, b := range c.events[tail:last] {
			w.addBefore(b)
		}
		w.size = w.beforeSize + int64(len(w.event)+len(w.status))
		writes = append(writes, w)
	}
	return writes
}

// leaseTTL is LeaseTTL, or DefaultLeaseTTL when unset.
func (l *RedisLog) leaseTTL() time.Duration {
	if l.LeaseTTL > 0 {
		return l.LeaseTTL
	}
	return config.DefaultLeaseTTL
}

// entrySeq is the seq of stream entry 0-N.
func entrySeq(entry string) uint64 {
	_, n, _ := strings.Cut(entry, "-")
	seq, _ := strconv.ParseUint(n, 10, 64)
	return seq
}

// dropAll removes the logs of ids from Redis, in one call of lua/drop.lua
// per dropMaxLogs (and per shard, on a Cluster): the logs that a script's
// bound evicted, or whose time passed.
func (l *RedisLog) dropAll(ctx context.Context, ids []string) error {
	for _, shard := range l.ks.byShard(len(ids), func(i int) string { return ids[i] }) {
		for chunk := range slices.Chunk(shard, dropMaxLogs) {
			groups := make([]redisscript.Group, len(chunk))
			for i, at := range chunk {
				groups[i] = redisscript.Group{Subject: ids[at], Args: []any{"", ids[at]}}
			}
			if err := l.ks.scripts.drop.RunGroups(ctx, l.rdb, []any{redisLogChanged}, groups).Err(); err != nil {
				return fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
		}
	}
	return nil
}

// dropMaxLogs is the most logs one call of lua/drop.lua drops, so that
// no call keeps the single-threaded Redis from its other clients for long.
const dropMaxLogs = 100

// dropUnlessFenced removes the log of id from Redis, unless id is fenced
// and another replica holds its lease.
func (l *RedisLog) dropUnlessFenced(id string) error {
	ctx, cancel := l.ctx()
	defer cancel()
	return l.ks.scripts.drop.RunGroups(ctx, l.rdb, []any{redisLogChanged}, []redisscript.Group{{Subject: id, Args: []any{l.fence(id), id}}}).Err()
}

// Expire implements Log: it drops what the bounds of the time now no
// longer keep (every replica does so every redisWakeAll as well).
func (l *RedisLog) Expire(now time.Time) { _ = l.expire(now) }

// expire drops the logs that ended Retention before now and the live logs
// that lapsed, 200 at most (of each shard, on a Cluster: one call each).
func (l *RedisLog) expire(now time.Time) error {
	ctx, cancel := l.ctx()
	defer cancel()
	for _, subject := range l.ks.subjects {
		ids, err := l.ks.scripts.expired.Run(ctx, l.rdb, subject, ms(now), l.limits.Retention.Milliseconds()).StringSlice()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if err := l.dropAll(ctx, ids); err != nil {
			return err
		}
	}
	return nil
}

// encodeLogMeta is the blob a shared log keeps of a Meta: its JSON, so
// that a field added to Meta travels without a change here. A field
// that encoding/json cannot read back (a proto message with a oneof)
// needs a type with MarshalJSON and UnmarshalJSON (protojson).
func encodeLogMeta(m Meta) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode log meta: %w", err)
	}
	return string(b), nil
}

func decodeLogMeta(s string) (Meta, error) {
	var m Meta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return m, fmt.Errorf("decode log meta: %w", err)
	}
	return m, nil
}

// wakeRegistry hands out, per log id, the channel that the next change of
// that log closes. A change carries its version, the seq it appended (or
// the largest one for a log dropped): a notice can arrive after a Read that
// already saw its change, and only wakes the waiters that read less.
type wakeRegistry struct {
	mu      sync.Mutex
	waiters map[string]map[uint64]chan struct{} // id → version read → channel
	latest  map[string]noticed                  // the last notice of each id
}

type noticed struct {
	version uint64
	at      time.Time
}

func newWakeRegistry() *wakeRegistry {
	return &wakeRegistry{waiters: map[string]map[uint64]chan struct{}{}, latest: map[string]noticed{}}
}

// wait returns the channel closed at the first notice of id above version:
// closed already when one came.
func (w *wakeRegistry) wait(id string, version uint64) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.latest[id]; ok && n.version > version {
		return closed
	}
	byVersion := w.waiters[id]
	if byVersion == nil {
		byVersion = map[uint64]chan struct{}{}
		w.waiters[id] = byVersion
	}
	c, ok := byVersion[version]
	if !ok {
		c = make(chan struct{})
		byVersion[version] = c
	}
	return c
}

// notice closes the channels of id that wait for a version below version.
func (w *wakeRegistry) notice(id string, version uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.latest[id]; version > n.version {
		w.latest[id] = noticed{version: version, at: time.Now()}
	}
	for v, c := range w.waiters[id] {
		if v < version {
			close(c)
			delete(w.waiters[id], v)
		}
	}
	if len(w.waiters[id]) == 0 {
		delete(w.waiters, id)
	}
}

// all closes every channel, and forgets the notices older than keep: the
// registry holds no more than the ids read or noticed since.
func (w *wakeRegistry) all(keep time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, byVersion := range w.waiters {
		for _, c := range byVersion {
			close(c)
		}
		delete(w.waiters, id)
	}
	for id, n := range w.latest {
		if time.Since(n.at) > keep {
			delete(w.latest, id)
		}
	}
}

// parseNotice reads the payload of a change notice: "id seq" for an
// append, "id" for a log dropped (every version is below it).
func parseNotice(payload string) (string, uint64) {
	i := strings.LastIndexByte(payload, ' ')
	if i < 0 {
		return payload, math.MaxUint64
	}
	v, err := strconv.ParseUint(payload[i+1:], 10, 64)
	if err != nil {
		return payload, math.MaxUint64
	}
	return payload[:i], v
}
