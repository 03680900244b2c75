package fleet

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// loseWrites runs the appends of write, then puts the log of id back as
// it was before them (the stream only: its meta and sizes stay), as a
// replica promoted before it received them, or a Redis restarted from a
// copy saved before them, keeps it.
func loseWrites(t *testing.T, rdb redis.UniversalClient, id string, write func()) {
	t.Helper()
	loseKeys(t, rdb, []string{keyspaceOf(rdb).log(id)}, write)
}

// loseKeys runs write, then puts keys back as they were before it (with
// their time to live; a key that was not there is deleted).
func loseKeys(t *testing.T, rdb redis.UniversalClient, keys []string, write func()) {
	t.Helper()
	ctx := context.Background()
	type kept struct {
		dump string
		ttl  time.Duration
	}
	saved := map[string]*kept{}
	for _, key := range keys {
		dump, err := rdb.Dump(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		saved[key] = &kept{dump: dump, ttl: max(rdb.PTTL(ctx, key).Val(), 0)}
	}
	write()
	for _, key := range keys {
		k := saved[key]
		err := rdb.Del(ctx, key).Err()
		if k != nil && err == nil {
			err = rdb.RestoreReplace(ctx, key, k.ttl, k.dump).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisLogRefusesAGap: once Redis lost a log's last events, a write
// that checks (a renewal; a write gapCheckAfter after the writer's last
// acknowledged one; one after a flush failed) is refused gap and adds
// nothing, rather than leaving a hole; a write that does not follow the
// last entry is refused order; the reshare's writes all check, and fill
// the hole.
func TestRedisLogRefusesAGap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(*RedisLog, *clock)
	}{
		{"gapCheckAfter later", func(_ *RedisLog, c *clock) { c.add(gapCheckAfter) }},
		{"after a flush failed", func(l *RedisLog, _ *clock) { l.mayHaveLost() }},
		{"at a renewal", func(l *RedisLog, c *clock) { c.add(l.LiveTTL / 16) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := testkit.ServerRedisClient(t, redistest.Start(t))
			clk := &clock{t: time.Unix(1000, 0)}
			l := NewRedisLog(rdb, config.EventLogLimits{}, clk.now)
			t.Cleanup(l.Close)
			open(t, l, "c", "k")
			add := adder(t, l, "c")
			for seq := uint64(1); seq <= 3; seq++ {
				add(seq)
			}
			loseWrites(t, rdb, "c", func() { add(4); add(5) })
			tc.before(l, clk)
			if res := add(6); res != "gap" {
				t.Fatalf("a write after Redis lost 4 and 5: %s, want gap", res)
			}
			if p, err := l.Read("c", 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3}) {
				t.Fatalf("the log after the refused write: %v %v", testkit.Seqs(p.Events), err)
			}
			if res := add(3); res != "order" {
				t.Fatalf("a write of the last seq again: %s, want order", res)
			}
			c := copyOfRun(t, Meta{Owner: "k"}, 6, false)
			if err := l.reshare("c", c); err != nil {
				t.Fatal(err)
			}
			if p, err := l.Read("c", 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), seqsTo(6)) {
				t.Fatalf("the log published again: %v %v", testkit.Seqs(p.Events), err)
			}
			if res := add(7); res != "ok" {
				t.Fatalf("the next write: %s", res)
			}
		})
	}
}

// TestRedisLogSuspect: a writer checks that its log follows on only when
// Redis may have lost writes since its last acknowledged one — the
// replica's writes of the shard paused gapCheckAfter since (an outage may
// have passed unseen), or a flush failed since —, and its renewals always
// do: not at every event, which would cost Redis a third more per event,
// nor at every event of a slow completion on a replica that writes the
// shard steadily.
func TestRedisLogSuspect(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	clk := &clock{t: time.Unix(1000, 0)}
	l := NewRedisLog(rdb, config.EventLogLimits{}, clk.now)
	t.Cleanup(l.Close)
	open(t, l, "c", "k")
	seq := uint64(0)
	acked := func() {
		t.Helper()
		seq++
		if res, err := l.add("c", nil, logEvent(seq, false), nil, false); res != "ok" || err != nil {
			t.Fatal(res, err)
		}
	}
	acked() // finds the script missing: a possible loss, counted while it is in flight
	lw := l.writer("c")
	if !l.suspect("c", lw) {
		t.Fatal("a loss counted while the writer's write was in flight: its next write does not check")
	}
	acked()
	for _, s := range []struct {
		name  string
		do    func()
		check bool
	}{
		{"1 ms on", func() { clk.add(time.Millisecond) }, false},
		{"writes of the shard every 49 ms", func() { clk.add(gapCheckAfter - time.Millisecond) }, false},
		{"and 49 ms on", func() { clk.add(gapCheckAfter - time.Millisecond) }, false},
		{"after gapCheckAfter without a write of the shard", func() { clk.add(gapCheckAfter) }, true},
		{"steady again, the quiet spell after its last write", func() { clk.add(time.Millisecond) }, true},
		{"its write acknowledged since", func() { clk.add(time.Millisecond); acked() }, false},
		{"a flush failed", func() { l.mayHaveLost() }, true},
	} {
		s.do()
		if got := l.suspect("c", lw); got != s.check {
			t.Errorf("%s: suspect %t, want %t", s.name, got, s.check)
		}
	}
}

// TestPairLogPublishesAgainWhatRedisLost: a shared completion whose log
// lost its last events in Redis (a failover) is published again from the
// replica's memory at its next write, before that event is readable
// here: the shared log has every seq, no hole, and the completion stays
// shared.
func TestPairLogPublishesAgainWhatRedisLost(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	clk := &clock{t: time.Unix(1000, 0)}
	f, _ := newPairAt(t, rdb, clk.now)
	if err := f.Open("c1", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	appendRun(f, "c1", 3, false)
	loseWrites(t, rdb, "c1", func() {
		for seq := uint64(4); seq <= 5; seq++ {
			if err := f.Append("c1", logEvent(seq, false)); err != nil {
				t.Fatal(err)
			}
		}
	})
	clk.add(time.Second)
	var readable []uint64
	testHookReshare = func(id string) {
		if p, err := f.mem.Read(id, 0); err == nil {
			readable = testkit.Seqs(p.Events)
		}
	}
	t.Cleanup(func() { testHookReshare = nil })
	if err := f.Append("c1", logEvent(6, false)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(readable, seqsTo(5)) {
		t.Errorf("readable here when the log was published again: %v, want 1..5 (seq 6 only once Redis has it)", readable)
	}
	other := NewRedisLog(rdb, config.EventLogLimits{}, clk.now)
	t.Cleanup(other.Close)
	if p, err := other.Read("c1", 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), seqsTo(6)) {
		t.Fatalf("the shared log read by another replica: %v %v; want 1..6", testkit.Seqs(p.Events), err)
	}
	if f.KeptHere("c1") {
		t.Error("the completion is still kept apart after it was published again")
	}
	if err := f.End("c1", nil, logEvent(7, true), nil); err != nil {
		t.Fatal(err)
	}
	if p, err := other.Read("c1", 0); err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), seqsTo(7)) {
		t.Fatalf("the shared log after the end: %v ended %t %v", testkit.Seqs(p.Events), p.Ended, err)
	}
}
