package guard

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/recovery"
)

// clusterGate is one replica's gate to the Redis Cluster of addrs.
func clusterGate(t *testing.T, addrs []string) *RedisGate {
	rdb := testkit.ServerClusterClient(t, addrs)
	log := slog.New(slog.DiscardHandler)
	h := fleet.NewHealth(rdb, 10*time.Second, log)
	t.Cleanup(h.Close)
	return NewRedisGate(rdb, h, log)
}

// TestSharedGuardOnCluster: on a Redis Cluster of three, the shared
// breakers, key limits and budgets work across replicas as on one Redis:
// each keeps its keys in one slot (a route's breaker and probe, a key's
// slots, its rate, its budget's two counters), and the reads of many
// routes at once span the nodes.
func TestSharedGuardOnCluster(t *testing.T) {
	testkit.NoLeaks(t)
	nodes := redistest.Addrs(redistest.NewCluster(t, 3))
	ga, gb := clusterGate(t, nodes), clusterGate(t, nodes)

	t.Run("breakers", func(t *testing.T) {
		a := NewFleetBreakers(config.BreakerSettings{Failures: 3, Cooldown: time.Minute}, ga)
		b := NewFleetBreakers(config.BreakerSettings{Failures: 3, Cooldown: time.Minute}, gb)
		a.shared.viewFor, b.shared.viewFor = 0, 0
		var routes []recovery.Route
		for _, name := range []string{"r", "a", "b", "c", "d", "e", "f", "g"} {
			routes = append(routes, recovery.Route{Name: name})
		}
		for range 3 {
			use(a, "r", failed(recovery.FailServer))
		}
		if got := b.Open(routes); len(got) != 1 || got[0] != "r" {
			t.Fatalf("replica B sees %v open, want [r]", got)
		}
		if _, ok := b.Allow("r"); ok {
			t.Error("replica B let a call through the circuit A opened")
		}
	})

	t.Run("key limits", func(t *testing.T) {
		a, b := NewSharedLimits(ga), NewSharedLimits(gb)
		// One start a minute after a burst of two: no slow machine refills it.
		l := config.Limits{KeyMaxConcurrent: 1, KeyRate: 1.0 / 60, KeyBurst: 2}
		release, shared, err := a.Admit("ops", l)
		if !shared || err != nil {
			t.Fatalf("A: shared %v, %v", shared, err)
		}
		var refused *Refusal
		if _, shared, err := b.Admit("ops", l); !shared || !errors.As(err, &refused) || refused.Reason != ReasonKeyConcurrency {
			t.Fatalf("B while A's completion runs: shared %v, %v; want KEY_CONCURRENCY", shared, err)
		}
		release()
		if rel, _, err := b.Admit("ops", l); err != nil {
			t.Fatalf("B after A's release: %v", err)
		} else {
			rel()
		}
		// The burst of 2 is spent (A and B's starts): the third is refused
		// on either replica.
		if _, _, err := a.Admit("ops", l); !errors.As(err, &refused) || refused.Reason != ReasonKeyRate {
			t.Fatalf("A's third start: %v, want KEY_RATE", err)
		}
	})

	t.Run("budgets", func(t *testing.T) {
		base := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
		clk := &budgetClock{t: base}
		a, b := NewBudgets(clk.now, ga), NewBudgets(clk.now, gb)
		budget := &config.Budget{USD: 1, Period: config.BudgetPeriod{Every: time.Hour}}
		a.Charge("k", budget, 1, 10)
		var ref *Refusal
		if err := b.Check("k", budget); !errors.As(err, &ref) || ref.Reason != ReasonBudgetExceeded {
			t.Fatalf("B after A spent the budget: %v, want BUDGET_EXCEEDED", err)
		}
	})
}
