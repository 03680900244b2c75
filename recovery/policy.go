package recovery

import (
	"errors"
	"fmt"
	"time"
)

// Policy holds every number the machine decides by, grouped by the rule set
// each part governs. It is an immutable value: DefaultPolicy gives the
// documented defaults (docs/api.md, "The recovery policy"), Check enforces the bounds each field documents, and the
// server config and a request may only tighten it (see package service).
type Policy struct {
	// Retry governs transient failures: backoff, Retry-After, fallback.
	Retry RetryPolicy
	// Truncation governs answers cut by a token limit.
	Truncation TruncationPolicy
	// Overflow governs prompts too long for the context window.
	Overflow OverflowPolicy
	// Budget governs TOKEN_BUDGET_CONTINUATION.
	Budget BudgetPolicy
	// Turns governs Session turns and stop hooks.
	Turns TurnPolicy
	// Media governs rejected images and documents.
	Media MediaPolicy
}

// RetryPolicy governs transient failures.
type RetryPolicy struct {
	// MaxRetries bounds the retries of one step on the last route of the
	// chain (10; 0 to 100).
	MaxRetries int
	// FallbackRetries bounds the retries of one step on a route that has a
	// fallback: a fallback is worth more than a long wait (3; 0 to MaxRetries).
	FallbackRetries int
	// FallbackWait bounds the waiting of one step on a route that has a
	// fallback: a retry whose wait would take the step's total over it falls
	// back instead (10 s; positive).
	FallbackWait time.Duration
	// BackoffBase is the delay of the first retry before jitter (500 ms;
	// positive, at most BackoffMax).
	BackoffBase time.Duration
	// BackoffMax caps the exponential delay (32 s; BackoffBase to 10 min).
	BackoffMax time.Duration
	// BackoffJitter is the largest jitter as a fraction of the delay (0.25;
	// 0 to 1).
	BackoffJitter float64
	// RetryAfterCeiling is the longest Retry-After the machine waits for
	// (60 s; positive). A longer one is not taken: the machine falls back,
	// or ends the completion retryable after the upstream's wait.
	RetryAfterCeiling time.Duration
	// OverloadsBeforeFallback is the number of consecutive overloads that
	// moves to the next route (3; at least 1).
	OverloadsBeforeFallback int
	// Fallback allows MODEL_FALLBACK.
	Fallback bool
}

// TruncationPolicy governs answers cut by a token limit.
type TruncationPolicy struct {
	// MaxOutputTokens is the max_tokens of a first attempt (8 000; positive).
	MaxOutputTokens int
	// EscalatedMaxOutputTokens is max_tokens after MAX_OUTPUT_TOKENS_ESCALATE
	// (64 000; at least MaxOutputTokens), capped by the route's own limit and
	// by a max_tokens CONTEXT_LIMIT_ADJUST lowered.
	EscalatedMaxOutputTokens int
	// Escalation allows MAX_OUTPUT_TOKENS_ESCALATE (once per completion).
	Escalation bool
	// MaxContinuations bounds MAX_OUTPUT_TOKENS_RECOVERY per turn (3; 0 to 20).
	MaxContinuations int
}

// OverflowPolicy governs prompts too long for the context window.
type OverflowPolicy struct {
	// Compaction allows AUTO_COMPACT, COLLAPSE_DRAIN_RETRY and
	// REACTIVE_COMPACT_RETRY.
	Compaction bool
	// MaxReactiveCompactions bounds REACTIVE_COMPACT_RETRY per turn (1; 0 to 5).
	MaxReactiveCompactions int
	// KeepRecentMessages is the tail that compaction keeps verbatim (6; at least 1).
	KeepRecentMessages int
	// CollapseMinBytes is the size above which old content is elided by a
	// collapse drain (2 000 bytes; positive).
	CollapseMinBytes int
	// OutputReserveCap caps the room reserved for the answer when the
	// blocking limit is computed (20 000; not negative).
	OutputReserveCap int
	// BlockingMargin is the extra room kept free below the window (3 000;
	// not negative).
	BlockingMargin int
	// ContextAdjustMargin is subtracted by CONTEXT_LIMIT_ADJUST (1 000; not
	// negative).
	ContextAdjustMargin int
	// MinAdjustedMaxTokens is the smallest max_tokens CONTEXT_LIMIT_ADJUST
	// will try (3 000; positive); below it the prompt counts as too long.
	MinAdjustedMaxTokens int
}

