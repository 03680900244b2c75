package config

import (
	"math"
	"strings"
	"testing"

	"github.com/completiond/completiond/recovery"
)

// pricesFile is a configuration of one openai route "a" with the given
// prices section.
func pricesFile(prices string) string {
	return "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, prices: " + prices + "}\n"
}

func TestPricesFromTheFile(t *testing.T) {
	// The derived cache prices are the published decimals (0.3, not the
	// float product 0.30000000000000004): compared exactly.
	for _, tc := range []struct {
		name, prices string
		want         Prices
	}{
		{"all four", "{input: 3, output: 15, cache_write: 3.75, cache_read: 0.3}",
			Prices{Known: true, Input: 3, Output: 15, CacheWrite: 3.75, CacheRead: 0.3}},
		{"cache prices from input", "{input: 3, output: 15}",
			Prices{Known: true, Input: 3, Output: 15, CacheWrite: 3.75, CacheRead: 0.3}},
		{"cache_read set, cache_write from input", "{input: 2, output: 8, cache_read: 0.5}",
			Prices{Known: true, Input: 2, Output: 8, CacheWrite: 2.5, CacheRead: 0.5}},
		{"a cache price of 0 is kept", "{input: 2, cache_write: 0, cache_read: 0}", Prices{Known: true, Input: 2}},
		{"output only: no input to derive from", "{output: 1}", Prices{Known: true, Output: 1}},
		{"empty: known to cost nothing", "{}", Prices{Known: true}},
		{"at the bound", "{output: 10000}", Prices{Known: true, Output: MaxPrice}},
		{"a tenth of a cheap input", "{input: 0.15}", Prices{Known: true, Input: 0.15, CacheWrite: 0.1875, CacheRead: 0.015}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadFile(writeConfig(t, pricesFile(tc.prices)), Default(), func(string) string { return "" }, fakeFactories)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Routes["a"].Prices; got != tc.want {
				t.Errorf("prices %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRouteWithoutPricesHasNoCost(t *testing.T) {
	cfg, err := LoadFile(writeConfig(t, "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m}\n"),
		Default(), func(string) string { return "" }, fakeFactories)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Routes["a"].Prices
	if p.Known || p.Cost(recovery.Usage{InputTokens: 1000, OutputTokens: 1000}) != 0 {
		t.Errorf("a route without prices has prices %+v", p)
	}
}

func TestBadPriceNamesTheField(t *testing.T) {
	for _, tc := range []struct{ name, prices, want string }{
		{"negative input", "{input: -1}", "routes.a.prices.input"},
		{"NaN output", "{output: .nan}", "routes.a.prices.output"},
		{"infinite cache_write", "{input: 1, cache_write: .inf}", "routes.a.prices.cache_write"},
		{"absurd cache_read", "{cache_read: 10000.5}", "routes.a.prices.cache_read"},
		{"per token, not per million", "{input: 3000000}", "routes.a.prices.input"},
		{"not a number", "{input: cheap}", "cheap"},
		{"unknown field", "{cached_input: 1}", "cached_input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFile(writeConfig(t, pricesFile(tc.prices)), Default(), func(string) string { return "" }, fakeFactories)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestCost(t *testing.T) {
	sonnet := Prices{Known: true, Input: 3, Output: 15, CacheWrite: 3.75, CacheRead: 0.3}
	for _, tc := range []struct {
		name   string
		prices Prices
		usage  recovery.Usage
		want   float64
	}{
		{"nothing used", sonnet, recovery.Usage{}, 0},
		{"a million input tokens", sonnet, recovery.Usage{InputTokens: 1_000_000}, 3},
		{"a million output tokens", sonnet, recovery.Usage{OutputTokens: 1_000_000}, 15},
		{"each kind at its own price", sonnet,
			recovery.Usage{InputTokens: 1000, OutputTokens: 500, CacheCreationInputTokens: 2000, CacheReadInputTokens: 10_000},
			(1000*3 + 500*15 + 2000*3.75 + 10_000*0.3) / 1e6},
		{"cache reads only", sonnet, recovery.Usage{CacheReadInputTokens: 1_000_000}, 0.3},
		{"free route", Prices{Known: true}, recovery.Usage{InputTokens: 1000, OutputTokens: 1000}, 0},
		{"no prices", Prices{}, recovery.Usage{InputTokens: 1000, OutputTokens: 1000}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.prices.Cost(tc.usage); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Cost(%+v) = %v, want %v", tc.usage, got, tc.want)
			}
		})
	}
}

func TestTotalCost(t *testing.T) {
	route := func(name string, p Prices) *Route { return &Route{Spec: recovery.Route{Name: name}, Prices: p} }
	chain := []*Route{route("a", Prices{Known: true, Input: 2, Output: 10}), route("b", Prices{Known: true, Input: 1, Output: 1}),
		route("free", Prices{Known: true}), route("unpriced", Prices{})}
	attempt := func(route string, in, out int64) recovery.AttemptRecord {
		return recovery.AttemptRecord{Route: recovery.Route{Name: route}, Usage: recovery.Usage{InputTokens: in, OutputTokens: out}}
	}
	for _, tc := range []struct {
		name      string
		attempts  []recovery.AttemptRecord
		want      float64
		wantKnown bool
	}{
		{"no attempts", nil, 0, true},
		{"one route", []recovery.AttemptRecord{attempt("a", 1e6, 1e6)}, 12, true},
		{"each attempt at its own route's prices", []recovery.AttemptRecord{attempt("a", 1e6, 0), attempt("b", 1e6, 1e6)}, 4, true},
		{"a free route is known", []recovery.AttemptRecord{attempt("a", 1e6, 0), attempt("free", 1e6, 1e6)}, 2, true},
		{"an unpriced route makes it unknown, the rest counted", []recovery.AttemptRecord{attempt("a", 1e6, 0), attempt("unpriced", 1e6, 1e6)}, 2, false},
		{"a route not in the chain is unknown", []recovery.AttemptRecord{attempt("zz", 1e6, 0)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := TotalCost(chain, tc.attempts)
			if math.Abs(got-tc.want) > 1e-12 || known != tc.wantKnown {
				t.Errorf("TotalCost = %v, %v; want %v, %v", got, known, tc.want, tc.wantKnown)
			}
		})
	}
}
