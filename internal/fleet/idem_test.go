package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// idemStores are the two Idempotency implementations, each fresh.
func idemStores(t *testing.T) map[string]Idempotency {
	t.Helper()
	stores := map[string]Idempotency{"memory": NewMemIdempotency(8, nil)}
	stores["redis"] = NewRedisIdempotency(testkit.ServerRedisClient(t, redistest.Start(t)), 8, nil, slog.New(slog.DiscardHandler))
	return stores
}

// TestIdempotencySwap: a claim is a swap from nothing, which only the
// first claimer wins; the transitions swap from the record held; a swap
// from a record no longer held answers the one held.
func TestIdempotencySwap(t *testing.T) {
	ctx := context.Background()
	pending := IdemRecord{ID: "cmpl_a", Digest: "d1"}
	opened := IdemRecord{ID: "cmpl_a", Digest: "d1", Opened: true}
	other := IdemRecord{ID: "cmpl_b", Digest: "d2"}
	for name, st := range idemStores(t) {
		t.Run(name, func(t *testing.T) {
			key := RedisIdemKey("scope", "key")
			steps := []struct {
				name     string
				old, rec IdemRecord
				want     IdemRecord
			}{
				{"claim", IdemRecord{}, pending, pending},
				{"a second claim finds the first", IdemRecord{}, other, pending},
				{"opened", pending, opened, opened},
				{"a stale swap answers the record held", pending, other, opened},
				{"replaced", opened, other, other},
				{"deleted", other, IdemRecord{}, IdemRecord{}},
				{"claimed again", IdemRecord{}, pending, pending},
			}
			for _, s := range steps {
				got, err := st.Swap(ctx, key, s.old, s.rec, time.Minute)
				if err != nil || got != s.want {
					t.Fatalf("%s: Swap = %+v, %v; want %+v", s.name, got, err, s.want)
				}
			}
		})
	}
}

// TestIdempotencyRace: of many claims of one key at once, exactly one
// wins, and every claimer learns the winner's record.
func TestIdempotencyRace(t *testing.T) {
	for name, st := range idemStores(t) {
		t.Run(name, func(t *testing.T) {
			for round := range 20 {
				key := RedisIdemKey("scope", string(rune('a'+round)))
				const n = 8
				got := make([]IdemRecord, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						rec := IdemRecord{ID: "cmpl_" + string(rune('0'+i)), Digest: "d"}
						r, err := st.Swap(context.Background(), key, IdemRecord{}, rec, time.Minute)
						if err != nil {
							t.Error(err)
						}
						got[i] = r
					})
				}
				wg.Wait()
				for i := range got {
					if got[i] != got[0] || got[0].IsZero() {
						t.Fatalf("round %d: claimers saw %+v", round, got)
					}
				}
			}
		})
	}
}

// TestMemIdempotencyBounded: past its bound, the expired records go
// first, then those that expire soonest; an expired record is no record.
func TestMemIdempotencyBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMemIdempotency(2, func() time.Time { return now })
	ctx := context.Background()
	rec := func(id string) IdemRecord { return IdemRecord{ID: id, Digest: "d"} }
	_, _ = m.Swap(ctx, "short", IdemRecord{}, rec("a"), time.Second)
	_, _ = m.Swap(ctx, "long", IdemRecord{}, rec("b"), time.Hour)
	_, _ = m.Swap(ctx, "new", IdemRecord{}, rec("c"), time.Hour)
	if m.Len() != 2 {
		t.Fatalf("Len = %d, want 2", m.Len())
	}
	if got, _ := m.Swap(ctx, "short", IdemRecord{}, rec("x"), time.Hour); got != rec("x") {
		t.Errorf("the record expiring soonest was kept: %+v", got)
	}
	now = now.Add(2 * time.Hour)
	if got, _ := m.Swap(ctx, "long", IdemRecord{}, rec("y"), time.Hour); got != rec("y") {
		t.Errorf("an expired record still held its key: %+v", got)
	}
}

