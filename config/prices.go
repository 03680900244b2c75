package config

import (
	"fmt"
	"math"

	"github.com/completiond/completiond/recovery"
)

// Prices are what a route's tokens cost, in USD per million tokens: the
// prices a provider publishes for the route's model. The zero value is a
// route without prices, whose cost is unknown (Known is false); a route
// whose tokens cost nothing (a self-hosted model) has Known set and every
// price 0. A value, never shared: copying it is all it takes to keep it
// unchanged.
type Prices struct {
	// Known says the route has prices: Cost is its cost, not a guess.
	Known bool
	// Input is the price of an uncached input token (Usage.InputTokens).
	Input float64
	// Output is the price of an output token, reasoning included.
	Output float64
	// CacheWrite is the price of an input token written to the prompt
	// cache (Usage.CacheCreationInputTokens).
	CacheWrite float64
	// CacheRead is the price of an input token read from the prompt cache
	// (Usage.CacheReadInputTokens).
	CacheRead float64
}

// MaxPrice bounds every price, in USD per million tokens: well above any
// model's list price (the dearest are in the hundreds), so that a price
// over it is a typo — per token rather than per million, or a digit too
// many — refused before it makes every cost absurd.
const MaxPrice = 10_000

// Anthropic's published multipliers of the input price: a cache write
// (5-minute cache) costs 1.25 times an uncached input token, a cache read
// 0.1 times. A route that sets input but not the cache prices gets these;
// OpenAI's cached input is typically 0.5 times input or less, so an
// OpenAI route sets cache_read itself.
const (
	CacheWriteMultiplier = 1.25
	CacheReadMultiplier  = 0.1
)

// Cost is what u costs at p, in USD: each kind of token times its price,
// per million. It is 0 for a route without prices (see Known).
func (p Prices) Cost(u recovery.Usage) float64 {
	return (float64(u.InputTokens)*p.Input + float64(u.OutputTokens)*p.Output +
		float64(u.CacheCreationInputTokens)*p.CacheWrite + float64(u.CacheReadInputTokens)*p.CacheRead) / 1e6
}

// checkPrice refuses a price that is negative, not a number, infinite or
// over MaxPrice.
func checkPrice(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxPrice {
		return fmt.Errorf("%v is not a price in USD per million tokens (0 to %d)", v, MaxPrice)
	}
	return nil
}

// FilePrices are a route's prices as the file writes them, in USD per
// million tokens; every field is optional. Unset, cache_write is 1.25
// times input and cache_read 0.1 times input (Anthropic's multipliers;
// see CacheWriteMultiplier), and the other prices are 0.
type FilePrices struct {
	// Input is the price of an uncached input token.
	Input *float64 `yaml:"input"`
	// Output is the price of an output token.
	Output *float64 `yaml:"output"`
	// CacheWrite is the price of an input token written to the cache.
	CacheWrite *float64 `yaml:"cache_write"`
	// CacheRead is the price of an input token read from the cache.
	CacheRead *float64 `yaml:"cache_read"`
}

// build checks the file's prices and gives them with their defaults;
// field names the prices section in errors. A nil section is a route
// without prices.
func (fp *FilePrices) build(field string) (Prices, error) {
	if fp == nil {
		return Prices{}, nil
	}
	p := Prices{Known: true}
	for _, f := range []struct {
		name string
		src  *float64
		dst  *float64
	}{{"input", fp.Input, &p.Input}, {"output", fp.Output, &p.Output},
		{"cache_write", fp.CacheWrite, &p.CacheWrite}, {"cache_read", fp.CacheRead, &p.CacheRead}} {
		if f.src == nil {
			continue
		}
		if err := checkPrice(*f.src); err != nil {
			return Prices{}, fmt.Errorf("%s.%s: %w", field, f.name, err)
		}
		*f.dst = *f.src
	}
	if fp.Input != nil && fp.CacheWrite == nil {
		p.CacheWrite = derived(p.Input * CacheWriteMultiplier)
	}
	if fp.Input != nil && fp.CacheRead == nil {
		p.CacheRead = derived(p.Input * CacheReadMultiplier)
	}
	return p, nil
}

// derived rounds a price derived from another to a billionth of a dollar
// per million tokens: the product of a decimal price and a multiplier is
// not the decimal the provider publishes (3 × 0.1 is 0.30000000000000004),
// and check-config would show the difference.
func derived(v float64) float64 { return math.Round(v*1e9) / 1e9 }

// AttemptCost is what attempt a cost at the prices of its route, found in
// chain by name (the completion's routes: a fallback has prices of its
// own), and whether that route has prices. An attempt's tokens are paid
// for whatever became of its output: failed and discarded attempts cost
// too.
func AttemptCost(chain []*Route, a recovery.AttemptRecord) (usd float64, known bool) {
	for _, r := range chain {
		if r.Spec.Name == a.Route.Name {
			return r.Prices.Cost(a.Usage), r.Prices.Known
		}
	}
	return 0, false
}

// TotalCost is the sum of the attempts' AttemptCost, and whether every
// attempt's route has prices; when one has none, the total counts only
// the attempts whose route has them.
func TotalCost(chain []*Route, attempts []recovery.AttemptRecord) (usd float64, known bool) {
	known = true
	for _, a := range attempts {
		c, ok := AttemptCost(chain, a)
		usd += c
		known = known && ok
	}
	return usd, known
}