// BudgetPolicy governs TOKEN_BUDGET_CONTINUATION.
type BudgetPolicy struct {
	// Ratio is the share of the budget under which the model is nudged on
	// (0.9; above 0, at most 1).
	Ratio float64
	// DiminishingAfter is the number of nudges after which diminishing
	// returns may stop the nudging (3; not negative).
	DiminishingAfter int
	// DiminishingTokens is the output below which a nudge counts as
	// diminishing (500; not negative).
	DiminishingTokens int
}

// TurnPolicy governs Session turns and stop hooks.
type TurnPolicy struct {
	// MaxTurns bounds the turns of a Session (20; 1 to 1 000).
	MaxTurns int
	// MaxStopHookBlocks bounds STOP_HOOK_BLOCKING rounds (3; 0 to 20).
	MaxStopHookBlocks int
}

// MediaPolicy governs rejected images and documents.
type MediaPolicy struct {
	// MaxRecoveries bounds the media strip-and-retry per completion (1; 0
	// to 5). Every one counts, whichever blocks it strips: a rejection
	// naming another block than the one stripped before is a rejection
	// again, so that an upstream cannot be walked through a conversation's
	// images one retry at a time.
	MaxRecoveries int
}

// DefaultPolicy returns the documented defaults (docs/api.md, "The recovery policy").
func DefaultPolicy() Policy {
	return Policy{
		Retry: RetryPolicy{
			MaxRetries:              10,
			FallbackRetries:         3,
			FallbackWait:            10 * time.Second,
			BackoffBase:             500 * time.Millisecond,
			BackoffMax:              32 * time.Second,
			BackoffJitter:           0.25,
			RetryAfterCeiling:       60 * time.Second,
			OverloadsBeforeFallback: 3,
			Fallback:                true,
		},
		Truncation: TruncationPolicy{
			MaxOutputTokens:          8000,
			EscalatedMaxOutputTokens: 64000,
			Escalation:               true,
			MaxContinuations:         3,
		},
		Overflow: OverflowPolicy{
			Compaction:             true,
			MaxReactiveCompactions: 1,
			KeepRecentMessages:     6,
			CollapseMinBytes:       2000,
			OutputReserveCap:       20000,
			BlockingMargin:         3000,
			ContextAdjustMargin:    1000,
			MinAdjustedMaxTokens:   3000,
		},
		Budget: BudgetPolicy{Ratio: 0.9, DiminishingAfter: 3, DiminishingTokens: 500},
		Turns:  TurnPolicy{MaxTurns: 20, MaxStopHookBlocks: 3},
		Media:  MediaPolicy{MaxRecoveries: 1},
	}
}