// TestRedisIdempotencyRestore: Redis comes back empty; Restore puts back
// the opened records this replica set, for what is left of their TTL —
// not a pending claim, not one it deleted or whose TTL passed, and not
// over a record another start set meanwhile. A record Redis still holds
// keeps its TTL.
func TestRedisIdempotencyRestore(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	clk := &clock{t: time.Unix(1_000_000, 0)}
	quiet := slog.New(slog.DiscardHandler)
	r := NewRedisIdempotency(rdb, 8, clk.now, quiet)
	rec := func(id string, opened bool) IdemRecord { return IdemRecord{ID: id, Digest: "d-" + id, Opened: opened} }
	swapThrough(t, r, "running", 24*time.Hour, rec("a", false), rec("a", true))
	swapThrough(t, r, "ended", time.Minute, rec("b", false), rec("b", true))
	swapThrough(t, r, "pending", time.Minute, rec("c", false))
	swapThrough(t, r, "forgotten", time.Minute, rec("d", false), rec("d", true), IdemRecord{})
	swapThrough(t, r, "expired", time.Second, rec("e", false), rec("e", true))
	swapThrough(t, r, "claimed meanwhile", time.Minute, rec("f", false), rec("f", true))
	clk.add(5 * time.Second)
	if err := rdb.FlushAll(ctx).Err(); err != nil { // Redis back empty
		t.Fatal(err)
	}
	other := NewRedisIdempotency(rdb, 8, clk.now, quiet)
	if _, err := other.Swap(ctx, "claimed meanwhile", IdemRecord{}, rec("g", false), time.Minute); err != nil {
		t.Fatal(err)
	}
	if !r.Restore() {
		t.Fatal("Restore failed")
	}
	for key, want := range map[string]struct {
		rec IdemRecord
		ttl time.Duration // about
	}{
		"running":           {rec("a", true), 24*time.Hour - 5*time.Second},
		"ended":             {rec("b", true), 55 * time.Second},
		"pending":           {},
		"forgotten":         {},
		"expired":           {},
		"claimed meanwhile": {rec("g", false), time.Minute},
	} {
		got, err := decodeIdemRecord(rdb.Get(ctx, key).Val())
		if err != nil || got != want.rec {
			t.Errorf("%s after Restore: %+v (%v), want %+v", key, got, err, want.rec)
			continue
		}
		if ttl := rdb.PTTL(ctx, key).Val(); !want.rec.IsZero() && (ttl > want.ttl || ttl < want.ttl-10*time.Second) { // less the test's own time
			t.Errorf("%s restored for %v, want about %v", key, ttl, want.ttl)
		}
	}
	clk.add(30 * time.Second)
	if !r.Restore() {
		t.Fatal("Restore failed")
	}
	if ttl := rdb.PTTL(ctx, "ended").Val(); ttl < 40*time.Second {
		t.Errorf("a record Redis held: its TTL %v after another Restore, want it kept (about 55s, not 25)", ttl)
	}
}

