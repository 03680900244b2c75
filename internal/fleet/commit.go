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

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redisscript"
)

// The bounds of one call of lua/commit.lua: a flush that holds more is
// several calls, pipelined in one round trip, so that no call keeps the
// single-threaded Redis from its other clients for long.
const (
	commitMaxEvents = 256
	commitMaxBytes  = 1 << 20
)

// commitFlights is the most flushes in flight at once (committer).
const commitFlights = 2

// errCommitClosed: the RedisLog was closed before the write.
var errCommitClosed = errors.New("event log closed")

// committer is the group commit of a RedisLog: the appends of every
// completion of this replica wait together for one flush, one call of
// lua/commit.lua (one per commitMaxEvents or commitMaxBytes, in one
// pipeline), and each returns once Redis acknowledged its flush, so that
// an event is in Redis before its caller sees it and fenced per
// completion, at the cost of one Redis command per flush rather than per
// event.
//
// The appends that arrive while a flush is in flight make the next one,
// so that a batch grows with the load by itself. When the last flush
// carried more than one append (other completions are writing), the next
// one also waits up to wait after its first append arrived, or until it is
// full, to carry more. When the last flush carried one (a replica that is
// idle, or runs one completion), the next starts at once. An urgent write
// (an event a caller waits on: a completion's first output, a stop-hook
// request, the end) waits for more no longer than urgentWait, however long
// wait is: its batch's time to go (commitBatch.left) is the earlier of the
// two.
//
// The next flush starts as soon as none is in flight, or beside the one in
// flight (commitFlights at most) once its time to go has come or it is
// full: so a flush that Redis takes long to answer (a large batch, a busy
// Redis) does not hold the next one, and while the replica works on one
// flush's answers Redis runs the next. An append thus waits at most wait
// (an urgent one urgentWait) for its flush to start, unless commitFlights
// are in flight. Two flushes in flight never write the same log (the next
// waits for the one that does): a log's events are appended in order.
//
// An append that finds the committer idle — no flush in flight, none
// pending, and the last flush of one append — is flushed by its writer
// itself, on its own goroutine (committer.alone): the flush would start
// at once anyway, and this spares it two hand-offs between goroutines
// (to run, then to a flusher) and the wake-up back, which at a calm pace
// (one or two events per flush) are much of what an event costs a replica
// and its time to the caller.
type committer struct {
	// flush writes a batch; the slice is the committer's again once
	// flush returns (its next batches reuse it).
	flush  func([]commitWrite) (replies, evicted []string, err error)
	evict  func(ids []string)
	wait   func() time.Duration
	sizes  func(events int)
	waited func(time.Duration) // each write's time from its append to its reply

	mu     sync.Mutex
	next   *commitBatch
	closed bool
	// flights is the flushes in flight, and writing the logs they write
	// (how many of them write each).
	flights int
	writing map[string]int
	// spare are the writes slices of landed flushes, emptied, for the
	// next batches: a batch's slice is allocated once, not per flush.
	spare [][]commitWrite
	// taken: run took the pending batch and launches it (launch), which
	// may wait for a flush of the same logs to land first; no writer
	// flushes alone meanwhile, ahead of the batch's writes.
	taken bool
	// last is the number of writes of the last flush launched: after one
	// of more than one, the next waits for more (linger), and no writer
	// flushes alone.
	last int

	// work hands a batch to the flushers: commitFlights goroutines that
	// live as long as the committer, so that each flush runs on a stack
	// already grown to the Redis client's depth (a goroutine per flush
	// grew and copied its stack every time: a twentieth of a busy
	// replica's CPU).
	work chan *commitBatch
	// evictions hands the logs a flush's bound evicted to the evictor, a
	// goroutine beside the flushers, so that neither a flusher nor a
	// writer that flushed alone waits for their drop.
	evictions chan []string
	flushers  sync.WaitGroup // the flushers and the evictor

	kick   chan struct{} // a batch got its first write
	due    chan struct{} // the batch's time to go came earlier: full (commitMaxEvents), or an urgent write
	landed chan struct{} // a flush in flight landed
	stop   chan struct{}
	done   chan struct{}
}

