package service

import (
	"context"
	"maps"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider/sim"
)

// budgetNow is the fixed clock of the budget tests: a Saturday, 16 h
// before the UTC day ends.
var budgetNow = time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)

// budgetDayEnd is the end of budgetNow's UTC day.
var budgetDayEnd = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// withBudget gives the test key ops budget b and every route prices p, on
// the fixed clock budgetNow.
func withBudget(b *config.Budget, p config.Prices) func(*Config) {
	return withBudgetAt(b, p, budgetNow)
}

// withBudgetAt is withBudget on a clock that stands at now.
func withBudgetAt(b *config.Budget, p config.Prices, now time.Time) func(*Config) {
	return func(c *Config) {
		c.Now = func() time.Time { return now }
		c.Auth = testKeys()
		c.Auth.Keys[0].Budget = b
		for name, r := range c.Routes {
			rt := *r
			rt.Prices = p
			c.Routes[name] = &rt
		}
	}
}

// opsCtx is ctx calling with the test key ops.
func opsCtx(ctx context.Context) context.Context { return bearer(ctx, "Bearer ops-secret-key") }

// checkBudgetStatus checks that st is BUDGET_EXCEEDED as documented:
// RESOURCE_EXHAUSTED, ErrorInfo with the period's end and not the key,
// RetryInfo until the period's end.
func checkBudgetStatus(t *testing.T, st *status.Status) {
	t.Helper()
	checkBudgetStatusAt(t, st, budgetNow, budgetDayEnd)
}

// checkBudgetStatusAt is checkBudgetStatus on a clock at now, in a UTC
// day that ends at dayEnd.
func checkBudgetStatusAt(t *testing.T, st *status.Status, budgetNow, budgetDayEnd time.Time) {
	t.Helper()
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("status %v, want RESOURCE_EXHAUSTED", st)
	}
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	if info.GetReason() != "BUDGET_EXCEEDED" || info.GetDomain() != ErrorDomain {
		t.Errorf("ErrorInfo %v, want BUDGET_EXCEEDED", info)
	}
	if got := info.GetMetadata()["period_end"]; got != budgetDayEnd.Format(time.RFC3339) {
		t.Errorf("period_end %q, want %s", got, budgetDayEnd.Format(time.RFC3339))
	}
	if _, ok := info.GetMetadata()["key"]; ok {
		t.Errorf("ErrorInfo names the key: %v", info.GetMetadata())
	}
	if retry.GetRetryDelay().AsDuration() != budgetDayEnd.Sub(budgetNow) {
		t.Errorf("RetryInfo %v, want %v", retry.GetRetryDelay().AsDuration(), budgetDayEnd.Sub(budgetNow))
	}
}

