package guard

import (
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// budgetClock is a settable clock.
type budgetClock struct{ t time.Time }

func (c *budgetClock) now() time.Time { return c.t }

func TestBudgetsLocal(t *testing.T) {
	day := config.BudgetPeriod{Calendar: "day"}
	for _, tc := range []struct {
		name    string
		budget  *config.Budget
		charges [][2]float64 // usd, tokens
		refused bool
	}{
		{"no budget", nil, [][2]float64{{100, 1e9}}, false},
		{"under usd", &config.Budget{USD: 1, Period: day}, [][2]float64{{0.4, 10}, {0.5, 10}}, false},
		{"at usd", &config.Budget{USD: 1, Period: day}, [][2]float64{{0.5, 0}, {0.5, 0}}, true},
		{"over usd", &config.Budget{USD: 1, Period: day}, [][2]float64{{2.5, 0}}, true},
		{"unpriced tokens count", &config.Budget{USD: 1, Tokens: 100, Period: day}, [][2]float64{{0, 60}, {0, 40}}, true},
		{"under tokens", &config.Budget{Tokens: 100, Period: day}, [][2]float64{{5, 99}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &budgetClock{t: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)}
			bs := NewBudgets(clk.now, nil)
			if err := bs.Check("k", tc.budget); err != nil {
				t.Fatalf("refused before any spend: %v", err)
			}
			for _, c := range tc.charges {
				bs.Charge("k", tc.budget, c[0], int64(c[1]))
			}
			if err := bs.Check("other", tc.budget); err != nil {
				t.Errorf("another key refused: %v", err)
			}
			err := bs.Check("k", tc.budget)
			if (err != nil) != tc.refused {
				t.Fatalf("refused %v, want %v", err, tc.refused)
			}
			if err == nil {
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Reason != ReasonBudgetExceeded {
				t.Fatalf("refusal %#v", err)
			}
			end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
			if !r.Until.Equal(end) || r.RetryAfter != 16*time.Hour {
				t.Errorf("until %v retry after %v, want %v, 16h", r.Until, r.RetryAfter, end)
			}
			// The next period starts from zero.
			clk.t = end
			if err := bs.Check("k", tc.budget); err != nil {
				t.Errorf("refused in the next period: %v", err)
			}
		})
	}
}

func TestBudgetKeyNamesNoKey(t *testing.T) {
	start := time.Unix(1764288000, 0)
	k := budgetSpendKey("team-secret-name", start)
	if strings.Contains(k, "team-secret-name") || !strings.Contains(k, "{") || !strings.HasSuffix(k, ":1764288000:spend") {
		t.Errorf("key %q", k)
	}
	if a, b := budgetSpendKey("x", start), budgetSpendKey("x", start.Add(time.Hour)); a[:strings.Index(a, "}")] != b[:strings.Index(b, "}")] {
		t.Errorf("%q and %q, a key's periods, are not hash-tagged alike", a, b)
	}
}

func TestSharedBudgetSpentOnOneReplicaRefusesOnAnother(t *testing.T) {
	testkit.NoLeaks(t)
	addr := redistest.Start(t)
	// The counters expire at an absolute time Redis measures with its own
	// clock: the test's clock starts at the next hour of the real one.
	base := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	clk := &budgetClock{t: base}
	a, b := NewBudgets(clk.now, gate(t, addr)), NewBudgets(clk.now, gate(t, addr))
	budget := &config.Budget{USD: 1, Tokens: 1000, Period: config.BudgetPeriod{Every: time.Hour}}
	a.Charge("k", budget, 0.6, 100)
	if err := b.Check("k", budget); err != nil {
		t.Fatalf("refused under budget: %v", err)
	}
	b.Charge("k", budget, 0.4, 100)
	for i, r := range []*Budgets{a, b} {
		var ref *Refusal
		if err := r.Check("k", budget); !errors.As(err, &ref) || ref.Reason != ReasonBudgetExceeded {
			t.Errorf("replica %d: %v, want BUDGET_EXCEEDED", i, err)
		} else if want := base.Add(time.Hour); !ref.Until.Equal(want) {
			t.Errorf("replica %d: until %v, want %v", i, ref.Until, want)
		}
	}
	rdb := testkit.RedisClient(t, addr)
	start, end := budget.Period.Bounds(clk.t)
	ttl, err := rdb.ExpireTime(t.Context(), budgetSpendKey("k", start)).Result()
	if err != nil || time.Unix(int64(ttl/time.Second), 0).Before(end) {
		t.Errorf("the spend expires at %v (%v), want after %v", ttl, err, end)
	}
	// Tokens alone, on a route without prices.
	tokens := &config.Budget{Tokens: 500, Period: config.BudgetPeriod{Calendar: "day"}}
	a.Charge("t", tokens, 0, 499)
	if err := b.Check("t", tokens); err != nil {
		t.Errorf("refused at 499 of 500 tokens: %v", err)
	}
	a.Charge("t", tokens, 0, 1)
	if err := b.Check("t", tokens); err == nil {
		t.Errorf("not refused at 500 of 500 tokens")
	}
}

// switchHealth is a guard.Health whose answer the test sets.
type switchHealth struct{ up atomic.Bool }

func (h *switchHealth) Up() bool       { return h.up.Load() }
func (h *switchHealth) Failed(_ error) { h.up.Store(false) }

// TestSharedBudgetCountsWhatRedisMissed: what a replica charges while
// Redis does not answer counts fleet-wide once it publishes its spend
// again (Redis answers again), and so does everything it charged when
// Redis comes back empty; a replica's own count is written whole, so
// publishing it twice counts it once, and its charges out of order never
// lower it. A new process of a replica (another Budgets) adds its own
// count to its predecessor's rather than writing over it.
func TestSharedBudgetCountsWhatRedisMissed(t *testing.T) {
	addr := redistest.Start(t)
	rdb := testkit.RedisClient(t, addr)
	base := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	clk := &budgetClock{t: base}
	log := slog.New(slog.DiscardHandler)
	ha, hb := &switchHealth{}, &switchHealth{}
	hb.up.Store(true)
	a := NewBudgets(clk.now, NewRedisGate(rdb, ha, log)) // Redis away for a
	b := NewBudgets(clk.now, NewRedisGate(rdb, hb, log))
	budget := &config.Budget{USD: 1, Tokens: 1000, Period: config.BudgetPeriod{Every: time.Hour}}
	spent := func(want float64, wantTokens int64) {
		t.Helper()
		usd, tokens, ok := b.sharedSpend("k", base)
		if !ok || math.Abs(usd-want) > 1e-9 || tokens != wantTokens {
			t.Fatalf("the fleet's spend: %v USD, %d tokens (%t); want %v, %d", usd, tokens, ok, want, wantTokens)
		}
	}
	a.Charge("k", budget, 0.25, 100)
	b.Charge("k", budget, 0.25, 100)
	spent(0.25, 100)
	ha.up.Store(true) // Redis answers a again
	for range 2 {     // twice: counted once
		if !a.Publish() {
			t.Fatal("Publish failed")
		}
	}
	spent(0.5, 200)
	a.Charge("k", budget, 0.25, 100)
	spent(0.75, 300)
	if err := rdb.FlushAll(t.Context()).Err(); err != nil { // Redis back empty
		t.Fatal(err)
	}
	spent(0, 0)
	if !a.Publish() || !b.Publish() {
		t.Fatal("Publish failed")
	}
	spent(0.75, 300)
	if err := b.write("k", periodSpend{start: base, end: base.Add(time.Hour), usd: 0.1, tokens: 10}); err != nil {
		t.Fatal(err)
	}
	spent(0.75, 300) // a write of b's older count lowers nothing
	restarted := NewBudgets(clk.now, NewRedisGate(rdb, hb, log))
	restarted.Charge("k", budget, 0.25, 100)
	spent(1, 400)
	if err := b.Check("k", budget); err == nil {
		t.Error("not refused at 1 USD of 1")
	}
	clk.t = base.Add(time.Hour)
	if !a.Publish() {
		t.Fatal("Publish failed")
	}
	if n := rdb.Exists(t.Context(), budgetSpendKey("k", base.Add(time.Hour))).Val(); n != 0 {
		t.Error("a spend of a past period published into the current one")
	}
}