// commitWrite is one event to append (and with end, the log to end with
// status), fenced by the lease value fence unless it is empty; or, without
// an event, a request joining its log (meta, fenced by fence: see
// RedisLog.joinRequest).
type commitWrite struct {
	id  string
	seq uint64
	// before, when not empty, are the events numbered just before event,
	// which the write appends ahead of it, all of them or none: a log's
	// end (RedisLog.End) with its terminal transition. Each is its length
	// in decimal, a colon and its encoding (addBefore); beforeN is how
	// many they are (EndWith at most), beforeSize their encodings' bytes,
	// what the log's size counts of them.
	before     []byte
	beforeN    int
	beforeSize int64
	event      []byte
	status     []byte
	fence      string
	// meta, when not empty, replaces the log's meta once the write passed
	// its fence (RedisLog.openLeased: the request joins the log then).
	meta string
	// size is what the write adds to the log's size and to the bound of
	// bytes, once it is in: the bytes of this event and of the writer's
	// earlier ones not counted yet, or 0 (RedisLog.sizeOf).
	size int64
	// args are id's keys and id as lua/commit.lua's arguments, kept by
	// its writer (logWriter) so that its events do not build them each
	// time; when nil (a reshare's writes), commitCall builds them.
	args *commitArgs
	end  bool
	// renew: the log must be there and not ended, and is renewed
	// (RedisLog.renewal); otherwise the event goes only to a log that
	// exists.
	renew bool
	// check: the log's last entry must be seq-1 (lua/commit.lua answers
	// gap otherwise), as at a renewal: Redis may have lost writes since
	// the writer's last (RedisLog.suspect).
	check bool
	// notify publishes the event's notice to the log's followers; without
	// it, only a renewal or an end looks for followers itself (and answers
	// commitOKFollowed when it finds some).
	notify bool
	// urgent: the write's flush waits for more no longer than urgentWait
	// (committer): an event a caller waits on — the first output of an
	// attempt and turn (its time to first token), a stop-hook request
	// (the completion waits for its answer), the end (a Complete call's
	// answer).
	urgent bool
}

// commitArgs are what every write of one log passes lua/commit.lua the
// same: the log's keys (META LOG LEASE FOLLOWED) and its id, each already
// a command argument.
type commitArgs struct {
	keys []any
	id   any
}

// newCommitArgs are the arguments of id's writes in the keyspace ks.
func newCommitArgs(ks *keyspace, id string) *commitArgs {
	return &commitArgs{keys: ks.scripts.commit.GroupKeys(id), id: id}
}

// commitOKFollowed is lua/commit.lua's reply to a write that renewed or
// ended a log a replica follows: ok, and the writer notifies its next
// events (logWriter.followed).
const commitOKFollowed = "okf"

// commitFlags reads lua/commit.lua's reply to a write: "ok" followed by
// "r" when the write ended the log and gave the writer's lease up, and by
// "f" when the log is followed (commitOKFollowed), as "ok" and those two
// flags; any other reply as it is.
func commitFlags(res string) (plain string, followed, released bool) {
	rest, ok := strings.CutPrefix(res, "ok")
	if !ok {
		return res, false, false
	}
	return "ok", strings.Contains(rest, "f"), strings.Contains(rest, "r")
}

// commitBatch is the writes of one flush, and once done is closed, its
// replies (one per write, as lua/commit.lua answers) or its error: with
// replies, the error of the writes whose reply is empty (a call of the
// flush that failed, on a Cluster's node).
type commitBatch struct {
	writes []commitWrite
	first  time.Time
	// urgent is when its first urgent write came (commitWrite.urgent),
	// zero without one.
	urgent  time.Time
	done    chan struct{}
	replies []string
	err     error
}

