package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStreamRetriesARateLimitThenCompletes(t *testing.T) {
	env := newTestEnv(t)
	evs, st := env.streamAll(t, faults("rate_limit"))
	res := checkContract(t, evs, st)
	if got, want := transitions(evs), []string{"RETRY", "COMPLETED"}; !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	retry := findTransition(evs, completionv1.TransitionReason_TRANSITION_REASON_RETRY)
	// base 1 ms, first retry, jitter 0.5 of 25 %: 1.125 ms.
	if got := retry.GetBackoff().AsDuration(); got != 1125*time.Microsecond {
		t.Errorf("backoff %v, want 1.125ms", got)
	}
	if retry.GetError().GetHttpStatus() != 429 || retry.GetError().GetKind() != completionv1.ErrorKind_ERROR_KIND_RATE_LIMIT {
		t.Errorf("retry error %v, want a 429 rate limit", retry.GetError())
	}
	if res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN || res.GetTruncated() {
		t.Errorf("result stop %v truncated %v", res.GetStopReason(), res.GetTruncated())
	}
	if resultText(res) == "" || countDeltas(evs) != 12 {
		t.Errorf("answer %q from %d deltas, want 12 tokens", resultText(res), countDeltas(evs))
	}
	if got := len(res.GetAttempts()); got != 2 || res.GetAttempts()[0].GetOutcome() != completionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED {
		t.Errorf("attempts %v, want a failed one then an answered one", res.GetAttempts())
	}
}

func TestRetryAfterReplacesBackoff(t *testing.T) {
	env := newTestEnv(t)
	evs, st := env.streamAll(t, faults("rate_limit=30ms"))
	checkContract(t, evs, st)
	retry := findTransition(evs, completionv1.TransitionReason_TRANSITION_REASON_RETRY)
	if got := retry.GetBackoff().AsDuration(); got != 30*time.Millisecond {
		t.Errorf("backoff %v, want the Retry-After of 30ms, unjittered", got)
	}
}

func TestThreeOverloadsFallBack(t *testing.T) {
	env := newTestEnv(t)
	evs, st := env.streamAll(t, faults("overload*3"))
	res := checkContract(t, evs, st)
	got := transitions(evs)
	if !slices.Contains(got, "MODEL_FALLBACK") || got[len(got)-1] != "COMPLETED" {
		t.Fatalf("transitions %v, want a MODEL_FALLBACK and COMPLETED", got)
	}
	fb := findTransition(evs, completionv1.TransitionReason_TRANSITION_REASON_MODEL_FALLBACK)
	if fb.GetFromRoute() != "sim" || fb.GetToRoute() != "sim-fallback" || fb.GetToModel() != "sim-2" {
		t.Errorf("fallback %v, want sim → sim-fallback (sim-2)", fb)
	}
	if res.GetRoute() != "sim-fallback" || res.GetModel() != "sim-2" {
		t.Errorf("result from %s/%s, want sim-fallback/sim-2", res.GetRoute(), res.GetModel())
	}
}

func TestCompleteAggregates(t *testing.T) {
	env := newTestEnv(t)
	resp, err := env.client.Complete(t.Context(), faults("server_error=503"))
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, tr := range resp.GetTransitions() {
		reasons = append(reasons, tr.GetReason().String())
	}
	want := []string{"TRANSITION_REASON_RETRY", "TRANSITION_REASON_COMPLETED"}
	if !slices.Equal(reasons, want) {
		t.Errorf("transitions %v, want %v", reasons, want)
	}
	if resultText(resp.GetResult()) == "" || resp.GetCompletionId() == "" {
		t.Errorf("empty answer or id: %v", resp)
	}
}

func TestSettledDeliveryNeverSendsDiscardedTokens(t *testing.T) {
	env := newTestEnv(t)
	req := prompt("Tell me about recovery.", map[string]string{"sim.faults": "cut=4"})
	req.Route = "sim-noprefill" // a clean restart discards the cut attempt
	req.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	for _, ev := range evs {
		if ev.GetDelta() != nil && ev.GetAttempt() == 1 {
			t.Fatalf("a token of the discarded attempt 1 was sent: %v", ev)
		}
	}
	if countDeltas(evs) != 12 || resultText(res) == "" {
		t.Errorf("%d deltas, want the 12 of the clean answer", countDeltas(evs))
	}
}

func TestPermanentErrorEndsTypedWithoutRetry(t *testing.T) {
	env := newTestEnv(t)
	evs, st := env.streamAll(t, faults("content_filter"))
	res := checkContract(t, evs, st)
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_MODEL_ERROR {
		t.Fatalf("reason %v, want MODEL_ERROR", res.GetReason())
	}
	if st.Code() != codes.FailedPrecondition || retryInfo(st) != nil {
		t.Errorf("status %v with RetryInfo %v, want FailedPrecondition without", st.Code(), retryInfo(st))
	}
	if n := env.upstream.calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1: a content filter is never retried", n)
	}
}

