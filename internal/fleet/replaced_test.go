package fleet

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// TestHealthNewServer: a PING that finds a shard served by another Redis
// process (run_id) than the PINGs before is a new server — not the first
// PING's, not a shard found for the first time (its node did not answer
// before), not a process that did not tell its run_id; a shard the PING
// did not reach keeps its process.
func TestHealthNewServer(t *testing.T) {
	w := &Health{}
	for _, s := range []struct {
		name  string
		found map[int]string
		isNew bool
	}{
		{"the first PING, shard 1's node not answering", map[int]string{0: "a"}, false},
		{"shard 1's node answers", map[int]string{0: "a", 1: "b"}, false},
		{"the same", map[int]string{1: "b", 0: "a"}, false},
		{"b restarted", map[int]string{0: "a", 1: "b2"}, true},
		{"b2 down", map[int]string{0: "a"}, false},
		{"b2 back", map[int]string{0: "a", 1: "b2"}, false},
		{"b2 did not say", map[int]string{0: "a", 1: ""}, false},
		{"none reached", nil, false},
		{"c promoted in b2's place", map[int]string{0: "a", 1: "c"}, true},
		{"shard 1 moved to a", map[int]string{0: "a", 1: "a"}, true},
	} {
		if got := w.newServer(s.found); got != s.isNew {
			t.Errorf("%s: new %t, want %t", s.name, got, s.isNew)
		}
	}
}