// newCommitter starts the group commit of writes through flush, which
// answers one reply per write (empty for a write whose call failed, with
// the error) and the ids of the logs the writes' bound evicts, which go
// to evict once the writers are released; wait is the longest a flush
// waits for more writes under load; sizes sees the number of writes of
// each flush, and waited the time each write waited for its reply.
func newCommitter(flush func([]commitWrite) ([]string, []string, error), evict func([]string), wait func() time.Duration, sizes func(int), waited func(time.Duration)) *committer {
	c := &committer{flush: flush, evict: evict, wait: wait, sizes: sizes, waited: waited, next: newCommitBatch(), writing: map[string]int{},
		work: make(chan *commitBatch, commitFlights), evictions: make(chan []string, commitEvictionsQueued),
		kick: make(chan struct{}, 1), due: make(chan struct{}, 1), landed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for range commitFlights {
		c.flushers.Go(func() {
			for b := range c.work {
				c.commit(b)
			}
		})
	}
	c.flushers.Go(func() {
		for ids := range c.evictions {
			c.evict(ids)
		}
	})
	go c.run()
	return c
}

func newCommitBatch() *commitBatch { return &commitBatch{done: make(chan struct{})} }

// commitEvictionsQueued is how many flushes' evicted logs wait for the
// evictor before a flush waits to hand it more: evictions are rare (an
// open or an end past the bound), and each is one round trip.
const commitEvictionsQueued = 64

// urgentWait is the longest an urgent write waits for more writes, however
// long the committer's wait: the default commit delay, so that a longer
// one trades the other events' time to their callers, not the time to
// first token. (Not zero: a busy replica's first tokens and ends would
// then cut its batches short: a fifth to a third more flushes at 50-event
// answers.)
const urgentWait = config.DefaultRedisCommitDelay

// left is how long b may still wait for more writes: until wait after its
// first write, or urgentWait after its first urgent one, whichever comes
// first; 0 once it is full.
func (b *commitBatch) left(wait time.Duration) time.Duration {
	if len(b.writes) >= commitMaxEvents {
		return 0
	}
	d := wait - time.Since(b.first)
	if !b.urgent.IsZero() {
		d = min(d, urgentWait-time.Since(b.urgent))
	}
	return d
}

// write appends w with the next flush and waits for it: the reply of
// lua/commit.lua for w, or the error of a flush that failed (Redis did not
// answer: whether w was written is unknown).
func (c *committer) write(w commitWrite) (string, error) {
	start := time.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return "", fmt.Errorf("%w: %w", ErrUnavailable, errCommitClosed)
	}
	if b := c.alone(w); b != nil {
		c.mu.Unlock()
		c.commit(b)
		return c.answer(b, 0, start)
	}
	b := c.next
	i := len(b.writes)
	b.writes = append(b.writes, w)
	if i == 0 {
		b.first = time.Now()
		signal(c.kick)
	}
	if w.urgent && b.urgent.IsZero() {
		b.urgent = time.Now()
		signal(c.due)
	}
	if len(b.writes) >= commitMaxEvents {
		signal(c.due)
	}
	c.mu.Unlock()
	<-b.done
	return c.answer(b, i, start)
}

// answer is the reply of the i-th write of b, whose flush landed, or its
// error; the write waited since start.
func (c *committer) answer(b *commitBatch, i int, start time.Time) (string, error) {
	c.waited(time.Since(start))
	if b.err != nil && (i >= len(b.replies) || b.replies[i] == "") {
		return "", b.err
	}
	return b.replies[i], nil
}

// alone is a batch of w alone, counted in flight, for its writer to
// flush itself (commit) when the committer is idle: no flush in flight
// or pending, and the last one carried one write. Otherwise nil, and w
// goes with the next batch. Called with mu held.
func (c *committer) alone(w commitWrite) *commitBatch {
	if c.flights > 0 || c.taken || len(c.next.writes) > 0 || c.last > 1 {
		return nil
	}
	b := newCommitBatch()
	if n := len(c.spare); n > 0 {
		b.writes, c.spare = c.spare[n-1], c.spare[:n-1]
	}
	b.writes = append(b.writes, w)
	c.flights++
	c.writing[w.id]++
	c.last = 1
	return b
}

// signal wakes the reader of ch, unless a wake is pending already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// close flushes what is pending, waits for the flushes in flight, and
// fails the writes that come after.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
}

// run starts one flush after another, commitFlights at most in flight.
func (c *committer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.kick:
		case <-c.stop:
			if b := c.take(); b != nil {
				c.launch(b)
			}
			// Every flush landed, and handed its evictions over first.
			c.await(func() bool { return c.flights == 0 })
			close(c.work)
			close(c.evictions)
			c.flushers.Wait()
			return
		}
		c.mu.Lock()
		last := c.last
		c.mu.Unlock()
		if last > 1 {
			c.linger()
		}
		c.awaitFlight()
		if b := c.take(); b != nil {
			c.launch(b)
		}
	}
}

