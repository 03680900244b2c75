package guard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/redis/go-redis/v9"
)

// ReasonBudgetExceeded: the caller's key spent its budget for the period.
const ReasonBudgetExceeded = "BUDGET_EXCEEDED"

// Budgets account what each key spends per budget period (config.Budget):
// the cost and the tokens of its attempts, charged as each attempt ends.
// With Config.Redis the spend is the fleet's, in counters every replica
// adds to (budgetUSDKey, budgetTokensKey); while Redis cannot answer, each
// replica checks its own spend, which it always keeps as well.
type Budgets struct {
	now func() time.Time
	g   *RedisGate

	mu    sync.Mutex
	spent map[string]*periodSpend // by key name: the current period only
}

// periodSpend is one key's local spend in the period that starts at start.
type periodSpend struct {
	start  time.Time
	usd    float64
	tokens int64
}

// NewBudgets returns the budgets, read by now and shared through g when it
// is not nil.
func NewBudgets(now func() time.Time, g *RedisGate) *Budgets {
	return &Budgets{now: now, g: g, spent: map[string]*periodSpend{}}
}

// Check refuses key, with a *Refusal, when its spend in the current period
// is at or over b; nil when b is nil or there is budget left.
func (bs *Budgets) Check(key string, b *config.Budget) error {
	if bs == nil || b == nil {
		return nil
	}
	now := bs.now()
	start, end := b.Period.Bounds(now)
	usd, tokens, ok := bs.sharedSpend(key, start)
	if !ok {
		usd, tokens = bs.localSpend(key, start)
	}
	if !b.Over(usd, tokens) {
		return nil
	}
	return budgetRefusal(key, b, end, end.Sub(now))
}

// Charge adds an attempt's cost in USD and its input plus output tokens
// to key's spend in the current period of b; nothing when b is nil.
func (bs *Budgets) Charge(key string, b *config.Budget, usd float64, tokens int64) {
	if bs == nil || b == nil || (usd <= 0 && tokens <= 0) {
		return
	}
	start, end := b.Period.Bounds(bs.now())
	bs.mu.Lock()
	s := bs.spent[key]
	if s == nil || !s.start.Equal(start) {
		s = &periodSpend{start: start}
		bs.spent[key] = s
	}
	s.usd += max(usd, 0)
	s.tokens += max(tokens, 0)
	bs.mu.Unlock()
	if !bs.g.usable() {
		return
	}
	ctx, cancel := bs.g.ctx()
	defer cancel()
	expire := end.Add(budgetKeyGrace)
	uk, tk := budgetUSDKey(key, start), budgetTokensKey(key, start)
	_, err := bs.g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if usd > 0 {
			p.IncrByFloat(ctx, uk, usd)
			p.ExpireAt(ctx, uk, expire)
		}
		if tokens > 0 {
			p.IncrBy(ctx, tk, tokens)
			p.ExpireAt(ctx, tk, expire)
		}
		return nil
	})
	bs.g.observe("budget charge", err)
}

// localSpend is this replica's spend of key in the period from start.
func (bs *Budgets) localSpend(key string, start time.Time) (float64, int64) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if s := bs.spent[key]; s != nil && s.start.Equal(start) {
		return s.usd, s.tokens
	}
	return 0, 0
}

// sharedSpend is the fleet's spend of key in the period from start; ok is
// false when Redis is not used or did not answer.
func (bs *Budgets) sharedSpend(key string, start time.Time) (usd float64, tokens int64, ok bool) {
	if !bs.g.usable() {
		return 0, 0, false
	}
	ctx, cancel := bs.g.ctx()
	defer cancel()
	vals, err := bs.g.rdb.MGet(ctx, budgetUSDKey(key, start), budgetTokensKey(key, start)).Result()
	if bs.g.observe("budget read", err) != nil {
		return 0, 0, false
	}
	if s, _ := vals[0].(string); s != "" {
		usd, _ = strconv.ParseFloat(s, 64)
	}
	if s, _ := vals[1].(string); s != "" {
		tokens, _ = strconv.ParseInt(s, 10, 64)
	}
	return usd, tokens, true
}

// budgetKeyGrace is how long a period's counters outlive its end, so that
// a replica whose clock lags a little still finds them.
const budgetKeyGrace = time.Hour

// budgetKey names a counter of key's spend in the period from start:
// completiond:budget:{<digest>}:<start, Unix seconds>:<what>. The key's
// name appears only as a digest; the braces hash-tag a key's counters of
// every period to one cluster slot, so that one transaction adds to both.
func budgetKey(key string, start time.Time, what string) string {
	sum := sha256.Sum256([]byte(key))
	return "completiond:budget:{" + hex.EncodeToString(sum[:16]) + "}:" + strconv.FormatInt(start.Unix(), 10) + ":" + what
}

func budgetUSDKey(key string, start time.Time) string    { return budgetKey(key, start, "usd") }
func budgetTokensKey(key string, start time.Time) string { return budgetKey(key, start, "tokens") }

// budgetRefusal refuses key, over b, until the period's end, retryAfter
// from now.
func budgetRefusal(key string, b *config.Budget, end time.Time, retryAfter time.Duration) *Refusal {
	var limits string
	switch {
	case b.USD > 0 && b.Tokens > 0:
		limits = fmt.Sprintf("%g USD or %d tokens", b.USD, b.Tokens)
	case b.USD > 0:
		limits = fmt.Sprintf("%g USD", b.USD)
	default:
		limits = fmt.Sprintf("%d tokens", b.Tokens)
	}
	return &Refusal{Reason: ReasonBudgetExceeded, Key: key, RetryAfter: retryAfter, Until: end,
		Message: fmt.Sprintf("the key's budget of %s per %s is spent until %s", limits, b.Period, end.UTC().Format(time.RFC3339))}
}