// TestHealthSeesARestartedRedis: Health's watchers of WatchReplaced hear
// of a Redis restarted (a new run_id answers), once, and not of the same
// Redis answering again; Kick makes the next PING at once.
func TestHealthSeesARestartedRedis(t *testing.T) {
	s := redistest.New(t)
	rdb := testkit.ServerRedisClient(t, s.Addr)
	h := NewHealth(rdb, time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	var replaced, failing atomic.Int32
	h.WatchReplaced(func() bool { replaced.Add(1); return true })
	h.WatchReplaced(func() bool { return failing.Add(1) > 1 }) // Redis failed it the first time
	ctx := context.Background()
	pingAndSettle(ctx, h)
	if n := replaced.Load(); n != 0 {
		t.Fatalf("%d new servers, the same Redis answering again", n)
	}
	s.Restart()
	waitFor(t, func() bool { h.Kick(); return replaced.Load() > 0 })
	if !h.Settling(ctx) {
		t.Error("not settling just after a new Redis process answered")
	}
	for range 2 {
		pingAndSettle(ctx, h)
	}
	if n := replaced.Load(); n != 1 || !h.Up() {
		t.Fatalf("%d new servers after one restart (up %t), want 1", n, h.Up())
	}
	if n := failing.Load(); n != 2 {
		t.Fatalf("a watcher that was not done: called %d times over the PINGs after, want 2 (again at the next, then done)", n)
	}
}

// TestHealthWatchBack: Health's watchers of WatchBack hear of Redis
// answering again after it failed — not of a PING while it answered all
// along —, and one that is not done (Redis failed it) is called again at
// each PING that finds Redis up, not while it is down, once per PING even
// when Redis comes back again (new, at that) while it is not done.
func TestHealthWatchBack(t *testing.T) {
	s := redistest.New(t)
	h := NewHealth(testkit.ServerRedisClient(t, s.Addr), time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	var slow, quick atomic.Int32
	h.WatchBack(func() bool { return slow.Add(1) >= 3 }) // Redis fails it twice
	h.WatchBack(func() bool { quick.Add(1); return true })
	ctx := context.Background()
	step := func(name string, wantSlow, wantQuick int32) {
		t.Helper()
		if a, b := slow.Load(), quick.Load(); a != wantSlow || b != wantQuick {
			t.Fatalf("%s: the watchers called %d and %d times, want %d and %d", name, a, b, wantSlow, wantQuick)
		}
	}
	pingAndSettle(ctx, h)
	step("up all along", 0, 0)
	h.Failed(errors.New("a command failed"))
	pingAndSettle(ctx, h)
	step("back", 1, 1)
	pingAndSettle(ctx, h)
	step("a PING while up", 2, 1)
	s.Stop()
	waitFor(t, func() bool { pingAndSettle(ctx, h); return !h.Up() })
	step("down", 2, 1)
	s.Restart()
	waitFor(t, func() bool { pingAndSettle(ctx, h); return h.Up() })
	step("back again, a new process", 3, 2)
	pingAndSettle(ctx, h)
	step("done", 3, 2)
}

// TestHealthWatchersDoNotHoldUpThePINGs: the watchers a PING finds due
// run on a goroutine of Health's: a takeover's Settling, whose PING found
// a new Redis process, answers without waiting for them, and the PINGs
// go on (Redis found down) while one is under way.
func TestHealthWatchersDoNotHoldUpThePINGs(t *testing.T) {
	s := redistest.New(t)
	h := NewHealth(testkit.ServerRedisClient(t, s.Addr), time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	release := make(chan struct{})
	var called, heldUp atomic.Int32
	h.WatchReplaced(func() bool {
		called.Add(1)
		select {
		case <-release:
		case <-time.After(30 * time.Second): // what its caller waited, had it been a PING's
			heldUp.Add(1)
		}
		return true
	})
	s.Restart()
	h.pingMu.Lock()
	h.lastPing = time.Time{} // no PING since the restart: Settling makes one
	h.pingMu.Unlock()
	ctx := context.Background()
	if !h.Settling(ctx) {
		t.Fatal("not settling once its own PING found the restarted Redis")
	}
	waitFor(t, func() bool { return called.Load() == 1 })
	s.Stop()
	waitFor(t, func() bool { h.ping(ctx); return !h.Up() })
	close(release)
	h.settle() // waits for the watcher under way
	if heldUp.Load() != 0 {
		t.Fatal("the watcher ran on Settling's goroutine, or held up the PINGs")
	}
}

// TestHealthSettling: a replica about to take a completion over PINGs
// Redis itself (Settling), and waits while a new Redis process was found
// within the last settleFor PING intervals — not before one was, nor
// after.
func TestHealthSettling(t *testing.T) {
	s := redistest.New(t)
	h := NewHealth(testkit.ServerRedisClient(t, s.Addr), time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	ctx := context.Background()
	if h.Settling(ctx) {
		t.Fatal("settling without a new process")
	}
	s.Restart()
	h.pingMu.Lock()
	h.lastPing = time.Time{} // no PING since the restart: Settling makes one
	h.pingMu.Unlock()
	if !h.Settling(ctx) {
		t.Fatal("not settling once its own PING found the restarted Redis")
	}
	h.replacedAt.Store(time.Now().Add(-settleFor * time.Hour).UnixNano())
	if h.Settling(ctx) {
		t.Fatal("settling settleFor intervals after a new process")
	}
}

// leasedPair is a replica's PairLog in rdb with a completion id opened
// under its lease (fenced by it) and its leases.
func leasedPair(t *testing.T, rdb redis.UniversalClient, id string) (*PairLog, Leases) {
	t.Helper()
	f := newPair(t, rdb)
	leases := NewRedisLeases(rdb, 2*time.Second)
	l, leaseErr, err := OpenLeased(t.Context(), f, leases, id, "A", Meta{Replica: "A", Request: []byte("request")})
	if err != nil || leaseErr != nil {
		t.Fatal(err, leaseErr)
	}
	f.Fence(id, *l)
	return f, leases
}

// TestPairLogPublishesAgainAnEndRedisLost: a completion whose end Redis
// acknowledged and then lost (a failover, a restart from a saved copy)
// leaves a log that looks live, which another replica would take over and
// run on to another ending; once a new Redis process answers
// (redisReplaced), the replica publishes the end again from its memory,
// fenced by its last lease, and the log is whole and ended — restored
// whole when Redis lost all of it meanwhile (what the bounds say of such
// a log: TestPairLogRestoresALogRedisLostWhole). One taken over meanwhile
// is left to its new owner. The running completions' next writes check
// that their logs follow on.
func TestPairLogPublishesAgainAnEndRedisLost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		meantime func(t *testing.T, rdb redis.UniversalClient, leases Leases)
		want     []uint64 // the shared log's seqs after, ended when 5
	}{
		{"published again", func(*testing.T, redis.UniversalClient, Leases) {}, seqsTo(5)},
		{"taken over meanwhile", func(t *testing.T, rdb redis.UniversalClient, leases Leases) {
			rdb.Del(t.Context(), keyspaceOf(rdb).lease("c1"))
			if _, err := leases.Acquire(t.Context(), "c1", "B"); err != nil {
				t.Fatal(err)
			}
		}, seqsTo(3)},
		{"lost whole meanwhile", func(t *testing.T, rdb redis.UniversalClient, _ Leases) {
			ks := keyspaceOf(rdb)
			rdb.Del(t.Context(), ks.meta("c1"), ks.log("c1"))
		}, seqsTo(5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := testkit.ServerRedisClient(t, redistest.Start(t))
			f, leases := leasedPair(t, rdb, "c1")
			appendRun(f, "c1", 3, false)
			ks := keyspaceOf(rdb)
			loseKeys(t, rdb, []string{ks.log("c1"), ks.meta("c1"), ks.lease("c1")}, func() {
				appendRun(&seqFrom{f, 3}, "c1", 2, true)
			})
			tc.meantime(t, rdb, leases)
			other := NewRedisLog(rdb, config.EventLogLimits{}, nil)
			t.Cleanup(other.Close)
			if seqs, ended, err := readWhole(other, "c1"); err == nil && (ended || len(seqs) != 3) {
				t.Fatalf("the lost end: Redis holds %v ended %t", seqs, ended)
			}
			losses := f.redis.losses.Load()
			f.redisReplaced()
			if f.redis.losses.Load() == losses {
				t.Error("a new Redis process: the running completions' next writes do not check")
			}
			seqs, ended, err := readWhole(other, "c1")
			if err != nil || !slices.Equal(seqs, tc.want) || ended != (len(tc.want) == 5) {
				t.Fatalf("the shared log: %v ended %t (%v); want %v", seqs, ended, err, tc.want)
			}
			if held, ok, _ := leases.Holder(t.Context(), "c1"); ok && held.Replica == "A" {
				t.Errorf("the end published again kept the lease %+v", held)
			}
		})
	}
}

// seqFrom is a Log whose appends and end add from to their events' seqs.
type seqFrom struct {
	Log
	from uint64
}

func (s *seqFrom) Append(id string, ev *completionv1.CompletionEvent) error {
	ev.Seq += s.from
	return s.Log.Append(id, ev)
}

func (s *seqFrom) End(id string, before []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent, status []byte) error {
	for _, b := range before {
		b.Seq += s.from
	}
	ev.Seq += s.from
	return s.Log.End(id, before, ev, status)
}

// TestPairLogForgetsEndsNoLongerInMemory: the ends looked at again are
// those still in this replica's memory; one it forgot is dropped from the
// list, and an end noted while the list was looked at stays on it.
func TestPairLogForgetsEndsNoLongerInMemory(t *testing.T) {
	f := &PairLog{ends: []endedLog{{id: "a"}, {id: "b"}}}
	looked := slices.Clone(f.ends)
	f.endedShared("c", "") // while a and b were looked at
	f.forgetEnds(looked, map[string]logCopy{"b": {}})
	if got := f.ends; !slices.Equal(got, []endedLog{{id: "b"}, {id: "c"}}) {
		t.Fatalf("ends after forgetting a: %v, want b and c", got)
	}
}

// TestPairLogKeepsTheLastEnds: past maxEnds, the oldest ends noted go.
func TestPairLogKeepsTheLastEnds(t *testing.T) {
	f := &PairLog{}
	for i := range maxEnds + 5 {
		f.endedShared(strconv.Itoa(i), "")
	}
	if len(f.ends) != maxEnds || f.ends[0].id != "5" || f.ends[maxEnds-1].id != strconv.Itoa(maxEnds+4) {
		t.Fatalf("%d ends kept, from %s to %s; want the last %d", len(f.ends), f.ends[0].id, f.ends[len(f.ends)-1].id, maxEnds)
	}
}

// failScripts fails every script call while on is set, at once, as one
// that timed out would fail, and counts them.
type failScripts struct{ on, calls *atomic.Int32 }

func (h failScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() > 0 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			h.calls.Add(1)
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return next(ctx, cmd)
	}
}

// TestPairLogRepublishStopsWhenRedisStopsAnswering: a replica putting
// back the logs a Redis restarted empty lost stops at the first that Redis
// does not answer — each would wait its timeout on the PING's goroutine,
// which the health check and the takeovers wait for — and puts them all
// back at a later PING.
func TestPairLogRepublishStopsWhenRedisStopsAnswering(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	f := newPair(t, rdb)
	const n = 30
	var ids []string
	for i := range n {
		id := "c" + strconv.Itoa(i)
		ids = append(ids, id)
		if err := f.Open(id, Meta{Replica: "A"}); err != nil {
			t.Fatal(err)
		}
		appendRun(f, id, 2, true)
	}
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var on, calls atomic.Int32
	rdb.AddHook(failScripts{&on, &calls})
	on.Store(1)
	if f.redisReplaced() {
		t.Fatal("done, with Redis failing every restore")
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d restores tried against a Redis that stopped answering, want 1", got)
	}
	on.Store(0)
	if !f.redisReplaced() {
		t.Fatal("not done once Redis answers")
	}
	other := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	for _, id := range ids {
		if seqs, ended, err := readWhole(other, id); err != nil || !ended || !slices.Equal(seqs, seqsTo(2)) {
			t.Errorf("%s: %v ended %t (%v), want it restored whole", id, seqs, ended, err)
		}
	}
}

// pingAndSettle PINGs as Health does, then calls the watchers the PING
// found due, as its settler would (waiting for one under way).
func pingAndSettle(ctx context.Context, h *Health) {
	h.ping(ctx)
	h.settle()
}
