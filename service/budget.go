package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/driver"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/internal/telemetry"
)

// keyBudget is one completion's view of its caller's key's budget: the
// driver charges each attempt to it and checks it before each call, and
// the completion's status reads the end of the period that refused it.
// Nil when the caller's key has no budget.
type keyBudget struct {
	budgets *guard.Budgets
	key     string
	budget  *config.Budget

	mu    sync.Mutex
	until time.Time // the end of the period that refused a call; zero before
}

// keyBudget is the budget of ctx's caller, nil when it has none.
func (s *Server) keyBudget(ctx context.Context) *keyBudget {
	c, ok := callerFrom(ctx)
	if !ok || c.Budget == nil {
		return nil
	}
	return &keyBudget{budgets: s.budgets, key: c.Name, budget: c.Budget}
}

// refuse is the status of a completion its key's budget refuses at its
// start, before any upstream call: RESOURCE_EXHAUSTED, ErrorInfo
// BUDGET_EXCEEDED with the period's end, RetryInfo until then; nil when
// there is budget left. refusals counts and logs it as every refusal.
func (k *keyBudget) refuse(ctx context.Context, refusals *telemetry.Refusals) error {
	if k == nil {
		return nil
	}
	err := k.budgets.Check(k.key, k.budget)
	if err == nil {
		return nil
	}
	st := refusalStatus(err)
	method, _ := grpc.Method(ctx)
	refusals.Refused(ctx, method, guard.ReasonBudgetExceeded, k.key, status.Code(st), err.Error())
	return st
}

// driver is k as the driver's Budget, nil (no budget) when k is nil.
func (k *keyBudget) driver() driver.Budget {
	if k == nil {
		return nil
	}
	return k
}

// Charge adds an attempt's cost and tokens to the key's spend.
func (k *keyBudget) Charge(usd float64, tokens int64) { k.budgets.Charge(k.key, k.budget, usd, tokens) }

// Spent reports whether the key's budget is spent, and remembers the
// period's end for the completion's status.
func (k *keyBudget) Spent() (time.Duration, string, bool) {
	var r *guard.Refusal
	if err := k.budgets.Check(k.key, k.budget); !errors.As(err, &r) {
		return 0, "", false
	}
	k.mu.Lock()
	k.until = r.Until
	k.mu.Unlock()
	return r.RetryAfter, r.Message, true
}

// end is the end of the period that refused a call, zero when none did.
func (k *keyBudget) end() time.Time {
	if k == nil {
		return time.Time{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.until
}
