package service

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// TestOneLinePerRPC checks what each kind of RPC logs at INFO: one line,
// "finished call", which reports the completion the RPC ran (its id,
// reason, stop reason, attempts and tokens) and no line of the completion's
// own; a completion that ends with a failure also logs its terminal
// transition; a request refused before any completion reports none.
func TestOneLinePerRPC(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(t *testing.T, e *testEnv) string // runs the RPC, returns the completion id ("" for none)
		// the RPC's line: method, code, level, reason and attempts
		method, code, level, reason string
		attempts                    float64
		transitions                 int // transition lines
	}{
		{name: "clean Stream", method: "Stream", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 1,
			call: func(t *testing.T, e *testEnv) string {
				evs, st := e.streamAll(t, prompt("hi", nil))
				checkContract(t, evs, st)
				return evs[0].GetStarted().GetCompletionId()
			}},
		{name: "Stream with a retry", method: "Stream", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 2, transitions: 1,
			call: func(t *testing.T, e *testEnv) string {
				evs, st := e.streamAll(t, faults("rate_limit"))
				checkContract(t, evs, st)
				return evs[0].GetStarted().GetCompletionId()
			}},
		{name: "clean Complete", method: "Complete", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 1,
			call: func(t *testing.T, e *testEnv) string {
				resp, err := e.client.Complete(t.Context(), prompt("hi", nil))
				if err != nil {
					t.Fatal(err)
				}
				return resp.GetCompletionId()
			}},
		{name: "Stream ended by a content filter", method: "Stream", code: "FailedPrecondition", level: "WARN", reason: "MODEL_ERROR",
			attempts: 1, transitions: 1,
			call: func(t *testing.T, e *testEnv) string {
				evs, st := e.streamAll(t, faults("content_filter"))
				checkContract(t, evs, st)
				return evs[0].GetStarted().GetCompletionId()
			}},
		{name: "Session", method: "Session", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 1,
			call: func(t *testing.T, e *testEnv) string {
				s := e.session(t, sessionStart("ok"))
				if _, code := s.end(); code != codes.OK {
					t.Fatalf("Session ended %v", code)
				}
				return s.events[0].GetStarted().GetCompletionId()
			}},
		{name: "invalid request", method: "Stream", code: "InvalidArgument", level: "INFO",
			call: func(t *testing.T, e *testEnv) string {
				_, st := e.streamAll(t, &completionv1.CompleteRequest{})
				if st.Code() != codes.InvalidArgument {
					t.Fatalf("status %v", st)
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf syncBuffer
			e := newTestEnv(t, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
			id := tc.call(t, e)
			// The RPC's line is written before its status is sent: it is
			// in the buffer once the call has ended.
			var rpc []map[string]any
			transitions := 0
			for _, l := range logLines(t, buf.String()) {
				switch l["msg"] {
				case "finished call":
					rpc = append(rpc, l)
				case "transition":
					transitions++
				default:
					t.Errorf("unexpected line %v", l)
				}
			}
			if len(rpc) != 1 {
				t.Fatalf("%d RPC lines, want 1:\n%s", len(rpc), buf.String())
			}
			l := rpc[0]
			if l["grpc.method"] != tc.method || l["grpc.code"] != tc.code || l["level"] != tc.level {
				t.Errorf("RPC line %v, want method %s, code %s, level %s", l, tc.method, tc.code, tc.level)
			}
			if transitions != tc.transitions {
				t.Errorf("%d transition lines, want %d:\n%s", transitions, tc.transitions, buf.String())
			}
			if id == "" {
				if _, ok := l["completion_id"]; ok {
					t.Errorf("RPC line %v reports a completion, and there was none", l)
				}
				return
			}
			if l["completion_id"] != id || l["reason"] != tc.reason || l["attempts"] != tc.attempts || l["route"] != "sim" {
				t.Errorf("RPC line %v, want completion %s, reason %s, %v attempts, route sim", l, id, tc.reason, tc.attempts)
			}
			for _, f := range []string{"stop_reason", "truncated", "input_tokens", "output_tokens"} {
				if _, ok := l[f]; !ok {
					t.Errorf("RPC line %v lacks %s", l, f)
				}
			}
		})
	}
}

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
			var buf syncBuffer
			o := newObserver(slog.New(slog.NewJSONHandler(&buf, nil)), Telemetry{}, nil)
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
			c := &completion{id: "cmpl_test", machine: recovery.Config{Routes: []recovery.Route{route}},
				started: &completionv1.Started{}, observer: o}
			c.observer.start(ctx, c)
			a := c.observer.attemptStart(ctx, c, recovery.Call{Attempt: 1, Route: route}, false)
			a.end(recovery.Event{Kind: recovery.EvAttemptDone}, provider.Finish{})
			c.observer.finish(c, &recovery.Result{Reason: recovery.Completed, StopReason: recovery.StopEndTurn, Route: route,
				Usage:    recovery.Usage{InputTokens: 3, OutputTokens: 5},
				Attempts: []recovery.AttemptRecord{{Attempt: 1, Route: route, Outcome: recovery.OutcomeAnswered}}})
			lines := logLines(t, buf.String())
			if got := len(lines) == 1 && lines[0]["msg"] == "completion finished"; got != tc.ownLine {
				t.Fatalf("own line %v, want %v:\n%s", got, tc.ownLine, buf.String())
			}
			if tc.ownLine {
				if l := lines[0]; l["completion_id"] != "cmpl_test" || l["output_tokens"] != 5.0 || l["reason"] != "COMPLETED" {
					t.Errorf("completion line %v", l)
				}
				return
			}
			sum, ok := s.close()
			if !ok || sum.id != "cmpl_test" || sum.output != 5 || sum.attempts != 1 {
				t.Errorf("the RPC's scope holds %+v, %v", sum, ok)
			}
		})
	}
}

// TestRPCLineIsFree guards the cost of the RPC's line, written to a JSON
// handler with a completion's summary: no field is boxed or formatted by
// the line itself. What allocates is the record's spill past its five
// inline fields, once, and the JSON handler's boxing of grpc.time_ms, a
// float, to encode it (8 bytes; the field is go-grpc-middleware's, a number
// of milliseconds); with an error, add what reading its code and text costs.
func TestRPCLineIsFree(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool, which slog's handlers use, drop items at random")
	}
	l := rpcLog{log: slog.New(TraceLogHandler(slog.NewJSONHandler(io.Discard, nil)))}
	sum := completionSummary{id: "cmpl_test", reason: recovery.Completed, stopReason: recovery.StopEndTurn, route: "sim", attempts: 1}
	for _, tc := range []struct {
		name string
		err  error
	}{{"OK", nil}, {"failed", status.Error(codes.InvalidArgument, "bad")}} {
		want := 2.0
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

// BenchmarkRPCLine writes what a clean Stream logs at INFO — the RPC's
// line, with the summary of its completion that the observer hands over —
// to a JSON handler behind TraceLogHandler, as the binary sets it up (to
// /dev/null: a write per line, as to stdout), scope included: the whole
// price of the per-request log.
func BenchmarkRPCLine(b *testing.B) {
	log := slog.New(TraceLogHandler(slog.NewJSONHandler(devNull(b), nil)))
	l, o := rpcLog{log: log}, observer{log: log}
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
