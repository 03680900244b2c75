package guard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/completiond/completiond/config"
)

// ReasonBudgetExceeded: the caller's key spent its budget for the period.
const ReasonBudgetExceeded = "BUDGET_EXCEEDED"

// Budgets account what each key spends per budget period (config.Budget):
// the cost and the tokens of its attempts, charged as each attempt ends.
// With Config.Redis the spend is the fleet's: each replica writes what it
// charged in a period whole, in fields of its own of the key's hash for
// the period (budgetSpendKey, lua/budget_charge.lua), and the fleet's is
// their sum (lua/budget_spend.lua); while Redis cannot answer, each
// replica checks its own spend, which it always keeps, and writes it to
// Redis again once Redis answers (Publish), so that what it charged
// meanwhile counts fleet-wide, even in a Redis that came back empty.
type Budgets struct {
	now func() time.Time
	g   *RedisGate
	// usdField and tokensField name this process's fields in the hashes
	// of spend: an id of its own, so that a replica that restarts never
	// writes its count, from zero, over the one its predecessor wrote.
	usdField, tokensField string

	mu    sync.Mutex
	spent map[string]*periodSpend // by key name: the current period only
}

// periodSpend is one key's local spend in the period from start to end.
type periodSpend struct {
	start, end time.Time
	usd        float64
	tokens     int64
}

// NewBudgets returns the budgets, read by now and shared through g when it
// is not nil.
func NewBudgets(now func() time.Time, g *RedisGate) *Budgets {
	id := randomToken()[:16]
	return &Budgets{now: now, g: g, usdField: id + ":usd", tokensField: id + ":tokens", spent: map[string]*periodSpend{}}
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
		s = &periodSpend{start: start, end: end}
		bs.spent[key] = s
	}
	s.usd += max(usd, 0)
	s.tokens += max(tokens, 0)
	whole := *s
	bs.mu.Unlock()
	if bs.g.usable() {
		bs.g.observe("budget charge", bs.write(key, whole))
	}
}

// write writes s, this replica's whole spend of key in its period, to
// Redis (lua/budget_charge.lua): the hash outlives the period by
// budgetKeyGrace.
func (bs *Budgets) write(key string, s periodSpend) error {
	ctx, cancel := bs.g.ctx()
	defer cancel()
	return budgetChargeScript.Run(ctx, bs.g.rdb, budgetSpendKey(key, s.start), bs.usdField, s.usd, bs.tokensField, s.tokens,
		s.end.Add(budgetKeyGrace).UnixMilli()).Err()
}

// Publish writes this replica's spend of every key in its current period
// to Redis again: what it charged while Redis did not answer, or what a
// Redis that came back empty lost. It answers false when Redis failed a
// write (to be tried again): a watcher of Redis's health (fleet.Health's
// WatchBack and WatchReplaced, which call it again after each PING that
// finds Redis up until it is done).
func (bs *Budgets) Publish() (done bool) {
	if bs == nil || bs.g == nil {
		return true
	}
	now := bs.now()
	bs.mu.Lock()
	spends := make(map[string]periodSpend, len(bs.spent))
	for key, s := range bs.spent {
		if now.Before(s.end) {
			spends[key] = *s
		}
	}
	bs.mu.Unlock()
	for key, s := range spends {
		if err := bs.write(key, s); err != nil {
			// Not observed (Health.Failed): Publish runs among Health's
			// watchers, which call it again at their next PING that finds
			// Redis up; the next charge of a key writes its count whole
			// meanwhile.
			bs.g.log.Warn("redis: could not write this replica's budget spends again: tried again at the next PING that finds Redis up, or with each key's next charge", "error", err)
			return false
		}
	}
	return true
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
	vals, err := budgetSpendScript.Run(ctx, bs.g.rdb, budgetSpendKey(key, start)).StringSlice()
	if bs.g.observe("budget read", err) != nil {
		return 0, 0, false
	}
	if len(vals) == 2 {
		usd, _ = strconv.ParseFloat(vals[0], 64)
		tokens, _ = strconv.ParseInt(vals[1], 10, 64)
	}
	return usd, tokens, true
}

// budgetKeyGrace is how long a period's spend outlives its end, so that a
// replica whose clock lags a little still finds it.
const budgetKeyGrace = time.Hour

// budgetSpendKey names the hash of key's spend in the period from start:
// completiond:budget:{<digest>}:<start, Unix seconds>:spend, a field per
// replica process and measure (<id>:usd, <id>:tokens). The key's name
// appears only as a digest; the braces hash-tag a key's hashes of every
// period to one cluster slot.
func budgetSpendKey(key string, start time.Time) string {
	sum := sha256.Sum256([]byte(key))
	return "completiond:budget:{" + hex.EncodeToString(sum[:16]) + "}:" + strconv.FormatInt(start.Unix(), 10) + ":spend"
}

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
