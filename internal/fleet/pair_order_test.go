package fleet

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
)

// newPair is a replica's PairLog on rdb, closed when t ends.
func newPair(t *testing.T, rdb redis.UniversalClient) *PairLog {
	t.Helper()
	f, _ := newPairAt(t, rdb, time.Now)
	return f
}

// newPairAt is newPair reading the time from now, and its count of the
// completions kept apart. Its Health PINGs once an hour: Redis is down
// for the rest of the test once a command fails.
func newPairAt(t *testing.T, rdb redis.UniversalClient, now func() time.Time) (*PairLog, *atomic.Int64) {
	t.Helper()
	return newPairLimits(t, rdb, config.EventLogLimits{}, now)
}

// newPairLimits is newPairAt with limits, for both of its logs.
func newPairLimits(t *testing.T, rdb redis.UniversalClient, limits config.EventLogLimits, now func() time.Time) (*PairLog, *atomic.Int64) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	h := NewHealth(rdb, time.Hour, quiet)
	t.Cleanup(h.Close)
	rl := NewRedisLog(rdb, limits, now)
	t.Cleanup(rl.Close)
	apart := &atomic.Int64{}
	f := NewPairLog(NewMemLog(limits, now), rl, h, quiet, countingCounter{n: apart})
	f.now = now
	return f, apart
}

// countingCounter is a metric.Int64Counter that adds to n.
type countingCounter struct {
	embedded.Int64Counter
	n *atomic.Int64
}

func (c countingCounter) Add(_ context.Context, incr int64, _ ...metric.AddOption) { c.n.Add(incr) }

func (c countingCounter) Enabled(context.Context) bool { return true }

// TestPairLogRedisBeforeMemory: an event of a shared completion is in
// Redis before this replica's followers, who read its memory, can read
// it: a replica that dies between the two leaves no follower ahead of
// the shared log.
func TestPairLogRedisBeforeMemory(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	f := newPair(t, rdb)
	if err := f.Open("c1", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	var early []uint64
	testHookRedisAdd = func(id string, seq uint64) {
		if p, err := f.mem.Read(id, seq-1); err == nil && len(p.Events) > 0 {
			early = append(early, seq)
		}
	}
	t.Cleanup(func() { testHookRedisAdd = nil })
	for seq := uint64(1); seq <= 3; seq++ {
		if err := f.Append("c1", logEvent(seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.End("c1", nil, logEvent(4, true), nil); err != nil {
		t.Fatal(err)
	}
	if early != nil {
		t.Errorf("seqs %v were readable here before Redis had them", early)
	}
	if p, err := f.mem.Read("c1", 0); err != nil || len(p.Events) != 4 || !p.Ended {
		t.Errorf("memory after the end: %v events, ended %t, %v", len(p.Events), p.Ended, err)
	}
}

// TestPairLogFencedWriteKeptNowhere: a replica paused past its lease
// wakes while another replica owns the completion and has logged its own
// event at the next seq. The paused replica's write is refused
// (ErrFenced) and kept nowhere: a reader through either replica reads the
// new owner's event at that seq.
func TestPairLogFencedWriteKeptNowhere(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	a, b := newPair(t, rdb), newPair(t, rdb)
	leases := NewRedisLeases(rdb, time.Minute)
	if err := a.Open("c1", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	la, err := leases.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	a.Fence("c1", la)
	if err := a.Append("c1", logEvent(1, false)); err != nil {
		t.Fatal(err)
	}
	// A is paused; its lease lapses; B takes the completion over.
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	lb, err := leases.Acquire(ctx, "c1", "B")
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Read("c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Adopt("c1", p.Meta, p.Events, 0, nil)
	b.Fence("c1", lb)
	takeover := logEvent(2, false)
	takeover.Attempt = 9
	if err := b.Append("c1", takeover); err != nil {
		t.Fatal(err)
	}
	// A wakes and writes its next event.
	if err := a.Append("c1", logEvent(2, false)); !errors.Is(err, ErrFenced) {
		t.Fatalf("the paused owner's append: %v, want ErrFenced", err)
	}
	for name, r := range map[string]*PairLog{"A": a, "B": b} {
		p, err := r.Read("c1", 1)
		if err != nil || len(p.Events) != 1 || p.Events[0].GetAttempt() != 9 {
			t.Errorf("read through %s after seq 1: %v %v; want the new owner's event", name, p.Events, err)
		}
	}
}