func TestBudgetRefusesAtStart(t *testing.T) {
	day := config.BudgetPeriod{Calendar: "day"}
	priced := config.Prices{Known: true, Input: 3, Output: 15}
	for _, tc := range []struct {
		name   string
		budget *config.Budget
		prices config.Prices
	}{
		{"usd", &config.Budget{USD: 1e-9, Period: day}, priced},
		{"tokens on a route without prices", &config.Budget{USD: 100, Tokens: 10, Period: day}, config.Prices{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			e, _ := authEnv(t, withBudget(tc.budget, tc.prices), func(c *Config) { c.Telemetry = telemetry.Telemetry{MeterProvider: mp} })
			if _, err := e.client.Complete(opsCtx(t.Context()), faults("")); err != nil {
				t.Fatalf("the first completion, under budget: %v", err)
			}
			calls := e.upstream.calls.Load()
			_, err := e.client.Complete(opsCtx(t.Context()), faults(""))
			checkBudgetStatus(t, status.Convert(err))
			if n := e.upstream.calls.Load(); n != calls {
				t.Errorf("%d upstream calls after the refusal, want none", n-calls)
			}
			// Another key's budget is its own.
			if _, err := e.client.Complete(bearer(t.Context(), "Bearer narrow-secret-key"), faults("")); err != nil {
				t.Errorf("another key refused: %v", err)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(t.Context(), &rm); err != nil {
				t.Fatal(err)
			}
			const k = "completiond.refusals{completiond.auth.key=ops,completiond.refusal.reason=BUDGET_EXCEEDED}"
			if n := counters(rm)[k]; n != 1 {
				t.Errorf("%s = %d, want 1", k, n)
			}
		})
	}
}

// TestBudgetExceededWhileRunning: the first attempt's stream breaks after
// some tokens, and its charge crosses the key's budget; the continuation
// (STREAM_RESUME) is not sent, and the completion ends BUDGET_EXCEEDED
// with the answer so far, flagged truncated.
func TestBudgetExceededWhileRunning(t *testing.T) {
	day := config.BudgetPeriod{Calendar: "day"}
	for _, tc := range []struct {
		name   string
		budget *config.Budget
		prices config.Prices
	}{
		{"usd", &config.Budget{USD: 1e-9, Period: day}, config.Prices{Known: true, Input: 3, Output: 15}},
		{"tokens", &config.Budget{Tokens: 5, Period: day}, config.Prices{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := authEnv(t, withBudget(tc.budget, tc.prices))
			st, err := e.client.Stream(opsCtx(t.Context()), faults("cut=4"))
			if err != nil {
				t.Fatal(err)
			}
			evs, sts := recvAll(st.Recv)
			res := checkContract(t, evs, sts)
			checkBudgetStatus(t, sts)
			if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_BUDGET_EXCEEDED {
				t.Errorf("result reason %v, want BUDGET_EXCEEDED", res.GetReason())
			}
			if resultText(res) == "" || !res.GetTruncated() {
				t.Errorf("answer %q truncated %v, want the partial answer kept, truncated", resultText(res), res.GetTruncated())
			}
			if n := len(res.GetAttempts()); n != 1 || e.upstream.calls.Load() != 1 {
				t.Errorf("%d attempts, %d upstream calls, want 1: the continuation is not sent", n, e.upstream.calls.Load())
			}
			var reasons []string
			for _, ev := range evs {
				if tr := ev.GetTransition(); tr != nil {
					reasons = append(reasons, tr.GetReason().String())
				}
			}
			// The machine decided to resume; the driver found the budget
			// spent before the call.
			if len(reasons) != 2 || reasons[0] != "TRANSITION_REASON_STREAM_RESUME" || reasons[1] != "TRANSITION_REASON_BUDGET_EXCEEDED" {
				t.Errorf("transitions %v, want STREAM_RESUME, BUDGET_EXCEEDED", reasons)
			}
		})
	}
}

// budgetFleet is two replicas sharing the Redis at addr, whose key ops has
// a budget of a day that one completion spends, on a clock (now) that
// stands in the real UTC day (which ends at dayEnd): Redis expires the
// day's spend at an absolute time on its own clock. mutate, when not nil,
// changes both replicas' Config further.
func budgetFleet(t *testing.T, addr string, mutate func(*Config)) (a, b *testEnv, now, dayEnd time.Time) {
	t.Helper()
	up := sim.New(sim.Config{Words: 12, StallLimit: 200 * time.Millisecond})
	budget := &config.Budget{USD: 1e-9, Period: config.BudgetPeriod{Calendar: "day"}}
	day := time.Now().UTC().Truncate(24 * time.Hour)
	now, dayEnd = day.Add(8*time.Hour), day.Add(24*time.Hour)
	replicas := fleetEnvs(t, addr, 2, up, func(c *Config) {
		withBudgetAt(budget, config.Prices{Known: true, Input: 3, Output: 15}, now)(c)
		if mutate != nil {
			mutate(c)
		}
	})
	return replicas[0], replicas[1], now, dayEnd
}

// TestFleetBudgetSpentOnOneReplicaRefusesOnAnother: two replicas share a
// real Redis; what the key spends through A counts on B.
func TestFleetBudgetSpentOnOneReplicaRefusesOnAnother(t *testing.T) {
	testkit.NoLeaks(t)
	a, b, now, dayEnd := budgetFleet(t, redistest.Start(t), nil)
	if _, err := b.client.Complete(opsCtx(t.Context()), faults("")); err != nil {
		t.Fatalf("B, under budget: %v", err)
	}
	_, err := a.client.Complete(opsCtx(t.Context()), faults(""))
	checkBudgetStatusAt(t, status.Convert(err), now, dayEnd)
	if _, err := b.client.Complete(bearer(t.Context(), "Bearer narrow-secret-key"), faults("")); err != nil {
		t.Errorf("another key refused: %v", err)
	}
}

// TestFleetBudgetCountsWhatARedisRestartLost: Redis restarts empty after
// the key spent through A; A writes its spend again, the same, once it
// finds the new Redis process. (That B then refuses the key is
// TestFleetBudgetSpentOnOneReplicaRefusesOnAnother's: here B's first
// calls to a restarted Redis may fail, and a budget check that cannot
// read Redis goes by B's own spend, as designed.)
func TestFleetBudgetCountsWhatARedisRestartLost(t *testing.T) {
	testkit.NoLeaksAfterOutage(t)
	rs := redistest.New(t)
	a, _, _, _ := budgetFleet(t, rs.Addr, func(c *Config) { c.RedisPing = 100 * time.Millisecond })
	if _, err := a.client.Complete(opsCtx(t.Context()), faults("")); err != nil {
		t.Fatalf("A, under budget: %v", err)
	}
	rdb := testkit.RedisClient(t, rs.Addr)
	spend := func() map[string]string {
		keys := rdb.Keys(t.Context(), "completiond:budget:*").Val()
		if len(keys) != 1 {
			return nil
		}
		return rdb.HGetAll(t.Context(), keys[0]).Val()
	}
	before := spend()
	if len(before) == 0 {
		t.Fatal("A's spend is not in Redis")
	}
	rs.Restart() // empty
	waitRedisKeys(t, rs.Addr, "completiond:budget:*", "A's spend, once Redis restarted empty")
	if after := spend(); !maps.Equal(after, before) {
		t.Errorf("A's spend after Redis restarted empty: %v, want %v", after, before)
	}
}

// TestBudgetExceededBeforeASessionsNextTurn: a Session's first turn spends
// the key's token budget; the caller's tool results come back, and the
// next turn's call is not sent: BUDGET_EXCEEDED, the first turn's answer
// and its tool call kept in the transcript.
func TestBudgetExceededBeforeASessionsNextTurn(t *testing.T) {
	e, _ := authEnv(t, withBudget(&config.Budget{Tokens: 5, Period: config.BudgetPeriod{Calendar: "day"}}, config.Prices{}))
	ctx, cancel := context.WithTimeout(opsCtx(t.Context()), 20*time.Second)
	t.Cleanup(cancel)
	s := openSession(t, ctx, e.client, startMsg(sessionStart("tool_use,tool_use")))
	call := s.toolCall()
	s.answer(call.GetId(), "42", false)
	res, code := s.end()
	if code != codes.ResourceExhausted || res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_BUDGET_EXCEEDED {
		t.Fatalf("ended %v / %v, want BUDGET_EXCEEDED / RESOURCE_EXHAUSTED", res.GetReason(), code)
	}
	checkBudgetStatus(t, statusOf(s.status))
	if got := transitions(s.events); len(got) != 2 || got[0] != "NEXT_TURN" || got[1] != "BUDGET_EXCEEDED" {
		t.Errorf("transitions %v, want NEXT_TURN, BUDGET_EXCEEDED", got)
	}
	if n := e.upstream.calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1: the next turn is not sent", n)
	}
	if len(res.GetTranscript()) != 3 {
		t.Errorf("transcript of %d messages, want the prompt, the tool call and its result", len(res.GetTranscript()))
	}
}