// TestRedisIdempotencyPublishFrom: the opened records a replica claimed in
// its memory while Redis did not answer go to Redis once it does, for what
// is left of their TTL; not a pending claim, and not over a record
// another replica set meanwhile.
func TestRedisIdempotencyPublishFrom(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	clk := &clock{t: time.Unix(1_000_000, 0)}
	quiet := slog.New(slog.DiscardHandler)
	mem := NewMemIdempotency(8, clk.now)
	opened := IdemRecord{ID: "a", Digest: "d", Opened: true}
	swapThrough(t, mem, "opened", time.Minute, IdemRecord{ID: "a", Digest: "d"}, opened)
	swapThrough(t, mem, "pending", time.Minute, IdemRecord{ID: "b", Digest: "d"})
	swapThrough(t, mem, "taken", time.Minute, IdemRecord{ID: "c", Digest: "d"}, IdemRecord{ID: "c", Digest: "d", Opened: true})
	clk.add(10 * time.Second)
	other := IdemRecord{ID: "z", Digest: "d", Opened: true}
	if err := rdb.Set(ctx, "taken", other.encode(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r := NewRedisIdempotency(rdb, 8, clk.now, quiet)
	if !r.PublishFrom(mem) {
		t.Fatal("PublishFrom failed")
	}
	for key, want := range map[string]IdemRecord{"opened": opened, "pending": {}, "taken": other} {
		if got, err := decodeIdemRecord(rdb.Get(ctx, key).Val()); err != nil || got != want {
			t.Errorf("%s: %+v (%v), want %+v", key, got, err, want)
		}
	}
	if ttl := rdb.PTTL(ctx, "opened").Val(); ttl > 50*time.Second || ttl < 40*time.Second {
		t.Errorf("published for %v, want what was left of its TTL (50s)", ttl)
	}
}

// TestRedisIdempotencyFollowsWhatChanged: what a replica puts back in
// Redis (Restore, PublishFrom) follows what happened to its records
// meanwhile — a record another replica replaced is not put back; one it
// freed while Redis did not answer is freed once Redis answers; one its
// start freed while it was being published is freed in Redis too.
func TestRedisIdempotencyFollowsWhatChanged(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	quiet := slog.New(slog.DiscardHandler)
	var failing, failed atomic.Int32
	rdb.AddHook(failScripts{&failing, &failed})
	freeing := &freeWhilePublished{mem: NewMemIdempotency(8, nil)}
	rdb.AddHook(freeing)
	r := NewRedisIdempotency(rdb, 8, nil, quiet)
	rec := func(id string) IdemRecord { return IdemRecord{ID: id, Digest: "d", Opened: true} }

	swapThrough(t, r, "replaced", time.Minute, rec("a"))
	other := NewRedisIdempotency(rdb, 8, nil, quiet)
	if got, err := other.Swap(ctx, "replaced", rec("a"), rec("b"), time.Minute); err != nil || got != rec("b") { // a's log gone: b's start took the key
		t.Fatalf("replacing a's record: %+v %v", got, err)
	}
	if got, err := r.Swap(ctx, "replaced", IdemRecord{}, rec("c"), time.Minute); err != nil || got != rec("b") {
		t.Fatalf("a claim of a key another replica holds: %+v %v", got, err)
	}

	swapThrough(t, r, "freed in an outage", time.Minute, rec("d"))
	failing.Store(1)
	if _, err := r.Swap(ctx, "freed in an outage", rec("d"), IdemRecord{}, 0); err == nil {
		t.Fatal("a swap with Redis failing did not fail")
	}
	failing.Store(0)

	swapThrough(t, freeing.mem, "freed while published", time.Minute, rec("e"))
	freeing.key.Store("freed while published")
	if !r.PublishFrom(freeing.mem) {
		t.Fatal("PublishFrom failed")
	}
	for key, want := range map[string]IdemRecord{"freed in an outage": {}, "freed while published": {}} {
		if got, err := decodeIdemRecord(rdb.Get(ctx, key).Val()); err != nil || got != want {
			t.Errorf("%s after PublishFrom: %+v (%v), want %+v", key, got, err, want)
		}
	}

	if err := rdb.FlushAll(ctx).Err(); err != nil { // Redis back empty
		t.Fatal(err)
	}
	if !r.Restore() {
		t.Fatal("Restore failed")
	}
	if got, _ := decodeIdemRecord(rdb.Get(ctx, "replaced").Val()); got == rec("a") {
		t.Error("Restore put back a record another replica had replaced")
	}
}

// freeWhilePublished frees key's record in mem, as its start would, just
// before the script call that publishes it reaches Redis: between
// PublishFrom's look at mem and its swap.
type freeWhilePublished struct {
	mem *MemIdempotency
	key atomic.Value // string
}

func (h *freeWhilePublished) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *freeWhilePublished) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *freeWhilePublished) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		key, _ := h.key.Load().(string)
		if key != "" && slices.Contains(cmd.Args(), any(key)) {
			if cur, ok := h.mem.get(key); ok {
				_, _ = h.mem.Swap(ctx, key, cur.rec, IdemRecord{}, 0)
			}
		}
		return next(ctx, cmd)
	}
}

// swapThrough swaps key's record in st from none through each of steps
// in turn, for ttl, failing the test unless each swap takes.
func swapThrough(t *testing.T, st Idempotency, key string, ttl time.Duration, steps ...IdemRecord) {
	t.Helper()
	old := IdemRecord{}
	for _, s := range steps {
		if got, err := st.Swap(context.Background(), key, old, s, ttl); err != nil || got != s {
			t.Fatalf("%s: swap to %+v: %+v %v", key, s, got, err)
		}
		old = s
	}
}
