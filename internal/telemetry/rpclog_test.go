package telemetry

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCompletionLineWithoutRPC checks who reports a completion: the line of
// the RPC that runs it while that line is not written, the completion's
// own "completion finished" line otherwise — a completion taken over from
// another replica runs without an RPC, and a resumable Session's may end
// after the RPC that started it did.
func TestCompletionLineWithoutRPC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scope   bool // the completion runs in an RPC's scope
		closed  bool // whose line is written already
		ownLine bool
	}{
		{name: "in an RPC", scope: true, ownLine: false},
		{name: "after its RPC's line", scope: true, closed: true, ownLine: true},
		{name: "without an RPC", ownLine: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf testkit.SyncBuffer
			o := NewObserver(slog.New(slog.NewJSONHandler(&buf, nil)), Telemetry{}, nil)
			ctx := context.Background()
			var s *rpcScope
			if tc.scope {
				s = &rpcScope{parent: ctx}
				ctx = s
			}
			if tc.closed {
				s.close()
			}
			route := recovery.Route{Name: "sim", Model: "sim-1"}
			prices := config.Prices{Known: true, Input: 1e6, Output: 2e6} // a dollar an input token, two an output token
			info := Info{ID: "cmpl_test", First: route, Chain: []*config.Route{{Spec: route, Prices: prices}}}
			c, _ := o.Start(ctx, info)
			a := c.AttemptStart(ctx, recovery.Call{Attempt: 1, Route: route}, false)
			a.End(recovery.Event{Kind: recovery.EvAttemptDone}, provider.Finish{})
			usage := recovery.Usage{InputTokens: 3, OutputTokens: 5}
			c.Finish(&recovery.Result{Reason: recovery.Completed, StopReason: recovery.StopEndTurn, Route: route, Usage: usage,
				Attempts: []recovery.AttemptRecord{{Attempt: 1, Route: route, Outcome: recovery.OutcomeAnswered, Usage: usage}}})
			lines := testkit.LogLines(t, buf.String())
			if got := len(lines) == 1 && lines[0]["msg"] == "completion finished"; got != tc.ownLine {
				t.Fatalf("own line %v, want %v:\n%s", got, tc.ownLine, buf.String())
			}
			if tc.ownLine {
				if l := lines[0]; l["completion_id"] != "cmpl_test" || l["output_tokens"] != 5.0 || l["reason"] != "COMPLETED" || l["cost_usd"] != 13.0 {
					t.Errorf("completion line %v", l)
				}
				return
			}
			sum, ok, _ := s.close()
			if !ok || sum.id != "cmpl_test" || sum.output != 5 || sum.attempts != 1 || sum.cost != 13 || !sum.costKnown {
				t.Errorf("the RPC's scope holds %+v, %v", sum, ok)
			}
		})
	}
}

// BenchmarkRPCLine writes what a clean Stream logs at INFO — the RPC's
// line, with the summary of its completion that the observer hands over —
// to a JSON handler behind TraceLogHandler, as the binary sets it up (to
// /dev/null: a write per line, as to stdout), scope included: the whole
// price of the per-request log.
func BenchmarkRPCLine(b *testing.B) {
	log := slog.New(TraceLogHandler(slog.NewJSONHandler(testkit.DevNull(b), nil)))
	l, o := rpcLog{log: log}, &Trail{Observer: &Observer{log: log}}
	sum := completionSummary{id: "cmpl_8de4e46136562823acd786d3", reason: recovery.Completed, stopReason: recovery.StopEndTurn,
		route: "sim", attempts: 1, input: 12, output: 1}
	ctx := context.Background()
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		s := &rpcScope{parent: ctx}
		o.handOver(s, sum)
		l.line(ctx, s, "/completion.v1.Completion/Stream", start, nil)
	}
}

// TestRPCLineIsFree guards the cost of the RPC's line, written to a JSON
// handler with a completion's summary: no field is boxed or formatted by
// the line itself. What allocates is the record's spill past its five
// inline fields, once, and the JSON handler's boxing of grpc.time_ms, a
// float, to encode it (8 bytes; the field is go-grpc-middleware's, a number
// of milliseconds), and of cost_usd when the completion's routes have
// prices; with an error, add what reading its code and text costs.
func TestRPCLineIsFree(t *testing.T) {
	if testkit.RaceEnabled {
		t.Skip("the race detector makes sync.Pool, which slog's handlers use, drop items at random")
	}
	l := rpcLog{log: slog.New(TraceLogHandler(slog.NewJSONHandler(io.Discard, nil)))}
	unpriced := completionSummary{id: "cmpl_test", reason: recovery.Completed, stopReason: recovery.StopEndTurn, route: "sim", attempts: 1}
	priced := unpriced
	priced.cost, priced.costKnown = 0.0123, true
	for _, tc := range []struct {
		name string
		sum  completionSummary
		err  error
	}{{"OK", unpriced, nil}, {"failed", unpriced, status.Error(codes.InvalidArgument, "bad")}, {"priced", priced, nil}} {
		sum := tc.sum
		want := 2.0
		if sum.costKnown {
			want++ // cost_usd, boxed as grpc.time_ms is
		}
		if tc.err != nil {
			want += testing.AllocsPerRun(100, func() { _, _ = status.Code(tc.err), tc.err.Error() })
		}
		s := &rpcScope{parent: context.Background()}
		start := time.Now().Add(-time.Second) // a time_ms the JSON handler boxes
		n := testing.AllocsPerRun(100, func() {
			s.closed, s.has = false, false
			s.offer(sum)
			l.line(s, s, "/completion.v1.Completion/Stream", start, tc.err)
		})
		if n > want {
			t.Errorf("%s: the RPC's line allocates %v times, want %v", tc.name, n, want)
		}
	}
}
