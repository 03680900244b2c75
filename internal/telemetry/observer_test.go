package telemetry

import (
	"log/slog"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestChunkIsFree guards the per-token path: noting a chunk allocates
// nothing, with telemetry on or off.
func TestChunkIsFree(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, sdktrace.NewTracerProvider()} {
		o := NewObserver(slog.New(slog.DiscardHandler), Telemetry{TracerProvider: tp}, nil)
		info := Info{ID: "cmpl_test", First: recovery.Route{Name: "sim", Model: "sim-1"}}
		c, _ := o.Start(t.Context(), info)
		s := c.AttemptStart(t.Context(), recovery.Call{Attempt: 1, Route: info.First}, false)
		if n := testing.AllocsPerRun(100, s.Chunk); n != 0 {
			t.Errorf("chunk allocates %v times per call", n)
		}
		s.End(recovery.Event{Kind: recovery.EvAttemptDone}, provider.Finish{})
		c.Finish(&recovery.Result{Reason: recovery.Completed})
	}
}

// BenchmarkObserverOff measures what one completion of two attempts costs
// the observer with telemetry off (logs discarded): the price of "off".
func BenchmarkObserverOff(b *testing.B) {
	o := NewObserver(slog.New(slog.DiscardHandler), Telemetry{}, nil)
	route := recovery.Route{Name: "sim", Model: "sim-1"}
	for b.Loop() {
		info := Info{ID: "cmpl_bench", First: route}
		c, _ := o.Start(b.Context(), info)
		for n := 1; n <= 2; n++ {
			s := c.AttemptStart(b.Context(), recovery.Call{Attempt: n, Route: route}, false)
			for range 40 {
				s.Chunk()
			}
			s.End(recovery.Event{Kind: recovery.EvAttemptDone}, provider.Finish{})
			c.Transition(recovery.Transition{Reason: recovery.Retry, Attempt: n})
		}
		c.Finish(&recovery.Result{Reason: recovery.Completed})
	}
}

// TestModelLabelsAreBounded: the model names upstreams report become
// metric labels, so their number is capped; names past the cap are counted
// together, and a name already admitted stays itself.
func TestModelLabelsAreBounded(t *testing.T) {
	s := newLabelSet(2)
	for _, tc := range []struct{ in, want string }{
		{"a", "a"}, {"b", "b"}, {"c", otherModel}, {"a", "a"}, {"d", otherModel}, {"b", "b"},
	} {
		if got := s.bound(tc.in); got != tc.want {
			t.Errorf("bound(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