func TestExhaustedRetriesAreUnavailableWithRetryInfo(t *testing.T) {
	env := newTestEnv(t)
	req := faults("server_error*20")
	req.Policy = &completionv1.Policy{MaxRetries: ptr(int32(2)), DisableFallback: true}
	evs, st := env.streamAll(t, req)
	checkContract(t, evs, st)
	if st.Code() != codes.Unavailable || retryInfo(st) == nil {
		t.Errorf("status %v, RetryInfo %v: want Unavailable with RetryInfo", st.Code(), retryInfo(st))
	}
	if n := env.upstream.calls.Load(); n != 3 {
		t.Errorf("%d upstream calls, want 1 + 2 retries", n)
	}
}

func TestCallerCancelStopsTheUpstream(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	req := prompt("slow", map[string]string{"sim.pace": "50ms", "sim.words": "1000"})
	st, err := env.client.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // started and two tokens
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	for {
		if _, err := st.Recv(); err != nil {
			if statusOf(err).Code() != codes.Canceled {
				t.Errorf("status %v, want Canceled", err)
			}
			break
		}
	}
	// goleak in TestMain proves the upstream stream and the driver ended.
}

func TestHealthServesAndTurnsNotServingOnDrain(t *testing.T) {
	srv, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPC(srv)
	conn := serveBufconn(t, g)
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	resp, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "completion.v1.Completion"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v, want SERVING", resp, err)
	}
	watch, err := health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch %v %v", first, err)
	}
	go g.Drain(t.Context())
	if next, err := watch.Recv(); err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after drain began: %v %v, want NOT_SERVING", next, err)
	}
}

func ptr[T any](v T) *T { return &v }

func countDeltas(evs []*completionv1.CompletionEvent) int {
	n := 0
	for _, ev := range evs {
		if ev.GetDelta() != nil {
			n++
		}
	}
	return n
}

func findTransition(evs []*completionv1.CompletionEvent, r completionv1.TransitionReason) *completionv1.Transition {
	for _, ev := range evs {
		if tr := ev.GetTransition(); tr.GetReason() == r {
			return tr
		}
	}
	return nil
}

func TestDrainEndsInFlightStreamsTyped(t *testing.T) {
	env := newTestEnv(t)
	req := prompt("slow", map[string]string{"sim.pace": "20ms", "sim.words": "10000"})
	st, err := env.client.Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // started: the completion is in flight
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	drained := make(chan struct{})
	go func() { env.grpc.Drain(ctx); close(drained) }()
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := st.Recv()
		if err != nil {
			s := statusOf(err)
			if s.Code() != codes.Unavailable || errorInfo(s).GetReason() != "ABORTED_STREAMING" || retryInfo(s) == nil {
				t.Errorf("status %v %v, want Unavailable, ABORTED_STREAMING, RetryInfo", s.Code(), s.Details())
			}
			break
		}
		evs = append(evs, ev)
	}
	if got := transitions(evs); len(got) != 1 || got[0] != "ABORTED_STREAMING" {
		t.Errorf("transitions %v, want one terminal ABORTED_STREAMING", got)
	}
	if evs[len(evs)-1].GetResult() == nil {
		t.Error("the result must follow the terminal transition")
	}
	<-drained
}

func TestStreamEndsAToolCallWithToolUse(t *testing.T) {
	env := newTestEnv(t)
	req := faults("tool_use=search")
	req.Tools = []*completionv1.Tool{{Name: "search"}}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if res.GetStopReason() != completionv1.StopReason_STOP_REASON_TOOL_USE || st.Code() != codes.OK {
		t.Fatalf("stop %v status %v, want TOOL_USE and OK", res.GetStopReason(), st.Code())
	}
	var calls []*completionv1.ToolUseBlock
	for _, c := range res.GetMessage().GetContent() {
		if tu := c.GetToolUse(); tu != nil {
			calls = append(calls, tu)
		}
	}
	if len(calls) != 1 || calls[0].GetName() != "search" || calls[0].GetId() == "" || calls[0].GetInput().GetFields()["query"] == nil {
		t.Errorf("result tool calls %v, want one search call with its input", calls)
	}
	// A stateless caller continues by calling again with the result appended.
	req.Messages = append(req.Messages, res.GetMessage(), &completionv1.Message{Role: completionv1.Role_ROLE_USER,
		Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_ToolResult{
			ToolResult: &completionv1.ToolResultBlock{ToolUseId: calls[0].GetId(), Text: "42"}}}}})
	req.Metadata = nil
	evs, st = env.streamAll(t, req)
	if res := checkContract(t, evs, st); res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN {
		t.Errorf("second call stopped %v, want END_TURN", res.GetStopReason())
	}
}

