package service

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// tighten applies a request's policy overrides to the server's policy. An
// override may only move in the safe direction: counts, budgets and ceilings
// down (a caller may give up sooner), backoff up (a caller cannot make the
// service hammer an upstream). Anything else is a violation naming the
// field. maxTurns is SessionStart.max_turns (0 when unset).
func (c *Config) tighten(p *completionv1.Policy, maxTurns int32) (recovery.Policy, violations) {
	out, v := c.Policy, violations{}
	if p == nil {
		p = &completionv1.Policy{}
	}
	r := &out.Retry
	atMost(&v, "policy.max_retries", p.MaxRetries, 0, r.MaxRetries, &r.MaxRetries)
	atMost(&v, "policy.fallback_retries", p.FallbackRetries, 0, r.FallbackRetries, &r.FallbackRetries)
	atMost(&v, "policy.overloads_before_fallback", p.OverloadsBeforeFallback, 1, r.OverloadsBeforeFallback, &r.OverloadsBeforeFallback)
	atMost(&v, "policy.max_continuations", p.MaxContinuations, 0, out.Truncation.MaxContinuations, &out.Truncation.MaxContinuations)
	atMost(&v, "policy.max_turns", p.MaxTurns, 1, out.Turns.MaxTurns, &out.Turns.MaxTurns)
	atMost(&v, "policy.max_stop_hook_blocks", p.MaxStopHookBlocks, 0, out.Turns.MaxStopHookBlocks, &out.Turns.MaxStopHookBlocks)
	if maxTurns != 0 {
		atMost(&v, "max_turns", &maxTurns, 1, out.Turns.MaxTurns, &out.Turns.MaxTurns)
	}
	durationWithin(&v, "policy.fallback_wait", p.GetFallbackWait(), time.Millisecond, r.FallbackWait, &r.FallbackWait)
	durationWithin(&v, "policy.retry_after_ceiling", p.GetRetryAfterCeiling(), time.Millisecond, r.RetryAfterCeiling, &r.RetryAfterCeiling)
	durationWithin(&v, "policy.backoff_max", p.GetBackoffMax(), r.BackoffMax, max(r.BackoffMax, r.RetryAfterCeiling), &r.BackoffMax)
	durationWithin(&v, "policy.backoff_base", p.GetBackoffBase(), r.BackoffBase, r.BackoffMax, &r.BackoffBase)
	r.MaxRetries = max(r.MaxRetries, 0)
	r.FallbackRetries = min(r.FallbackRetries, r.MaxRetries)
	out.Truncation.Escalation = out.Truncation.Escalation && !p.GetDisableEscalation()
	out.Overflow.Compaction = out.Overflow.Compaction && !p.GetDisableCompaction()
	r.Fallback = r.Fallback && !p.GetDisableFallback()
	return out, v
}

// atMost sets *dst to *val when val is set and within [lo, limit].
func atMost(v *violations, field string, val *int32, lo, limit int, dst *int) {
	if val == nil {
		return
	}
	if n := int(*val); n < lo || n > limit {
		v.add(field, "must be between %d and the server's limit %d, got %d", lo, limit, n)
		return
	}
	*dst = int(*val)
}

// durationWithin sets *dst to d when d is set, valid and within [lo, hi].
func durationWithin(v *violations, field string, d *durationpb.Duration, lo, hi time.Duration, dst *time.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil {
		v.add(field, "%v", err)
		return
	}
	if x := d.AsDuration(); x < lo || x > hi {
		v.add(field, "must be between %s and %s (the server's bounds), got %s", lo, hi, x)
		return
	}
	*dst = d.AsDuration()
}
