package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// chaosSteps are the sim faults compound scripts are drawn from: each
// attempt of a completion takes the next step of its script.
var chaosSteps = []string{"ok", "cut=3", "cut=1", "prefill_rejected", "max_tokens=3", "max_tokens=2", "rate_limit",
	"overload", "server_error", "server_error=503", "reset", "stream_overload=2", "tool_use", "short=3",
	"tool_cut", "tool_reset"}

// chaosScript draws a compound fault script: several faults in a row, so
// that a recovery meets the next failure (a cut then a refused prefill, a
// cut inside a tool call, a stop-hook block after a continuation …).
func chaosScript(r *rand.Rand) string {
	steps := make([]string, 1+r.IntN(5))
	for i := range steps {
		steps[i] = chaosSteps[r.IntN(len(chaosSteps))]
	}
	return strings.Join(steps, ",")
}

// chaosRequest draws a request around a compound script: a route with or
// without prefill, sometimes an output schema (the built-in stop hook,
// which blocks answers that are not JSON), sometimes a token budget.
func chaosRequest(r *rand.Rand, settled bool) *completionv1.CompleteRequest {
	req := faults(chaosScript(r))
	req.Tools = []*completionv1.Tool{{Name: "search"}}
	req.Route = []string{"sim", "sim", "sim-noprefill"}[r.IntN(3)]
	if r.IntN(4) == 0 {
		req.OutputJsonSchema = `{"type":"object"}`
	}
	if r.IntN(5) == 0 {
		req.TokenBudget = 40
	}
	if settled {
		req.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
	}
	return req
}

// TestChaosStreamContract runs compound fault scripts through Stream in both
// delivery modes and checks the wire contract on every stream: one terminal
// transition and a status that agrees, kept deltas equal to the answer, tool
// calls never discarded and equal to the result's, settled delivery never
// sending discarded output, turn and attempt never going backwards.
func TestChaosStreamContract(t *testing.T) {
	env := newTestEnv(t)
	runs := 300
	if testing.Short() {
		runs = 60
	}
	for _, settled := range []bool{false, true} {
		r := rand.New(rand.NewPCG(uint64(runs), 9))
		for i := range runs {
			req := chaosRequest(r, settled)
			t.Run(fmt.Sprintf("settled=%t/%d/%s", settled, i, req.GetMetadata()[sim.MetaFaults]), func(t *testing.T) {
				evs, st := env.streamAll(t, req)
				checkDelivery(t, evs, st, settled)
			})
		}
	}
}

// TestChaosEagerSessionNeverAnswersAStaleCall runs compound scripts through
// Session with an eager client, one that answers every tool_call event the
// moment it arrives (as examples/toolloop does): every call it answers is
// one the model is waiting for, so no session ends INVALID_ARGUMENT.
func TestChaosEagerSessionNeverAnswersAStaleCall(t *testing.T) {
	env := newTestEnv(t)
	runs := 150
	if testing.Short() {
		runs = 40
	}
	for _, settled := range []bool{false, true} {
		r := rand.New(rand.NewPCG(uint64(runs), 11))
		for i := range runs {
			req := chaosRequest(r, settled)
			t.Run(fmt.Sprintf("settled=%t/%d/%s", settled, i, req.GetMetadata()[sim.MetaFaults]), func(t *testing.T) {
				evs, st := eagerSession(t, env.client, req)
				if st.Code() == codes.InvalidArgument {
					t.Fatalf("the eager client broke the protocol: %v", st)
				}
				checkDelivery(t, evs, st, settled)
			})
		}
	}
}

// eagerSession runs req as a Session whose client answers each tool call as
// soon as it arrives and allows every answer its stop hook is asked about.
func eagerSession(t *testing.T, client completionv1.CompletionClient, req *completionv1.CompleteRequest) ([]*completionv1.CompletionEvent, *status.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := client.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := &completionv1.SessionStart{Request: req, MaxTurns: 4}
	if err := s.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}}); err != nil {
		t.Fatal(err)
	}
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return evs, status.New(codes.OK, "")
		}
		if err != nil {
			return evs, status.Convert(err)
		}
		evs = append(evs, ev)
		if tc := ev.GetToolCall(); tc != nil {
			res := &completionv1.ToolResultBlock{ToolUseId: tc.GetId(), Text: "result"}
			_ = s.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{
				ToolResults: &completionv1.ToolResults{Results: []*completionv1.ToolResultBlock{res}}}})
		}
		if hr := ev.GetStopHookRequest(); hr != nil {
			_ = s.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{
				StopHookVerdict: &completionv1.StopHookVerdict{HookId: hr.GetHookId(), Verdict: completionv1.Verdict_VERDICT_ALLOW}}})
		}
	}
}
