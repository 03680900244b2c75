package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/internal/redistest"
)

// leasesUnderTest is one implementation of Leases under the contract
// test, with the way its time passes: the bubble's fake clock for the
// memory leases, the keys' own expiry for Redis (elapse takes d off every
// lease key's PTTL), so that no test waits in real time and none depends
// on how busy the machine is.
type leasesUnderTest struct {
	leases Leases
	elapse func(t *testing.T, d time.Duration)
}

// TestLeases checks both implementations against one contract: one holder
// at a time, growing tokens, compare-and-renew, compare-and-release, expiry.
func TestLeases(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		const ttl = 200 * time.Millisecond
		synctest.Test(t, func(t *testing.T) {
			leaseContract(t, ttl, leasesUnderTest{leases: NewMemLeases(ttl), elapse: func(_ *testing.T, d time.Duration) { time.Sleep(d) }})
		})
	})
	t.Run("redis", func(t *testing.T) {
		// Long: Redis's clock runs in real time between the steps too,
		// and a busy machine's milliseconds must not count.
		const ttl = 20 * time.Second
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
		t.Cleanup(func() { rdb.Close() })
		elapse := func(t *testing.T, d time.Duration) {
			ctx := context.Background()
			left, err := rdb.PTTL(ctx, LeaseKey("c1")).Result()
			switch {
			case err != nil:
				t.Fatal(err)
			case left < 0: // no key, or no expiry
				return
			case left <= d:
				err = rdb.Del(ctx, LeaseKey("c1")).Err()
			default:
				err = rdb.PExpire(ctx, LeaseKey("c1"), left-d).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		leaseContract(t, ttl, leasesUnderTest{leases: NewRedisLeases(rdb, ttl), elapse: elapse})
	})
}

func leaseContract(t *testing.T, ttl time.Duration, u leasesUnderTest) {
	ls, ctx := u.leases, context.Background()
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil || a.Token != 1 || a.Replica != "A" {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if _, err := ls.Acquire(ctx, "c1", "B"); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("second acquire: %v", err)
	}
	if h, ok, err := ls.Holder(ctx, "c1"); err != nil || !ok || h != a {
		t.Fatalf("holder %+v %t %v", h, ok, err)
	}
	for range 3 { // renewals keep it past its first length
		u.elapse(t, ttl/2)
		if err := ls.Renew(ctx, a); err != nil {
			t.Fatalf("renew: %v", err)
		}
	}
	u.elapse(t, ttl*9/10)
	if h, ok, _ := ls.Holder(ctx, "c1"); !ok || h != a {
		t.Fatalf("a renewed lease lapsed before its length: %+v %t", h, ok)
	}
	u.elapse(t, ttl/10) // lapses: the owner died
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
}

// TestOwnershipRenewsAndStops: an owner keeps its lease past its length by
// renewing; once halted (dead) it stops writing at once and the lease
// lapses for the others; one that loses its lease is told. On the
// bubble's clock: the renewals happen exactly when Timing says.
func TestOwnershipRenewsAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 150 * time.Millisecond
		ls, ctx := NewMemLeases(ttl), context.Background()
		from := time.Now()
		l, err := ls.Acquire(ctx, "c", "A")
		if err != nil {
			t.Fatal(err)
		}
		lost := make(chan struct{})
		o := Own(ls, l, from, false, func() bool { close(lost); return true }, nil)
		time.Sleep(3*ttl + TimingOf(ls).RenewEvery()/2) // between two renewals
		if !o.valid() {
			t.Fatal("the owner lost a lease it renews")
		}
		o.Halt()
		if o.valid() {
			t.Fatal("a halted owner may still write")
		}
		select {
		case <-lost:
		case <-time.After(TimingOf(ls).RenewEvery()):
			t.Fatal("a halted owner was not told it lost the lease at its next renewal")
		}
		o.End()
		time.Sleep(ttl) // the last renewal was before the halt
		if _, err := ls.Acquire(ctx, "c", "B"); err != nil {
			t.Fatalf("the dead owner's lease did not lapse: %v", err)
		}
	})
}

// TestOwnershipStopsWritingBeforeTheStoreExpires: the owner's deadline
// is the last renewal's start plus the length less the margin, so that it
// stops writing before the store could give the lease to another.
func TestOwnershipStopsWritingBeforeTheStoreExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		tm := Timing{TTL: ttl}
		ls := NewMemLeases(ttl)
		from := time.Now()
		l, err := ls.Acquire(context.Background(), "c", "A")
		if err != nil {
			t.Fatal(err)
		}
		o := Own(ls, l, from, false, func() bool { return true }, nil)
		defer o.End()
		o.mu.Lock()
		first := o.until
		o.mu.Unlock()
		if got, want := first, from.Add(ttl-tm.Margin()); !got.Equal(want) {
			t.Fatalf("deadline %v after acquiring, want %v", got.Sub(from), want.Sub(from))
		}
		time.Sleep(tm.RenewEvery())
		synctest.Wait()
		o.mu.Lock()
		until := o.until
		o.mu.Unlock()
		if want := from.Add(tm.RenewEvery() + ttl - tm.Margin()); !until.Equal(want) {
			t.Fatalf("deadline %v after a renewal, want %v", until.Sub(from), want.Sub(from))
		}
	})
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
	if b, err := ls.Acquire(ctx, "c1", "B"); !errors.Is(err, ErrLeaseHeld) {
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

// TestRedisLeaseRenewalsAreBatched: the renewals of many leases that fall
// together go to Redis in one script call, and each gets its own answer:
// a lease another replica holds now is lost, the others renewed.
func TestRedisLeaseRenewalsAreBatched(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	// A long lease, so that the batch's wait (a twentieth) leaves every
	// renewal time to join it however slow the machine.
	ls := NewRedisLeases(rdb, time.Minute)
	var held []Lease
	for i := range 50 {
		l, err := ls.Acquire(ctx, fmt.Sprint("c", i), "A")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	// c7 lapsed and B took it.
	if err := rdb.Del(ctx, LeaseKey("c7")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, "c7", "B"); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, rdb)
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, l := range held {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = ls.Renew(ctx, l) }()
	}
	wg.Wait()
	for i, err := range errs {
		if want := i == 7; errors.Is(err, errLeaseLost) != want || (!want && err != nil) {
			t.Errorf("renew c%d: %v", i, err)
		}
	}
	if calls := scriptCalls(t, rdb) - before; calls > 2 {
		t.Errorf("%d script calls for 50 renewals at once, want one (two if the machine split them)", calls)
	}
	if ttl := rdb.PTTL(ctx, LeaseKey("c3")).Val(); ttl < 50*time.Second {
		t.Errorf("c3's lease has %v left after its renewal", ttl)
	}
}

// TestRedisLeaseRenewGivesUpWithItsContext: a renewal whose caller stops
// waiting returns at once.
func TestRedisLeaseRenewGivesUpWithItsContext(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	ls := NewRedisLeases(rdb, 10*time.Second) // a batch waits 500 ms
	l, err := ls.Acquire(context.Background(), "c", "A")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ls.Renew(ctx, l); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("renew: %v, want the context's deadline", err)
	}
}
