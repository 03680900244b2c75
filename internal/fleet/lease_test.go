package fleet

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/internal/redistest"
)

// TestLeases checks both implementations against one contract: one holder
// at a time, growing tokens, compare-and-renew, compare-and-release, expiry.
func TestLeases(t *testing.T) {
	const ttl = 200 * time.Millisecond
	impls := map[string]func(t *testing.T) Leases{
		"memory": func(*testing.T) Leases { return NewMemLeases(ttl) },
		"redis": func(t *testing.T) Leases {
			rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
			t.Cleanup(func() { rdb.Close() })
			return NewRedisLeases(rdb, ttl)
		},
	}
	for name, mk := range impls {
		t.Run(name, func(t *testing.T) {
			ls, ctx := mk(t), context.Background()
			a, err := ls.Acquire(ctx, "c1", "A")
			if err != nil || a.Token != 1 || a.Replica != "A" {
				t.Fatalf("acquire: %+v %v", a, err)
			}
			if _, err := ls.Acquire(ctx, "c1", "B"); !errors.Is(err, errLeaseHeld) {
				t.Fatalf("second acquire: %v", err)
			}
			if h, ok, err := ls.Holder(ctx, "c1"); err != nil || !ok || h != a {
				t.Fatalf("holder %+v %t %v", h, ok, err)
			}
			for range 3 { // renewals keep it past its first length
				time.Sleep(ttl / 2)
				if err := ls.Renew(ctx, a); err != nil {
					t.Fatalf("renew: %v", err)
				}
			}
			time.Sleep(ttl + 50*time.Millisecond) // lapses: the owner died
			if _, ok, _ := ls.Holder(ctx, "c1"); ok {
				t.Fatal("lease still held after its length")
			}
			b, err := ls.Acquire(ctx, "c1", "B")
			if err != nil || b.Token <= a.Token {
				t.Fatalf("takeover acquire: %+v %v", b, err)
			}
			if err := ls.Renew(ctx, a); !errors.Is(err, errLeaseLost) {
				t.Fatalf("the superseded owner renewed: %v", err)
			}
			_ = ls.Release(ctx, a) // not its lease any more: a no-op
			if h, ok, _ := ls.Holder(ctx, "c1"); !ok || h != b {
				t.Fatalf("the old owner's release dropped the new lease: %+v %t", h, ok)
			}
			if err := ls.Release(ctx, b); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := ls.Holder(ctx, "c1"); ok {
				t.Fatal("held after release")
			}
		})
	}
}

// TestOwnershipRenewsAndStops: an owner keeps its lease past its length by
// renewing; once halted (dead) it stops writing at once and the lease
// lapses for the others; one that loses its lease is told.
func TestOwnershipRenewsAndStops(t *testing.T) {
	const ttl = 150 * time.Millisecond
	ls, ctx := NewMemLeases(ttl), context.Background()
	from := time.Now()
	l, err := ls.Acquire(ctx, "c", "A")
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{})
	o := Own(ls, l, from, false, func() bool { close(lost); return true }, nil)
	time.Sleep(3 * ttl)
	if !o.valid() {
		t.Fatal("the owner lost a lease it renews")
	}
	o.Halt()
	if o.valid() {
		t.Fatal("a halted owner may still write")
	}
	select {
	case <-lost:
	case <-time.After(2 * ttl):
		t.Fatal("a halted owner was not told it lost the lease")
	}
	o.End()
	time.Sleep(ttl)
	if _, err := ls.Acquire(ctx, "c", "B"); err != nil {
		t.Fatalf("the dead owner's lease did not lapse: %v", err)
	}
}

// TestLeaseRenewTakesBackALapsedLease: a lease that lapsed with nobody
// granted it since is taken back by its owner's renewal (a Redis that
// restarted empty lost it), but not once another replica was granted one.
func TestLeaseRenewTakesBackALapsedLease(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	ls := NewRedisLeases(rdb, time.Second)
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil { // Redis lost everything
		t.Fatal(err)
	}
	if err := ls.Renew(ctx, a); err != nil {
		t.Fatalf("renew after Redis lost the lease: %v", err)
	}
	if h, ok, _ := ls.Holder(ctx, "c1"); !ok || h != a {
		t.Fatalf("holder %+v %t, want %+v", h, ok, a)
	}
	if b, err := ls.Acquire(ctx, "c1", "B"); !errors.Is(err, errLeaseHeld) {
		t.Fatalf("B acquired a lease A holds again: %+v %v", b, err)
	}
	// Gone, and B was granted it since: A's renewal is refused.
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := ls.Acquire(ctx, "c1", "B")
	if err != nil || b.Token <= a.Token {
		t.Fatalf("B: %+v %v", b, err)
	}
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ls.Renew(ctx, a); !errors.Is(err, errLeaseLost) {
		t.Fatalf("A took back a lease B was granted after it: %v", err)
	}
}