// Check returns an error naming every field outside the bounds its doc
// comment gives, or nil.
func (p Policy) Check() error {
	var errs []error
	bad := func(ok bool, field string, v any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %v is out of bounds", field, v))
		}
	}
	r, t, o := p.Retry, p.Truncation, p.Overflow
	bad(r.MaxRetries >= 0 && r.MaxRetries <= 100, "retry.max_retries", r.MaxRetries)
	bad(r.FallbackRetries >= 0 && r.FallbackRetries <= r.MaxRetries, "retry.fallback_retries", r.FallbackRetries)
	bad(r.FallbackWait > 0, "retry.fallback_wait", r.FallbackWait)
	bad(r.BackoffBase > 0 && r.BackoffBase <= r.BackoffMax, "retry.backoff_base", r.BackoffBase)
	bad(r.BackoffMax <= 10*time.Minute, "retry.backoff_max", r.BackoffMax)
	bad(r.BackoffJitter >= 0 && r.BackoffJitter <= 1, "retry.backoff_jitter", r.BackoffJitter)
	bad(r.RetryAfterCeiling > 0, "retry.retry_after_ceiling", r.RetryAfterCeiling)
	bad(r.OverloadsBeforeFallback >= 1, "retry.overloads_before_fallback", r.OverloadsBeforeFallback)
	bad(t.MaxOutputTokens > 0, "truncation.max_output_tokens", t.MaxOutputTokens)
	bad(t.EscalatedMaxOutputTokens >= t.MaxOutputTokens, "truncation.escalated_max_output_tokens", t.EscalatedMaxOutputTokens)
	bad(t.MaxContinuations >= 0 && t.MaxContinuations <= 20, "truncation.max_continuations", t.MaxContinuations)
	bad(o.MaxReactiveCompactions >= 0 && o.MaxReactiveCompactions <= 5, "overflow.max_reactive_compactions", o.MaxReactiveCompactions)
	bad(o.KeepRecentMessages >= 1, "overflow.keep_recent_messages", o.KeepRecentMessages)
	bad(o.CollapseMinBytes > 0, "overflow.collapse_min_bytes", o.CollapseMinBytes)
	bad(o.OutputReserveCap >= 0 && o.BlockingMargin >= 0 && o.ContextAdjustMargin >= 0, "overflow margins", o)
	bad(o.MinAdjustedMaxTokens > 0, "overflow.min_adjusted_max_tokens", o.MinAdjustedMaxTokens)
	bad(p.Budget.Ratio > 0 && p.Budget.Ratio <= 1, "budget.ratio", p.Budget.Ratio)
	bad(p.Budget.DiminishingAfter >= 0 && p.Budget.DiminishingTokens >= 0, "budget diminishing", p.Budget)
	bad(p.Turns.MaxTurns >= 1 && p.Turns.MaxTurns <= 1000, "turns.max_turns", p.Turns.MaxTurns)
	bad(p.Turns.MaxStopHookBlocks >= 0 && p.Turns.MaxStopHookBlocks <= 20, "turns.max_stop_hook_blocks", p.Turns.MaxStopHookBlocks)
	bad(p.Media.MaxRecoveries >= 0 && p.Media.MaxRecoveries <= 5, "media.max_recoveries", p.Media.MaxRecoveries)
	return errors.Join(errs...)
}

// Backoff returns the wait before retry n (1-based) on a step:
// min(base·2^(n−1), max) plus jitter·u of that, with u uniform in [0, 1)
// supplied by the caller.
func (p RetryPolicy) Backoff(n int, u float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := p.BackoffMax
	if n <= 32 { // beyond this the shift overflows; the cap applies anyway
		if e := p.BackoffBase << (n - 1); e > 0 && e < p.BackoffMax {
			d = e
		}
	}
	return d + time.Duration(float64(d)*p.BackoffJitter*clamp01(u))
}

// RetryDelay returns the wait before retry n: the provider's Retry-After,
// unjittered, when it gave one; the jittered backoff otherwise. It does not
// apply RetryAfterCeiling: the machine decides what a longer wait means.
func (p RetryPolicy) RetryDelay(n int, retryAfter time.Duration, u float64) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	return p.Backoff(n, u)
}

// Budget returns the retries and the waiting one step may spend on a route:
// the full MaxRetries (and no bound on waiting but the deadline) on the last
// route, FallbackRetries and FallbackWait on a route that has a fallback.
func (p RetryPolicy) Budget(hasFallback bool) (retries int, wait time.Duration) {
	if hasFallback {
		return min(p.FallbackRetries, p.MaxRetries), p.FallbackWait
	}
	return p.MaxRetries, 0
}

// Chain returns the part of a route chain (the primary route, then its
// fallbacks, in order) that a completion under p may call: the whole
// chain, or only the primary route when p disables fallback
// (RetryPolicy.Fallback). A driver keeps per completion only the routes
// Chain returns (the routes of Config, their connections, their circuit
// breakers), so that it never reads the policy itself. A machine given
// the whole chain decides the same, for it never falls back then.
func Chain[R any](p Policy, routes []R) []R {
	if !p.Retry.Fallback && len(routes) > 1 {
		return routes[:1]
	}
	return routes
}

func clamp01(u float64) float64 {
	switch {
	case u < 0:
		return 0
	case u > 1:
		return 1
	}
	return u
}
