package service

import (
	"log/slog"
	"math"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testkit"
)

// TestResultReportsCost runs a completion whose first attempt fails inside
// a stream it was paid for (overloaded after reading the prompt: RETRY),
// whose second is refused (404: MODEL_FALLBACK, no tokens) and whose third
// answers on sim-fallback: each attempt is costed at the prices of its own
// route, the failed one included, and the result's total is their sum. A
// route without prices makes the cost unknown: the total then counts the
// priced attempts only. The cost counter and the RPC's log line carry the
// same cost.
func TestResultReportsCost(t *testing.T) {
	primary := config.Prices{Known: true, Input: 3, Output: 15, CacheWrite: 3.75, CacheRead: 0.3}
	fallback := config.Prices{Known: true, Input: 1, Output: 4}
	for _, tc := range []struct {
		name               string
		fallbackPrices     config.Prices
		wantKnown          bool
		wantFallbackPriced bool
	}{
		{name: "every route priced", fallbackPrices: fallback, wantKnown: true, wantFallbackPriced: true},
		{name: "fallback without prices", fallbackPrices: config.Prices{}, wantKnown: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf testkit.SyncBuffer
			r := newRecorded(t, func(c *Config) {
				c.Logger = slog.New(telemetry.TraceLogHandler(slog.NewJSONHandler(&buf, nil)))
				for name, p := range map[string]config.Prices{"sim": primary, "sim-fallback": tc.fallbackPrices} {
					rt := *c.Routes[name]
					rt.Prices = p
					c.Routes[name] = &rt
				}
			})
			evs := streamEvents(t.Context(), t, r.client, faults("stream_overload=0,not_found"))
			r.drain()
			res := evs[len(evs)-1].GetResult()
			at := res.GetAttempts()
			if len(at) != 3 || at[0].GetRoute() != "sim" || at[1].GetRoute() != "sim" || at[2].GetRoute() != "sim-fallback" {
				t.Fatalf("attempts %v, want two on sim and one on sim-fallback", at)
			}
			failed := completionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED
			if at[0].GetOutcome() != failed || at[1].GetOutcome() != failed ||
				at[2].GetOutcome() != completionv1.AttemptOutcome_ATTEMPT_OUTCOME_ANSWERED {
				t.Fatalf("outcomes %v %v %v, want failed, failed, answered", at[0].GetOutcome(), at[1].GetOutcome(), at[2].GetOutcome())
			}
			if at[0].GetUsage().GetInputTokens() == 0 {
				t.Fatalf("the failed attempt read no tokens (%v): nothing to cost", at[0].GetUsage())
			}
			cost := func(p config.Prices, u *completionv1.Usage) float64 {
				return (float64(u.GetInputTokens())*p.Input + float64(u.GetOutputTokens())*p.Output +
					float64(u.GetCacheCreationInputTokens())*p.CacheWrite + float64(u.GetCacheReadInputTokens())*p.CacheRead) / 1e6
			}
			type attemptCost struct {
				usd   float64
				known bool
			}
			want := []attemptCost{
				{cost(primary, at[0].GetUsage()), true},
				{0, true}, // refused before it read anything
				{0, false},
			}
			if tc.wantFallbackPriced {
				want[2] = attemptCost{cost(fallback, at[2].GetUsage()), true}
			}
			total := 0.0
			for i, a := range at {
				if !near(a.GetCostUsd(), want[i].usd) || a.GetCostKnown() != want[i].known {
					t.Errorf("attempt %d costs %v (known %v), want %v (known %v)", a.GetAttempt(), a.GetCostUsd(), a.GetCostKnown(), want[i].usd, want[i].known)
				}
				total += want[i].usd
			}
			if want[2].known && want[2].usd == 0 {
				t.Fatal("the answer costs nothing: the test shows no fallback price")
			}
			if !near(res.GetCostUsd(), total) || res.GetCostKnown() != tc.wantKnown {
				t.Errorf("result costs %v (known %v), want %v (known %v)", res.GetCostUsd(), res.GetCostKnown(), total, tc.wantKnown)
			}

			var rm metricdata.ResourceMetrics
			if err := r.metrics.Collect(t.Context(), &rm); err != nil {
				t.Fatal(err)
			}
			got := floatCounters(rm)
			series := map[string]float64{
				"completiond.cost.usd{completiond.auth.key=,completiond.route=sim,gen_ai.request.model=sim-1}": want[0].usd,
			}
			if tc.wantFallbackPriced {
				series["completiond.cost.usd{completiond.auth.key=,completiond.route=sim-fallback,gen_ai.request.model=sim-2}"] = want[2].usd
			}
			for k, v := range series {
				if g, ok := got[k]; !ok || !near(g, v) {
					t.Errorf("%s = %v (present %v), want %v; have %v", k, g, ok, v, keys(got))
				}
			}
			if len(got) != len(series) {
				t.Errorf("cost series %v, want %d (none for an unpriced route)", keys(got), len(series))
			}

			var line map[string]any
			for _, l := range testkit.LogLines(t, buf.String()) {
				if l["msg"] == "finished call" {
					line = l
				}
			}
			c, ok := line["cost_usd"].(float64)
			if ok != tc.wantKnown || (ok && !near(c, total)) {
				t.Errorf("the RPC line says cost_usd %v (present %v), want %v (present %v): %v", line["cost_usd"], ok, total, tc.wantKnown, line)
			}
		})
	}
}

// near compares costs, which are sums of float products.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

// floatCounters flattens the float sums of rm to "name{k=v,…}" → value.
func floatCounters(rm metricdata.ResourceMetrics) map[string]float64 {
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[float64]); ok {
				for _, p := range d.DataPoints {
					out[m.Name+labels(p.Attributes)] = p.Value
				}
			}
		}
	}
	return out
}
