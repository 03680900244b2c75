package fleet

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// copyOfRun is the logCopy of events 1..n, the last the result when ended.
func copyOfRun(t *testing.T, meta Meta, n int, ended bool) logCopy {
	t.Helper()
	c := logCopy{meta: meta, ended: ended}
	if ended {
		c.status = []byte("status")
	}
	for i := 1; i <= n; i++ {
		b, err := proto.Marshal(logEvent(uint64(i), ended && i == n))
		if err != nil {
			t.Fatal(err)
		}
		c.events, c.seqs = append(c.events, b), append(c.seqs, uint64(i))
	}
	return c
}

// TestRedisReshare: a log kept in memory alone for a while is published
// again: Redis gets the events it lacks after those it kept, or all of
// them and the end once it lost everything (the lapsed lease is taken
// back while it writes, and given up with the end; the ended log's meta
// keeps no request); another replica granted
// the lease meanwhile refuses it, and its log is left as it is.
func TestRedisReshare(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	ls := NewRedisLeases(rdb, time.Minute)
	l.LeaseTTL = ls.TTL()
	meta := Meta{Owner: "k", Request: []byte("req"), Replica: "A"}
	if err := l.Open("c1", meta); err != nil {
		t.Fatal(err)
	}
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c1", a)
	appendRun(l, "c1", 2, false)

	readAll := func(id string) Page {
		t.Helper()
		p, err := l.Read(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Redis missed events 3..5 (it did not answer): they are added.
	if err := l.reshare("c1", copyOfRun(t, meta, 5, false)); err != nil {
		t.Fatal(err)
	}
	if p := readAll("c1"); !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3, 4, 5}) || p.Ended || string(p.Meta.Request) != "req" {
		t.Fatalf("after a reshare: seqs %v ended %t meta %+v", testkit.Seqs(p.Events), p.Ended, p.Meta)
	}
	// Redis restarted empty: everything again, and the end.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.reshare("c1", copyOfRun(t, meta, 7, true)); err != nil {
		t.Fatal(err)
	}
	p := readAll("c1")
	if !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3, 4, 5, 6, 7}) || !p.Ended || string(p.Status) != "status" || len(p.Meta.Request) != 0 {
		t.Fatalf("after Redis lost it: seqs %v ended %t status %q meta %+v", testkit.Seqs(p.Events), p.Ended, p.Status, p.Meta)
	}
	// Taken back with its token (the counter keeps it, so that a replica
	// granted the lease next gets a larger one), then given up with the end.
	if got := rdb.Get(ctx, leaseTokenKey("c1")).Val(); got != strconv.FormatUint(a.Token, 10) {
		t.Fatalf("the lapsed lease was not taken back: its counter is %q, want %d", got, a.Token)
	}
	if h, ok, _ := ls.Holder(ctx, "c1"); ok {
		t.Fatalf("the lease of the log ended by the reshare is still held: %+v", h)
	}

	// c2: A's lease lapsed, and B was granted it and wrote on.
	if err := l.Open("c2", meta); err != nil {
		t.Fatal(err)
	}
	a2, err := ls.Acquire(ctx, "c2", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c2", a2)
	appendRun(l, "c2", 2, false)
	if err := rdb.Del(ctx, LeaseKey("c2")).Err(); err != nil {
		t.Fatal(err)
	}
	b2, err := ls.Acquire(ctx, "c2", "B")
	if err != nil {
		t.Fatal(err)
	}
	lb := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(lb.Close)
	lb.Fence("c2", b2)
	lb.Append("c2", logEvent(3, false))
	if err := l.reshare("c2", copyOfRun(t, meta, 6, false)); !errors.Is(err, errLogFenced) {
		t.Fatalf("A's reshare of a completion B holds: %v, want fenced", err)
	}
	if err := l.dropUnlessFenced("c2"); err != nil {
		t.Fatal(err)
	}
	if p := readAll("c2"); !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3}) {
		t.Fatalf("B's log after A's refused reshare and drop: %v", testkit.Seqs(p.Events))
	}
	// Lapsed again, nobody holds it now, but B was granted it after A:
	// A is still refused.
	if err := rdb.Del(ctx, LeaseKey("c2")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.reshare("c2", copyOfRun(t, meta, 6, false)); !errors.Is(err, errLogFenced) {
		t.Fatalf("A's reshare once B's lease lapsed: %v, want fenced", err)
	}
}

// TestPairLogPublishesWhatEndedApartUntilDone: the completions that ended
// in a replica's memory while Redis did not answer are published when it
// answers again (Health.WatchBack); a publication Redis fails keeps every
// one not published yet — not only the one it failed — for the next PING
// that finds Redis up.
func TestPairLogPublishesWhatEndedApartUntilDone(t *testing.T) {
	s := redistest.New(t)
	rdb := testkit.ServerRedisClient(t, s.Addr)
	f := newPair(t, rdb)
	f.watch.Failed(errors.New("a command failed"))
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		if err := f.Open(id, Meta{Replica: "A"}); err != nil {
			t.Fatal(err)
		}
		appendRun(f, id, 3, true)
	}
	s.Stop()
	ctx := context.Background()
	if f.publishEnded() {
		t.Fatal("published with Redis stopped")
	}
	f.mu.Lock()
	kept := len(f.unpublished)
	f.mu.Unlock()
	if kept != len(ids) {
		t.Fatalf("%d completions left to publish after a failed publication, want %d", kept, len(ids))
	}
	s.Restart()
	waitFor(t, func() bool { pingAndSettle(ctx, f.watch); return f.watch.Up() })
	other := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	for _, id := range ids {
		if seqs, ended, err := readWhole(other, id); err != nil || !ended || !slices.Equal(seqs, seqsTo(3)) {
			t.Errorf("%s once Redis answers again: %v ended %t (%v), want it whole", id, seqs, ended, err)
		}
	}
}
