package fleet

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// TestRedisLogFenced: once a completion is fenced, the Redis log appends
// its events only while the writer holds the lease, checked in the append
// script: an owner superseded by another replica writes nothing more, and
// the new owner's writes go on. The meta's Request (bytes, base64 in the
// JSON blob) reads back as it was written.
func TestRedisLogFenced(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	ls := NewRedisLeases(rdb, time.Minute)
	req := []byte{0, 1, 2, 0xff, '"', '\\'}
	if err := l.Open("c1", Meta{Owner: "k", Request: req, Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c1", a)
	if res, err := l.add("c1", nil, logEvent(1, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("the owner's append: %s %v", res, err)
	}
	// A's lease is lost (it lapsed) and B takes it.
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := ls.Acquire(ctx, "c1", "B")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := l.add("c1", nil, logEvent(2, false), nil, false); res != "fenced" || err != nil {
		t.Fatalf("the superseded owner's append: %s %v, want fenced", res, err)
	}
	lb := NewRedisLog(rdb, config.EventLogLimits{}, nil) // B's
	t.Cleanup(lb.Close)
	lb.Fence("c1", b)
	if res, err := lb.add("c1", nil, logEvent(2, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("the new owner's append: %s %v", res, err)
	}
	lb.End("c1", nil, logEvent(3, true), nil)
	lb.Unfence("c1")
	p, err := lb.Read("c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3}) || !p.Ended {
		t.Fatalf("log %v ended %t", testkit.Seqs(p.Events), p.Ended)
	}
	if !bytes.Equal(p.Meta.Request, req) || p.Meta.Replica != "A" || p.Meta.Owner != "k" {
		t.Fatalf("meta read back %+v", p.Meta)
	}
}
