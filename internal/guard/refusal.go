package guard

import (
	"fmt"
	"time"
)

// The reasons of a Refusal: the ErrorInfo reason the caller reads.
const (
	// ReasonOverloaded: the server runs as many completions as it may.
	ReasonOverloaded = "OVERLOADED"
	// ReasonKeyConcurrency: the caller's key runs as many completions as it may.
	ReasonKeyConcurrency = "KEY_CONCURRENCY"
	// ReasonKeyRate: the caller's key started completions faster than its rate.
	ReasonKeyRate = "KEY_RATE"
)

// ShedRetryDelay is the RetryInfo of a completion refused because too many
// run (the server's or the key's): about how long a short one takes.
const ShedRetryDelay = time.Second

// Refusal is a limit's "no": why (Reason), whose key (Key, "" for the
// server's own limits), when a retry may succeed (RetryAfter) and what the
// caller is told. The gRPC layer maps it to a status in one place.
type Refusal struct {
	Reason     string
	Key        string
	RetryAfter time.Duration
	Message    string
	// Spacing is how far apart two callers refused alike should come
	// back for both to succeed: the limit's time for one more call
	// (Waiting.Spread spreads RetryAfter by it).
	Spacing time.Duration
	// Until, for ReasonBudgetExceeded, is the end of the budget's period:
	// when the key may spend again.
	Until time.Time
}

// Error is the refusal's message.
func (r *Refusal) Error() string { return r.Message }

// concurrencyRefusal refuses one more completion of key, which runs running.
func concurrencyRefusal(key string, running int) *Refusal {
	return &Refusal{Reason: ReasonKeyConcurrency, Key: key, RetryAfter: ShedRetryDelay,
		Spacing: ShedRetryDelay / time.Duration(max(running, 1)),
		Message: fmt.Sprintf("key %q runs %d completions, its limit", key, running)}
}

// rateRefusal refuses a start of key over its rate; a token is due after due.
func rateRefusal(key string, rate float64, due time.Duration) *Refusal {
	return &Refusal{Reason: ReasonKeyRate, Key: key, RetryAfter: due, Spacing: RateSpacing(rate),
		Message: fmt.Sprintf("key %q exceeds its rate of %g completions per second", key, rate)}
}

// RateSpacing is the time between two tokens of rate per second.
func RateSpacing(rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / rate)
}
