package recovery

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	p := DefaultPolicy()
	ms := time.Millisecond
	tests := []struct {
		n    int
		u    float64
		want time.Duration
	}{
		// u = 0: the bare exponential, capped at 32 s from n = 7.
		{1, 0, 500 * ms}, {2, 0, 1000 * ms}, {3, 0, 2000 * ms}, {4, 0, 4000 * ms},
		{5, 0, 8000 * ms}, {6, 0, 16000 * ms}, {7, 0, 32000 * ms}, {8, 0, 32000 * ms},
		// u = 0.5: an eighth more (half of the 25 % jitter).
		{1, 0.5, 562500 * time.Microsecond}, {2, 0.5, 1125 * ms}, {3, 0.5, 2250 * ms},
		{4, 0.5, 4500 * ms}, {5, 0.5, 9000 * ms}, {6, 0.5, 18000 * ms}, {7, 0.5, 36000 * ms},
		{8, 0.5, 36000 * ms},
		// u just under 1: just under a quarter more, never more.
		{1, 0.999, 624875 * time.Microsecond}, {2, 0.999, 1249750 * time.Microsecond},
		{3, 0.999, 2499500 * time.Microsecond}, {4, 0.999, 4999 * ms}, {5, 0.999, 9998 * ms},
		{6, 0.999, 19996 * ms}, {7, 0.999, 39992 * ms}, {8, 0.999, 39992 * ms},
		// Out-of-range inputs are clamped: n < 1 is the first retry, a huge
		// n is the cap (no overflow), u outside [0, 1] is clamped.
		{0, 0, 500 * ms}, {-3, 0, 500 * ms}, {40, 0, 32000 * ms}, {1000, 0.5, 36000 * ms},
		{1, -1, 500 * ms}, {1, 7, 625 * ms},
	}
	for _, tt := range tests {
		if got := p.Retry.Backoff(tt.n, tt.u); got != tt.want {
			t.Errorf("Backoff(%d, %v) = %s, want %s", tt.n, tt.u, got, tt.want)
		}
	}
}

func TestBackoffNeverExceedsCapPlusJitter(t *testing.T) {
	p := DefaultPolicy()
	ceiling := p.Retry.BackoffMax + time.Duration(float64(p.Retry.BackoffMax)*p.Retry.BackoffJitter)
	for n := 1; n <= 100; n++ {
		for _, u := range []float64{0, 0.25, 0.5, 0.75, 0.999999} {
			if d := p.Retry.Backoff(n, u); d <= 0 || d > ceiling {
				t.Fatalf("Backoff(%d, %v) = %s, outside (0, %s]", n, u, d, ceiling)
			}
		}
	}
}

func TestRetryDelay(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		n          int
		retryAfter time.Duration
		u          float64
		want       time.Duration
	}{
		{1, 0, 0, 500 * time.Millisecond},
		{3, 0, 0.5, 2250 * time.Millisecond},
		// Retry-After replaces the backoff, unjittered, whatever n and u.
		{1, 7 * time.Second, 0.9, 7 * time.Second},
		{9, 1500 * time.Millisecond, 0.5, 1500 * time.Millisecond},
		{2, 2 * time.Minute, 0, 2 * time.Minute},
	}
	for _, tt := range tests {
		if got := p.Retry.RetryDelay(tt.n, tt.retryAfter, tt.u); got != tt.want {
			t.Errorf("RetryDelay(%d, %s, %v) = %s, want %s", tt.n, tt.retryAfter, tt.u, got, tt.want)
		}
	}
}

