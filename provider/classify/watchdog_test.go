package classify

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// watch starts an attempt with limits and reports when and why it was stopped.
func watch(t *testing.T, limits provider.Timeouts) (*Attempt, func(within time.Duration) recovery.TimeoutPhase) {
	t.Helper()
	a := Begin(context.Background(), limits)
	t.Cleanup(a.End)
	return a, func(within time.Duration) recovery.TimeoutPhase {
		t.Helper()
		select {
		case <-a.Context().Done():
			var cause errTimedOut
			if !errors.As(context.Cause(a.Context()), &cause) {
				t.Fatalf("stopped by %v, not a limit", context.Cause(a.Context()))
			}
			return recovery.TimeoutPhase(cause)
		case <-time.After(within):
			return recovery.TimeoutNone
		}
	}
}

// headersCame plays the middleware seeing a 200.
func headersCame(a *Attempt) {
	_, _ = a.Middleware(&http.Request{}, func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
	})
}

func TestLimits(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		limits  provider.Timeouts
		headers bool // the headers come at once
		token   bool // the first token comes at once
		want    recovery.TimeoutPhase
	}{
		{"headers", provider.Timeouts{Headers: 50 * ms, FirstToken: 500 * ms, Total: time.Second}, false, false, recovery.TimeoutHeaders},
		{"first token before headers", provider.Timeouts{FirstToken: 50 * ms, Total: time.Second}, false, false, recovery.TimeoutFirstToken},
		{"first token", provider.Timeouts{Headers: 500 * ms, FirstToken: 50 * ms}, true, false, recovery.TimeoutFirstToken},
		{"idle after headers", provider.Timeouts{Idle: 50 * ms, FirstToken: 500 * ms}, true, false, recovery.TimeoutIdle},
		{"idle after a token", provider.Timeouts{Idle: 50 * ms, FirstToken: 500 * ms}, true, true, recovery.TimeoutIdle},
		{"idle does not run before headers", provider.Timeouts{Idle: 50 * ms, Total: 150 * ms}, false, false, recovery.TimeoutTotal},
		{"total", provider.Timeouts{Total: 50 * ms}, true, true, recovery.TimeoutTotal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, stopped := watch(t, tc.limits)
			if tc.headers {
				headersCame(a)
			}
			if tc.token {
				a.Token()
			}
			if got := stopped(2 * time.Second); got != tc.want {
				t.Errorf("stopped by %v, want %v", got, tc.want)
			}
		})
	}
}

func TestActivityKeepsIdleAway(t *testing.T) {
	a, stopped := watch(t, provider.Timeouts{Idle: 150 * time.Millisecond})
	headersCame(a)
	for range 8 {
		time.Sleep(30 * time.Millisecond)
		a.dog.activity()
	}
	if got := stopped(0); got != recovery.TimeoutNone {
		t.Fatalf("stopped by %v while bytes kept coming", got)
	}
	if got := stopped(time.Second); got != recovery.TimeoutIdle {
		t.Fatalf("stopped by %v, want idle once the bytes stopped", got)
	}
}

func TestHeadersArmAnEarlierIdle(t *testing.T) {
	// The timer is first armed for the distant first-token limit; the headers
	// must bring it forward to the idle one.
	a, stopped := watch(t, provider.Timeouts{FirstToken: 5 * time.Second, Idle: 50 * time.Millisecond})
	headersCame(a)
	if got := stopped(time.Second); got != recovery.TimeoutIdle {
		t.Fatalf("stopped by %v", got)
	}
}

func TestEndStopsTheLimits(t *testing.T) {
	a := Begin(context.Background(), provider.Timeouts{Total: 30 * time.Millisecond})
	a.End()
	time.Sleep(60 * time.Millisecond)
	if a.dog.firedPhase() != recovery.TimeoutNone {
		t.Fatal("a limit fired after End")
	}
	if !errors.Is(context.Cause(a.Context()), context.Canceled) {
		t.Fatalf("cause = %v", context.Cause(a.Context()))
	}
}

func TestNoLimitsNoWatchdog(t *testing.T) {
	a := Begin(context.Background(), provider.Timeouts{})
	defer a.End()
	if a.dog != nil {
		t.Fatal("a watchdog without limits")
	}
}

