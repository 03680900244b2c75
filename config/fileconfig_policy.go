package config

import (
	"bytes"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/completiond/completiond/recovery"
)

// filePolicy is the `policy:` section of the configuration file: the
// server's recovery policy, field by field (recovery.Policy documents every
// default and bound). Each sub-policy has exactly the fields of its
// recovery counterpart, so the two convert into each other; durations are
// written like "500ms" or "1m". Unset fields keep their defaults, and
// requests may only tighten the result.
type filePolicy struct {
	Retry      fileRetryPolicy      `yaml:"retry"`
	Truncation fileTruncationPolicy `yaml:"truncation"`
	Overflow   fileOverflowPolicy   `yaml:"overflow"`
	Budget     fileBudgetPolicy     `yaml:"budget"`
	Turns      fileTurnPolicy       `yaml:"turns"`
	Media      fileMediaPolicy      `yaml:"media"`
}

type fileRetryPolicy struct {
	MaxRetries              int           `yaml:"max_retries"`
	FallbackRetries         int           `yaml:"fallback_retries"`
	FallbackWait            time.Duration `yaml:"fallback_wait"`
	BackoffBase             time.Duration `yaml:"backoff_base"`
	BackoffMax              time.Duration `yaml:"backoff_max"`
	BackoffJitter           float64       `yaml:"backoff_jitter"`
	RetryAfterCeiling       time.Duration `yaml:"retry_after_ceiling"`
	OverloadsBeforeFallback int           `yaml:"overloads_before_fallback"`
	Fallback                bool          `yaml:"fallback"`
}

type fileTruncationPolicy struct {
	MaxOutputTokens          int  `yaml:"max_output_tokens"`
	EscalatedMaxOutputTokens int  `yaml:"escalated_max_output_tokens"`
	Escalation               bool `yaml:"escalation"`
	MaxContinuations         int  `yaml:"max_continuations"`
}

type fileOverflowPolicy struct {
	Compaction             bool `yaml:"compaction"`
	MaxReactiveCompactions int  `yaml:"max_reactive_compactions"`
	KeepRecentMessages     int  `yaml:"keep_recent_messages"`
	CollapseMinBytes       int  `yaml:"collapse_min_bytes"`
	OutputReserveCap       int  `yaml:"output_reserve_cap"`
	BlockingMargin         int  `yaml:"blocking_margin"`
	ContextAdjustMargin    int  `yaml:"context_adjust_margin"`
	MinAdjustedMaxTokens   int  `yaml:"min_adjusted_max_tokens"`
}

type fileBudgetPolicy struct {
	Ratio             float64 `yaml:"ratio"`
	DiminishingAfter  int     `yaml:"diminishing_after"`
	DiminishingTokens int     `yaml:"diminishing_tokens"`
}

type fileTurnPolicy struct {
	MaxTurns          int `yaml:"max_turns"`
	MaxStopHookBlocks int `yaml:"max_stop_hook_blocks"`
}

type fileMediaPolicy struct {
	MaxRecoveries int `yaml:"max_recoveries"`
}

// applyPolicy decodes the `policy:` section over base's policy and checks
// the result against the documented bounds; an error names the field.
func applyPolicy(node *yaml.Node, base recovery.Policy) (recovery.Policy, error) {
	if node == nil || node.Kind == 0 {
		return base, nil
	}
	if base == (recovery.Policy{}) {
		base = recovery.DefaultPolicy()
	}
	fp := filePolicy{
		Retry: fileRetryPolicy(base.Retry), Truncation: fileTruncationPolicy(base.Truncation),
		Overflow: fileOverflowPolicy(base.Overflow), Budget: fileBudgetPolicy(base.Budget),
		Turns: fileTurnPolicy(base.Turns), Media: fileMediaPolicy(base.Media),
	}
	// Node.Decode knows no KnownFields: re-encode, so that a misspelt field
	// is an error rather than a default silently kept.
	raw, err := yaml.Marshal(node)
	if err != nil {
		return base, fmt.Errorf("policy: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&fp); err != nil {
		return base, fmt.Errorf("policy: %w", err)
	}
	p := recovery.Policy{
		Retry: recovery.RetryPolicy(fp.Retry), Truncation: recovery.TruncationPolicy(fp.Truncation),
		Overflow: recovery.OverflowPolicy(fp.Overflow), Budget: recovery.BudgetPolicy(fp.Budget),
		Turns: recovery.TurnPolicy(fp.Turns), Media: recovery.MediaPolicy(fp.Media),
	}
	if err := p.Check(); err != nil {
		return base, fmt.Errorf("policy: %w", err)
	}
	return p, nil
}
