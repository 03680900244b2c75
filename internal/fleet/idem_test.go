package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// idemStores are the two Idempotency implementations, each fresh.
func idemStores(t *testing.T) map[string]Idempotency {
	t.Helper()
	stores := map[string]Idempotency{"memory": NewMemIdempotency(8, nil)}
	stores["redis"] = NewRedisIdempotency(testkit.ServerRedisClient(t, redistest.Start(t)))
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
