package config

import (
	"strings"
	"testing"
	"time"
)

func TestFileConfigBudget(t *testing.T) {
	path := writeConfig(t, `
auth:
  keys:
    - {name: a, key: ka, routes: all, budget: {usd: 12.5, period: month}}
    - {name: b, key: kb, routes: all, budget: {usd: 1, tokens: 100000, period: 6h}}
    - {name: c, key: kc, routes: all, budget: {tokens: 5000, period: week}}
    - {name: d, key: kd, routes: all}
`)
	cfg, err := LoadFile(path, Default(), func(string) string { return "" }, fakeFactories)
	if err != nil {
		t.Fatal(err)
	}
	want := []*Budget{
		{USD: 12.5, Period: BudgetPeriod{Calendar: "month"}},
		{USD: 1, Tokens: 100000, Period: BudgetPeriod{Every: 6 * time.Hour}},
		{Tokens: 5000, Period: BudgetPeriod{Calendar: "week"}},
		nil,
	}
	for i, k := range cfg.Auth.Keys {
		if (k.Budget == nil) != (want[i] == nil) || k.Budget != nil && *k.Budget != *want[i] {
			t.Errorf("key %s: budget %+v, want %+v", k.Name, k.Budget, want[i])
		}
	}
}

func TestFileConfigBudgetErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, budget, want string
	}{
		{"zero usd", `{usd: 0, period: day}`, "auth.keys[0].budget.usd: 0 is not a limit"},
		{"negative usd", `{usd: -5, period: day}`, "auth.keys[0].budget.usd: -5"},
		{"NaN usd", `{usd: .nan, period: day}`, "auth.keys[0].budget.usd: NaN"},
		{"infinite usd", `{usd: .inf, period: day}`, "auth.keys[0].budget.usd: +Inf"},
		{"absurd usd", `{usd: 1e12, period: day}`, "auth.keys[0].budget.usd: 1e+12"},
		{"zero tokens", `{tokens: 0, period: day}`, "auth.keys[0].budget.tokens: 0 is not a limit"},
		{"negative tokens", `{tokens: -1, period: day}`, "auth.keys[0].budget.tokens"},
		{"NaN tokens", `{tokens: .nan, period: day}`, "auth.keys[0].budget.tokens: NaN"},
		{"absurd tokens", `{tokens: 1e30, period: day}`, "auth.keys[0].budget.tokens"},
		{"fractional tokens", `{tokens: 1.5, period: day}`, "auth.keys[0].budget.tokens"},
		{"no limit", `{period: day}`, "auth.keys[0].budget: set usd, tokens or both"},
		{"no period", `{usd: 1}`, "auth.keys[0].budget.period: required"},
		{"bad period", `{usd: 1, period: fortnight}`, "auth.keys[0].budget.period"},
		{"short period", `{usd: 1, period: 1s}`, "auth.keys[0].budget.period"},
		{"long period", `{usd: 1, period: 9000h}`, "auth.keys[0].budget.period"},
		{"negative period", `{usd: 1, period: -24h}`, "auth.keys[0].budget.period"},
		{"unknown field", `{usd: 1, period: day, eur: 3}`, "eur"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `auth: {keys: [{name: a, key: k, routes: all, budget: ` + tc.budget + `}]}`
			_, err := LoadFile(writeConfig(t, body), Default(), func(string) string { return "" }, fakeFactories)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBudgetPeriodBounds(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		period     BudgetPeriod
		t          string
		start, end string
	}{
		{BudgetPeriod{Calendar: "day"}, "2026-11-28T08:15:00Z", "2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z"},
		{BudgetPeriod{Calendar: "day"}, "2026-11-28T23:30:00-05:00", "2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z"},
		{BudgetPeriod{Calendar: "week"}, "2026-11-28T08:15:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // a Saturday
		{BudgetPeriod{Calendar: "week"}, "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // a Monday
		{BudgetPeriod{Calendar: "week"}, "2026-11-29T23:59:59Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // a Sunday
		{BudgetPeriod{Calendar: "month"}, "2026-12-31T23:59:59Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{BudgetPeriod{Calendar: "month"}, "2028-02-10T00:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{BudgetPeriod{Every: 24 * time.Hour}, "2026-11-28T08:15:00Z", "2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z"},
		{BudgetPeriod{Every: 6 * time.Hour}, "2026-11-28T08:15:00Z", "2026-11-28T06:00:00Z", "2026-11-28T12:00:00Z"},
		{BudgetPeriod{Every: time.Hour}, "1969-12-31T23:30:00Z", "1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"},
	} {
		t.Run(tc.period.String()+" "+tc.t, func(t *testing.T) {
			s, e := tc.period.Bounds(at(tc.t))
			if !s.Equal(at(tc.start)) || !e.Equal(at(tc.end)) {
				t.Errorf("bounds %v – %v, want %s – %s", s, e, tc.start, tc.end)
			}
		})
	}
}

func TestBudgetOver(t *testing.T) {
	for _, tc := range []struct {
		b      Budget
		usd    float64
		tokens int64
		want   bool
	}{
		{Budget{USD: 1}, 0.99, 1e9, false},
		{Budget{USD: 1}, 1, 0, true},
		{Budget{Tokens: 100}, 50, 99, false},
		{Budget{Tokens: 100}, 0, 100, true},
		{Budget{USD: 1, Tokens: 100}, 0.5, 150, true},
	} {
		if got := tc.b.Over(tc.usd, tc.tokens); got != tc.want {
			t.Errorf("%+v over (%v, %d) = %v, want %v", tc.b, tc.usd, tc.tokens, got, tc.want)
		}
	}
}
