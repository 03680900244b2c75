package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// heard collects the ids a RedisCancels delivers.
type heard struct {
	mu  sync.Mutex
	ids []string
	ch  chan string
	run []string // what watched answers: the completions "running here"
}

func newHeard(running ...string) *heard { return &heard{ch: make(chan string, 16), run: running} }

func (h *heard) deliver(id string) {
	h.mu.Lock()
	h.ids = append(h.ids, id)
	h.mu.Unlock()
	h.ch <- id
}

func (h *heard) watched() []string { return h.run }

// next is the next id delivered, or "" after a while.
func (h *heard) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-h.ch:
		return id
	case <-time.After(5 * time.Second):
		return ""
	}
}

// TestRedisCancels: a cancel request marks a live log, for as long as the
// log's meta lives, atomically with the look at it, and names the
// completion to every replica subscribed; an ended log or one Redis does
// not keep is not marked. A replica that subscribes after the notice went
// out (its subscription was down) finds the marks of the completions it
// runs when it subscribes. On one Redis and on a Cluster.
func TestRedisCancels(t *testing.T) {
	t.Run("redis", func(t *testing.T) { testRedisCancels(t, testkit.ServerRedisClient(t, redistest.Start(t))) })
	t.Run("redis cluster", func(t *testing.T) {
		testRedisCancels(t, testkit.ServerClusterClient(t, redistest.Addrs(redistest.NewCluster(t, 3))))
	})
}

func testRedisCancels(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	ks := keyspaceOf(rdb)
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	open(t, l, "live", "k")
	appendRun(l, "live", 2, false)
	open(t, l, "ended", "k")
	appendRun(l, "ended", 2, true)
	before := goleak.IgnoreCurrent() // the log's and the client's

	a := newHeard()
	ca := NewRedisCancels(rdb, a.deliver, a.watched)
	b := newHeard("live")
	cb := NewRedisCancels(rdb, b.deliver, b.watched)

	for _, tc := range []struct {
		id     string
		want   CancelState
		marked bool
	}{
		{"ended", CancelEnded, false},
		{"missing", CancelMissing, false},
		{"live", CancelLive, true},
	} {
		t.Run(tc.id, func(t *testing.T) {
			st, err := ca.Request(ctx, tc.id)
			if err != nil || st != tc.want {
				t.Fatalf("Request(%s) = %q, %v; want %q", tc.id, st, err, tc.want)
			}
			marked, err := cb.Requested(ctx, tc.id)
			if err != nil || marked != tc.marked {
				t.Fatalf("Requested(%s) = %v, %v; want %v", tc.id, marked, err, tc.marked)
			}
			if !tc.marked {
				return
			}
			// Both replicas hear it (each ignores what does not run there).
			if got := b.next(t); got != tc.id {
				t.Errorf("replica B heard %q, want %q", got, tc.id)
			}
			if got := a.next(t); got != tc.id {
				t.Errorf("replica A heard %q, want %q", got, tc.id)
			}
			// The mark lives as long as the log's meta, in the completion's slot.
			meta, mark := rdb.PTTL(ctx, ks.meta(tc.id)).Val(), rdb.PTTL(ctx, ks.cancel(tc.id)).Val()
			if meta <= 0 || mark < meta-time.Second {
				t.Errorf("the mark lives %v, the log's meta %v", mark, meta)
			}
		})
	}

	// Replica C subscribes after the notice went out: it finds the mark of
	// the completion it runs at once, and no other.
	c := newHeard("ended", "live", "missing")
	cc := NewRedisCancels(rdb, c.deliver, c.watched)
	if got := c.next(t); got != "live" {
		t.Errorf("replica C, subscribing, found %q, want live", got)
	}
	for _, x := range []*RedisCancels{ca, cb, cc} {
		x.Close()
	}
	c.mu.Lock()
	if len(c.ids) != 1 {
		t.Errorf("replica C heard %v, want [live]", c.ids)
	}
	c.mu.Unlock()
	goleak.VerifyNone(t, before)
}