// datedModel answers like the sim but names a dated model, as real APIs do
// for an alias.
type datedModel struct{ provider.Provider }

func (d datedModel) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	fin, err := d.Provider.Stream(ctx, req, emit)
	fin.Model = req.Model + "-20261122"
	return fin, err
}

func TestResultReportsTheModelTheUpstreamNamed(t *testing.T) {
	env := newTestEnv(t, func(c *Config) {
		for _, r := range c.Routes {
			r.Upstream = datedModel{r.Upstream}
		}
	})
	evs, st := env.streamAll(t, faults("overload*3"))
	res := checkContract(t, evs, st)
	if res.GetRoute() != "sim-fallback" || res.GetModel() != "sim-2-20261122" {
		t.Errorf("answered by %s/%s, want sim-fallback/sim-2-20261122", res.GetRoute(), res.GetModel())
	}
	if a := res.GetAttempts()[0]; a.GetModel() != "sim-1-20261122" || a.GetOutcome() != completionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED {
		t.Errorf("first attempt %v", a)
	}
}

func TestSettledDeliveryHoldsAnAnswerUntilTheStopHookAllowsIt(t *testing.T) {
	env := newTestEnv(t)
	req := prompt("Give me a status object.", map[string]string{sim.MetaReply + ".1": "Sure! Status: ok",
		sim.MetaReply + ".2": `{"status": "ok"}`})
	req.OutputJsonSchema = `{"type": "object", "required": ["status"]}`
	req.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
	evs, st := env.streamAll(t, req)
	checkContract(t, evs, st)
	for _, ev := range evs {
		if d := ev.GetDelta(); d != nil && ev.GetAttempt() == 1 {
			t.Fatalf("the blocked answer was sent: %v", ev)
		}
	}
	if countDeltas(evs) != 2 {
		t.Errorf("%d deltas, want the 2 of the accepted answer", countDeltas(evs))
	}
}

func TestSettledDeliveryStillHandsToolCallsToASession(t *testing.T) {
	env := newTestEnv(t)
	start := sessionStart("tool_use")
	start.Request.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
	s := env.session(t, start)
	s.answer(s.toolCall().GetId(), "42", false)
	if _, code := s.end(); code != codes.OK {
		t.Errorf("status %v", code)
	}
}

// TestResultNamesNoModelWithoutAnAnswer: a completion no attempt answered
// names no model in its result.
func TestResultNamesNoModelWithoutAnAnswer(t *testing.T) {
	env := newTestEnv(t)
	evs, st := env.streamAll(t, faults("content_filter"))
	res := checkContract(t, evs, st)
	if res.GetModel() != "" {
		t.Errorf("result model %q, but no attempt answered", res.GetModel())
	}
	ok, st := env.streamAll(t, faults("ok"))
	if res := checkContract(t, ok, st); res.GetModel() == "" {
		t.Errorf("an answered completion names no model")
	}
}

// TestOpenCircuitIsNoAttempt: a call the open circuit keeps from leaving is
// not an attempt (no record, no usage), and the completion ends UNAVAILABLE
// with RetryInfo carrying the circuit's remaining cool-down.
func TestOpenCircuitIsNoAttempt(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.Breaker = config.BreakerSettings{Failures: 1, Cooldown: time.Hour} })
	req := faults("server_error")
	req.Policy = &completionv1.Policy{MaxRetries: ptr(int32(0)), DisableFallback: true}
	evs, st := env.streamAll(t, req)
	checkContract(t, evs, st)
	calls := env.upstream.calls.Load()

	again := faults("ok") // same route, its circuit now open, nowhere to fall back
	again.Policy = &completionv1.Policy{DisableFallback: true}
	evs, st = env.streamAll(t, again)
	res := checkContract(t, evs, st)
	if env.upstream.calls.Load() != calls {
		t.Errorf("a call went out through an open circuit")
	}
	if n := len(res.GetAttempts()); n != 0 {
		t.Errorf("%d attempt records for a call that was never sent: %v", n, res.GetAttempts())
	}
	ri := retryInfo(st)
	if st.Code() != codes.Unavailable || ri == nil || ri.GetRetryDelay().AsDuration() < 59*time.Minute {
		t.Errorf("status %v with RetryInfo %v, want UNAVAILABLE retryable after the cool-down (~1h)", st, ri)
	}
}