// awaitFlight waits until the pending batch may start: no flush is in
// flight, or fewer than commitFlights are and the batch's time to go has
// come (commitBatch.left); or the committer closes.
func (c *committer) awaitFlight() {
	for {
		c.mu.Lock()
		n, d := c.flights, c.next.left(c.wait())
		c.mu.Unlock()
		switch {
		case n == 0 || n < commitFlights && d <= 0:
			return
		case n >= commitFlights:
			d = time.Hour // only a landing frees a flight
		}
		if c.nap(d, c.landed) {
			return
		}
	}
}

// nap waits d, or until the pending batch's time to go may have come
// earlier (due), a flush lands (on landed; nil: not watched), or the
// committer closes, which it reports.
func (c *committer) nap(d time.Duration, landed <-chan struct{}) (closed bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-landed:
	case <-t.C:
	case <-c.due:
	case <-c.stop:
		return true
	}
	return false
}

// await waits until cond, read under mu, holds: each flush that lands
// checks it again.
func (c *committer) await(cond func() bool) {
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		<-c.landed
	}
}

// launch flushes b beside the flushes in flight, once none of them writes
// a log b writes.
func (c *committer) launch(b *commitBatch) {
	c.await(func() bool {
		for _, w := range b.writes {
			if c.writing[w.id] > 0 {
				return false
			}
		}
		return true
	})
	c.mu.Lock()
	c.flights++
	for _, w := range b.writes {
		c.writing[w.id]++
	}
	c.last = len(b.writes)
	c.taken = false
	c.mu.Unlock()
	c.work <- b // never blocks: fewer flushes are in flight (commitFlights, one more at close) than the flushers and work hold
}

// land counts b's flush out of the flights, and wakes run.
func (c *committer) land(b *commitBatch) {
	c.mu.Lock()
	c.flights--
	for _, w := range b.writes {
		if c.writing[w.id]--; c.writing[w.id] == 0 {
			delete(c.writing, w.id)
		}
	}
	c.mu.Unlock()
	signal(c.landed)
}

// linger waits until the pending batch's time to go (commitBatch.left),
// which an urgent write or a full batch brings forward, or the committer
// closes.
func (c *committer) linger() {
	for {
		c.mu.Lock()
		d := c.next.left(c.wait())
		c.mu.Unlock()
		if d <= 0 || c.nap(d, nil) {
			return
		}
	}
}

// take is the pending batch, replaced by an empty one, and taken until
// launch counts it in flight (nil when it has no write).
func (c *committer) take() *commitBatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.next
	if len(b.writes) == 0 {
		return nil
	}
	c.taken = true
	c.next = newCommitBatch()
	if n := len(c.spare); n > 0 {
		c.next.writes, c.spare = c.spare[n-1], c.spare[:n-1]
	}
	select {
	case <-c.due: // the batch taken's
	default:
	}
	return b
}

// commit flushes b, hands the logs its bound evicted to the evictor
// (their writers need not wait for their drop), lands and releases its
// writers.
func (c *committer) commit(b *commitBatch) {
	c.sizes(len(b.writes))
	var evicted []string
	b.replies, evicted, b.err = c.flush(b.writes)
	if len(b.replies) != len(b.writes) && (b.err == nil || b.replies != nil) {
		b.err, b.replies = fmt.Errorf("%w: %d replies to %d appends", ErrUnavailable, len(b.replies), len(b.writes)), nil
	}
	if len(evicted) > 0 {
		c.evictions <- evicted // before landing: close drains what landed
	}
	c.land(b)
	close(b.done)
	c.reuse(b.writes)
}

// reuse keeps the writes slice of a flush that landed for a next batch,
// emptied (its events are not held), unless as many as can be in flight
// and pending wait already.
func (c *committer) reuse(writes []commitWrite) {
	clear(writes)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.spare) <= commitFlights {
		c.spare = append(c.spare, writes[:0])
	}
}

