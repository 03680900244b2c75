package guard

import (
	"errors"
	"strings"
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
	k := budgetUSDKey("team-secret-name", start)
	if strings.Contains(k, "team-secret-name") || !strings.Contains(k, "{") || !strings.HasSuffix(k, ":1764288000:usd") {
		t.Errorf("key %q", k)
	}
	if a, b := budgetUSDKey("x", start), budgetTokensKey("x", start); a[:strings.Index(a, "}")] != b[:strings.Index(b, "}")] {
		t.Errorf("%q and %q are not hash-tagged alike", a, b)
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
	ttl, err := rdb.ExpireTime(t.Context(), budgetUSDKey("k", start)).Result()
	if err != nil || time.Unix(int64(ttl/time.Second), 0).Before(end) {
		t.Errorf("the counter expires at %v (%v), want after %v", ttl, err, end)
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