func TestInterruptedPrefersTheCaller(t *testing.T) {
	c := testClassifier()
	ctx, cancel := context.WithCancel(context.Background())
	a := Begin(ctx, provider.Timeouts{Total: time.Millisecond})
	defer a.End()
	<-a.Context().Done()
	if err := a.Failure(c, errors.New("read: canceled")); err == nil {
		t.Fatal("no failure")
	} else if f, ok := err.(*recovery.Failure); !ok || f.Kind != recovery.FailTimeout || f.Timeout != recovery.TimeoutTotal {
		t.Fatalf("err = %v", err)
	}
	cancel()
	if err := a.Failure(c, errors.New("read: canceled")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the caller's context error", err)
	}
}

func TestFailureOrder(t *testing.T) {
	c := testClassifier()
	a := Begin(context.Background(), provider.Timeouts{})
	defer a.End()
	if f := a.Failure(c, errors.New("dial tcp: connection refused")).(*recovery.Failure); f.Kind != recovery.FailConnection {
		t.Errorf("before headers: %v", f.Kind)
	}
	_, _ = a.Middleware(&http.Request{}, func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 529, Header: http.Header{}, Body: http.NoBody}, nil
	})
	if f := a.Failure(c, errors.New("529")).(*recovery.Failure); f.Kind != recovery.FailOverloaded || f.HTTPStatus != 529 {
		t.Errorf("error status: %+v", f)
	}
}

// blockingEmit is an emit that blocks for d, as a caller under back-pressure
// does, unless the attempt is stopped first; it reports which happened.
func blockingEmit(a *Attempt, d time.Duration, stopped *bool) func(provider.Chunk) error {
	return func(provider.Chunk) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-a.Context().Done():
			*stopped = true
		}
		return nil
	}
}

func TestASlowEmitIsNotIdle(t *testing.T) {
	const idle = 50 * time.Millisecond
	for _, tc := range []struct {
		name   string
		limits provider.Timeouts
		want   recovery.TimeoutPhase // what stops the attempt once the upstream goes silent
	}{
		{"idle", provider.Timeouts{Idle: idle}, recovery.TimeoutIdle},
		{"idle with a distant total", provider.Timeouts{Idle: idle, FirstToken: idle, Total: time.Minute}, recovery.TimeoutIdle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, stopped := watch(t, tc.limits)
			headersCame(a)
			a.Token()
			a.dog.activity()
			var cut bool
			emit := a.Emitter(blockingEmit(a, 3*idle, &cut))
			for range 3 { // the upstream keeps sending; each chunk's emit blocks 3× idle
				_ = emit(provider.Chunk{Kind: provider.ChunkText, Text: "x"})
				if cut {
					t.Fatalf("stopped by %v during an emit", a.dog.firedPhase())
				}
				a.dog.activity()
			}
			if got := stopped(0); got != recovery.TimeoutNone {
				t.Fatalf("stopped by %v", got)
			}
			// Then the upstream goes silent: idle runs again.
			if got := stopped(time.Second); got != tc.want {
				t.Fatalf("stopped by %v, want %v once the upstream went silent", got, tc.want)
			}
		})
	}
}

func TestIdleRunsFromTheEndOfAnEmit(t *testing.T) {
	const idle = 60 * time.Millisecond
	a, stopped := watch(t, provider.Timeouts{Idle: idle})
	headersCame(a)
	var cut bool
	_ = a.Emitter(blockingEmit(a, 3*idle, &cut))(provider.Chunk{})
	end := time.Now()
	if cut {
		t.Fatal("stopped during the emit")
	}
	if got := stopped(time.Second); got != recovery.TimeoutIdle {
		t.Fatalf("stopped by %v", got)
	}
	if since := time.Since(end); since < idle {
		t.Errorf("idle fired %v after the emit ended, want at least %v", since, idle)
	}
}

func TestTotalStillStopsASlowEmit(t *testing.T) {
	a, _ := watch(t, provider.Timeouts{Idle: 20 * time.Millisecond, Total: 100 * time.Millisecond})
	headersCame(a)
	var cut bool
	_ = a.Emitter(blockingEmit(a, 2*time.Second, &cut))(provider.Chunk{})
	if !cut || a.dog.firedPhase() != recovery.TimeoutTotal {
		t.Fatalf("stopped %t by %v, want the total limit", cut, a.dog.firedPhase())
	}
}

func TestEmitterWithoutLimitsIsEmit(t *testing.T) {
	a := Begin(context.Background(), provider.Timeouts{})
	defer a.End()
	called := false
	if err := a.Emitter(func(provider.Chunk) error { called = true; return errors.New("x") })(provider.Chunk{}); err == nil || !called {
		t.Fatalf("err %v, called %t", err, called)
	}
}