// commitCall is the call of lua/commit.lua that appends writes, which
// are of one shard of ks (every write on one Redis), with args, the
// arguments declared once.
func commitCall(ks *keyspace, args []any, writes []commitWrite) *redisscript.Batch {
	b := ks.scripts.commit.Batch(ks.commitFixed[ks.shard(writes[0].id)], len(writes), args...)
	for _, w := range writes {
		a := w.args
		if a == nil {
			a = newCommitArgs(ks, w.id)
		}
		b.Add(a.keys, w.fence, a.id, w.seq, w.event, w.status, flag(w.end), flag(w.renew), w.meta, w.size, flag(w.notify), flag(w.check), w.before)
	}
	return b
}

// The two values of a flag, each already a command argument.
var flagSet, flagUnset any = "1", "0"

// flag is a boolean argument of a script: "1" or "0".
func flag(b bool) any {
	if b {
		return flagSet
	}
	return flagUnset
}

// addBefore adds the encoded event b to the events w appends ahead of
// its own (before): its length in decimal, a colon, and b.
func (w *commitWrite) addBefore(b []byte) {
	w.before = strconv.AppendInt(w.before, int64(len(b)), 10)
	w.before = append(w.before, ':')
	w.before = append(w.before, b...)
	w.beforeN++
	w.beforeSize += int64(len(b))
}

// commitChunks splits writes into the calls of one flush: commitMaxEvents
// events (an end's write counts the events before it too) and
// commitMaxBytes each at most, one write at least, never split.
func commitChunks(writes []commitWrite) [][]commitWrite {
	var chunks [][]commitWrite
	start, events, bytes := 0, 0, 0
	for i, w := range writes {
		e, n := 1+w.beforeN, len(w.before)+len(w.event)+len(w.status)+len(w.meta)
		if i > start && (events+e > commitMaxEvents || bytes+n > commitMaxBytes) {
			chunks = append(chunks, writes[start:i])
			start, events, bytes = i, 0, 0
		}
		events, bytes = events+e, bytes+n
	}
	return append(chunks, writes[start:])
}

// commitShards splits writes by shard (keyspace): on one Redis, writes
// as they are; on a Cluster, the writes of each shard, in order, and
// where each was in writes.
func commitShards(ks *keyspace, writes []commitWrite) (shards [][]commitWrite, at [][]int) {
	if ks.shards == 0 {
		return [][]commitWrite{writes}, nil
	}
	at = ks.byShard(len(writes), func(i int) string { return writes[i].id })
	shards = make([][]commitWrite, len(at))
	for i, idx := range at {
		for _, j := range idx {
			shards[i] = append(shards[i], writes[j])
		}
	}
	return shards, at
}

// commitWrites runs lua/commit.lua on writes, in as many calls as
// commitChunks makes of each shard's writes (one shard on one Redis),
// pipelined in one round trip (one per node of a Cluster), and answers
// one reply per write, in the order of writes, and the ids of the ended
// logs their bound evicts. When some calls failed (a node that did not
// answer), err says why and their writes' replies are empty: the others
// are answered. A call refused because its slot is moving did not run
// (refusedMoving): its writes' replies are commitTryAgain.
func (l *RedisLog) commitWrites(ctx context.Context, writes []commitWrite) (replies, evicted []string, err error) {
	shards, at := commitShards(l.ks, writes)
	var chunks [][]commitWrite
	for _, sh := range shards {
		chunks = append(chunks, commitChunks(sh)...)
	}
	cmds := l.commitCalls(ctx, chunks)
	// A call that failed fails its writes (no reply: whether they were
	// written is unknown); on a Cluster, the other nodes' calls answer
	// theirs.
	var failed error
	for i, cmd := range cmds {
		err := cmd.Err()
		switch {
		case refusedMoving(err):
			replies = append(replies, tryAgainAll(len(chunks[i]))...)
			continue
		case err != nil:
			l.mayHaveLost()
			failed = fmt.Errorf("%w: %w", ErrUnavailable, err)
			replies = append(replies, make([]string, len(chunks[i]))...)
			continue
		}
		r, e, err := commitReply(cmd)
		if err != nil {
			return nil, nil, err
		}
		replies, evicted = append(replies, r...), append(evicted, e...)
	}
	if at == nil || len(replies) != len(writes) {
		return replies, evicted, failed // the committer refuses a count that differs
	}
	ordered := make([]string, len(writes))
	n := 0
	for _, idx := range at {
		for _, j := range idx {
			ordered[j] = replies[n]
			n++
		}
	}
	return ordered, evicted, failed
}

