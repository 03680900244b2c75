package config

import (
	"fmt"
	"math"
	"time"
)

// Budget bounds what one API key may spend in a period: USD, the sum of its
// attempts' costs at their routes' prices (an unpriced route's attempts
// cost 0 USD), and Tokens, the sum of its attempts' input and output
// tokens (on every route, priced or not). A zero limit is no limit on that
// measure; a Budget sets at least one. A key at or over either limit is
// refused new completions, and its running ones end before their next
// call, until the period ends.
type Budget struct {
	// USD is the limit in US dollars; 0 is none.
	USD float64
	// Tokens is the limit on input plus output tokens; 0 is none.
	Tokens int64
	// Period is how often the spend starts again from zero.
	Period BudgetPeriod
}

// The bounds of a Budget: a limit past them is a mistake in the file.
const (
	// MaxBudgetUSD bounds Budget.USD.
	MaxBudgetUSD = 1e9
	// MaxBudgetTokens bounds Budget.Tokens.
	MaxBudgetTokens = 1e15
	// MinBudgetPeriod and MaxBudgetPeriod bound a period given as a duration.
	MinBudgetPeriod = time.Minute
	MaxBudgetPeriod = 366 * 24 * time.Hour
)

// BudgetPeriod is a budget's period: a UTC calendar day, week or month, or
// a fixed duration.
type BudgetPeriod struct {
	// Calendar is "day", "week" or "month", or "" for Every.
	Calendar string
	// Every is the length of a fixed period when Calendar is "".
	Every time.Duration
}

// String is the period as the configuration writes it.
func (p BudgetPeriod) String() string {
	if p.Calendar != "" {
		return p.Calendar
	}
	return p.Every.String()
}

// Bounds returns the period that holds t: its start and its end. Calendar
// periods are aligned to UTC: a day starts at 00:00 UTC, a week on Monday
// at 00:00 UTC (ISO 8601), a month on its first day at 00:00 UTC. A fixed
// duration's periods are the multiples of it since the Unix epoch
// (1970-01-01T00:00:00Z), so that 24h is the UTC day and every replica
// agrees on them.
func (p BudgetPeriod) Bounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	switch p.Calendar {
	case "day":
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	case "week":
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 7)
	case "month":
		start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	every := p.Every
	if every <= 0 {
		every = 24 * time.Hour
	}
	n := t.UnixNano()
	k := n / int64(every)
	if n < 0 && n%int64(every) != 0 {
		k--
	}
	start = time.Unix(0, k*int64(every)).UTC()
	return start, start.Add(every)
}

// ParseBudgetPeriod reads day, week, month or a Go duration between
// MinBudgetPeriod and MaxBudgetPeriod.
func ParseBudgetPeriod(s string) (BudgetPeriod, error) {
	switch s {
	case "day", "week", "month":
		return BudgetPeriod{Calendar: s}, nil
	case "":
		return BudgetPeriod{}, fmt.Errorf("required: day, week, month or a duration such as 24h")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return BudgetPeriod{}, fmt.Errorf("%q: want day, week, month or a duration such as 24h", s)
	}
	if d < MinBudgetPeriod || d > MaxBudgetPeriod {
		return BudgetPeriod{}, fmt.Errorf("%s: want a duration from %v to %v", s, MinBudgetPeriod, MaxBudgetPeriod)
	}
	return BudgetPeriod{Every: d}, nil
}

// FileBudget declares a key's budget: budget: {usd: 50, tokens: 10000000,
// period: month}.
type FileBudget struct {
	// USD is Budget.USD.
	USD *float64 `yaml:"usd"`
	// Tokens is Budget.Tokens.
	Tokens *float64 `yaml:"tokens"`
	// Period is day, week, month or a Go duration such as 24h.
	Period string `yaml:"period"`
}

// build checks the budget and returns it; errors name field's members. A
// limit of zero is refused: to stop a key, remove it.
func (fb *FileBudget) build(field string) (*Budget, error) {
	b := &Budget{}
	if fb.USD == nil && fb.Tokens == nil {
		return nil, fmt.Errorf("%s: set usd, tokens or both", field)
	}
	if u := fb.USD; u != nil {
		if math.IsNaN(*u) || *u <= 0 || *u > MaxBudgetUSD {
			return nil, fmt.Errorf("%s.usd: %v is not a limit: want more than 0 and at most %g (to stop a key, remove it)", field, *u, float64(MaxBudgetUSD))
		}
		b.USD = *u
	}
	if t := fb.Tokens; t != nil {
		if math.IsNaN(*t) || *t < 1 || *t > MaxBudgetTokens || *t != math.Trunc(*t) {
			return nil, fmt.Errorf("%s.tokens: %v is not a limit: want a whole number from 1 to %g (to stop a key, remove it)", field, *t, float64(MaxBudgetTokens))
		}
		b.Tokens = int64(*t)
	}
	p, err := ParseBudgetPeriod(fb.Period)
	if err != nil {
		return nil, fmt.Errorf("%s.period: %w", field, err)
	}
	b.Period = p
	return b, nil
}

// Over reports whether spend (usd, tokens) is at or over the budget.
func (b *Budget) Over(usd float64, tokens int64) bool {
	return (b.USD > 0 && usd >= b.USD) || (b.Tokens > 0 && tokens >= b.Tokens)
}