// TestDeadlineClamp checks that a wait is taken only if it ends by the
// deadline: falling back when a route is left, else MODEL_ERROR, retryable.
func TestDeadlineClamp(t *testing.T) {
	a, b := Route{Name: "a"}, Route{Name: "b"}
	tests := []struct {
		name       string
		routes     []Route
		deadline   time.Duration // after the failure; 0: none
		retryAfter time.Duration
		want       ActionKind
		reason     Reason
	}{
		{"no deadline", []Route{a}, 0, 50 * time.Second, ActWait, Retry},
		{"over the Retry-After ceiling", []Route{a}, 0, time.Hour, ActFinish, ModelError},
		{"ends before", []Route{a}, 3 * time.Second, 2 * time.Second, ActWait, Retry},
		{"ends exactly at", []Route{a}, 2 * time.Second, 2 * time.Second, ActWait, Retry},
		{"ends after, no route left", []Route{a}, 2 * time.Second, 2*time.Second + 1, ActFinish, ModelError},
		{"ends after, route left", []Route{a, b}, 2 * time.Second, 3 * time.Second, ActCall, ModelFallback},
		{"backoff ends after", []Route{a}, 400 * time.Millisecond, 0, ActFinish, ModelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := epoch.Add(5 * time.Second)
			cfg := Config{Policy: DefaultPolicy(), Routes: tt.routes, Messages: []Message{UserText("hi")}}
			if tt.deadline > 0 {
				cfg.Deadline = now.Add(tt.deadline)
			}
			m := New(cfg)
			m.Start(epoch)
			st := m.Step(Event{Kind: EvAttemptFailed, Now: now,
				Failure: &Failure{Kind: FailRateLimit, HTTPStatus: 429, RetryAfter: tt.retryAfter}})
			if st.Action.Kind != tt.want || st.Transitions[0].Reason != tt.reason {
				t.Fatalf("got %v %v, want %v %v", st.Action.Kind, st.Transitions[0].Reason, tt.want, tt.reason)
			}
			if st.Action.Kind == ActFinish {
				r := st.Action.Result
				want := tt.retryAfter
				if want == 0 {
					want = 500 * time.Millisecond
				}
				if !r.Retryable || r.RetryAfter != want || r.Failure == nil {
					t.Fatalf("result %+v: want retryable after %s with the failure", r, want)
				}
			}
		})
	}
}

func TestDefaultPolicyIsInBounds(t *testing.T) {
	if err := DefaultPolicy().Check(); err != nil {
		t.Fatal(err)
	}
	p := DefaultPolicy()
	p.Retry.FallbackRetries = p.Retry.MaxRetries + 1
	p.Retry.BackoffBase = 0
	p.Turns.MaxTurns = 0
	err := p.Check()
	for _, field := range []string{"retry.fallback_retries", "retry.backoff_base", "turns.max_turns"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Check() = %v, want it to name %s", err, field)
		}
	}
}

func TestRetryBudget(t *testing.T) {
	p := DefaultPolicy().Retry
	if n, w := p.Budget(true); n != 3 || w != 10*time.Second {
		t.Errorf("with a fallback: %d retries, %s of waiting; want 3, 10s", n, w)
	}
	if n, w := p.Budget(false); n != 10 || w != 0 {
		t.Errorf("last route: %d retries, %s of waiting; want 10, unbounded", n, w)
	}
	p.MaxRetries = 2
	if n, _ := p.Budget(true); n != 2 {
		t.Errorf("a fallback budget above MaxRetries: %d", n)
	}
}

func TestChain(t *testing.T) {
	p := DefaultPolicy()
	chain := []string{"a", "b", "c"}
	if got := Chain(p, chain); !slices.Equal(got, chain) {
		t.Errorf("with fallback: %v, want the whole chain %v", got, chain)
	}
	p.Retry.Fallback = false
	if got := Chain(p, chain); !slices.Equal(got, chain[:1]) {
		t.Errorf("without fallback: %v, want the primary route only", got)
	}
	for _, c := range [][]string{nil, {"a"}} {
		if got := Chain(p, c); !slices.Equal(got, c) {
			t.Errorf("without fallback, %v: %v", c, got)
		}
	}
}

func TestStartMaxTokens(t *testing.T) {
	cfg := Config{Policy: DefaultPolicy()}
	for _, c := range []struct{ asked, want int }{{0, 8000}, {-1, 8000}, {1200, 1200}, {100000, 100000}} {
		cfg.MaxTokens = c.asked
		if got := cfg.StartMaxTokens(); got != c.want {
			t.Errorf("max_tokens %d asked: %d, want %d", c.asked, got, c.want)
		}
		if got := New(cfg).maxTokens; got != c.want {
			t.Errorf("max_tokens %d asked: the machine starts with %d, want %d", c.asked, got, c.want)
		}
	}
}