// commitTryAgain is the reply to a write whose call Redis refused without
// running it because its shard's slot is moving to another node of the
// Cluster (resharding: refusedMoving). The writer writes it again shortly
// (RedisLog.commitWrite).
const commitTryAgain = "tryagain"

// refusedMoving reports whether Redis refused a command, without running
// it, because its slot is moving: TRYAGAIN (the command's keys are some
// on each node), or a MOVED or ASK redirection that the client still had
// when its redirections ran out (the nodes' views of the slot differ for
// a moment at the end of a move).
func refusedMoving(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// tryAgainAll is n replies commitTryAgain.
func tryAgainAll(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = commitTryAgain
	}
	return out
}

// commitCalls runs a call of lua/commit.lua per chunk, pipelined: one
// pipeline on one Redis, one per node of a Cluster (byNode), at once. A
// call that found NOSCRIPT did not run (its Redis restarted, failed over
// to a replica, or flushed its scripts): only those calls run again (on a
// Cluster, the other nodes' calls ran), with the script's source (EVAL,
// which caches it there: loading it on every primary the client knows
// fails while it still knows a dead one), checking that each log follows
// on (commitWrite.check). Each command keeps its own error.
func (l *RedisLog) commitCalls(ctx context.Context, chunks [][]commitWrite) []*redis.Cmd {
	args := []any{ms(l.now()), l.limits.Retention.Milliseconds(), l.limits.MaxEvents, l.ks.share(l.limits.MaxBytes),
		l.LiveTTL.Milliseconds(), redisLogChanged}
	cmds := make([]*redis.Cmd, len(chunks))
	pipeline := func(which []int, eval bool) {
		pipe := l.rdb.Pipeline()
		for _, i := range which {
			call := commitCall(l.ks, args, chunks[i])
			if eval {
				cmds[i] = call.Eval(ctx, pipe)
			} else {
				cmds[i] = call.EvalSha(ctx, pipe)
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	run := func(which []int, eval bool) {
		nodes := l.byNode(ctx, which, chunks)
		if len(nodes) == 1 {
			pipeline(nodes[0], eval)
			return
		}
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() { pipeline(n, eval) })
		}
		wg.Wait()
	}
	run(indexes(len(chunks)), false)
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	// A Redis without the script restarted (or failed over): it may have
	// lost writes, so the calls run again check that each log follows on;
	// and the ends it lost are looked for at once (PairLog).
	l.mayHaveLost()
	if l.scriptsGone != nil {
		l.scriptsGone()
	}
	for _, i := range again {
		for j := range chunks[i] {
			chunks[i][j].check = true
		}
	}
	run(again, true)
	return cmds
}

// byNode splits the chunks at which by the Cluster node that holds their
// shard, as the client last saw the slots (one group on one Redis), so
// that each node's calls are a pipeline of their own: go-redis's cluster
// pipeline retries a node that does not answer until the context ends,
// then fails every command of the pipeline, those other nodes answered
// included.
func (l *RedisLog) byNode(ctx context.Context, which []int, chunks [][]commitWrite) [][]int {
	cc := clusterClient(l.rdb)
	if cc == nil {
		return [][]int{which}
	}
	return groupBy(which, func(i int) string {
		if node, err := cc.MasterForKey(ctx, l.ks.log(chunks[i][0].id)); err == nil {
			return node.Options().Addr
		}
		return "" // unknown: a group of its own, the client finds it
	})
}

// indexes are 0, 1, …, n-1.
func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// commitReply reads the answer of one call of lua/commit.lua: {replies,
// evicted}.
func commitReply(cmd *redis.Cmd) (replies, evicted []string, err error) {
	v, _ := cmd.Val().([]any)
	if len(v) != 2 {
		return nil, nil, fmt.Errorf("%w: lua/commit.lua answered %v", ErrUnavailable, cmd.Val())
	}
	return replyStrings(v[0]), replyStrings(v[1]), nil
}

// replyStrings are the strings of a Redis array reply.
func replyStrings(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
