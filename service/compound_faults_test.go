package service

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	pt "github.com/completiond/completiond/provider/providertest"
)

// Compound failures end to end: the whole service over the real anthropic
// and openai providers and the providertest wire servers. Each test is one
// of issue 9's defects, failing before the machine owned delivery.

// compoundEnv serves one primary route over a wire server of kind.
type compoundEnv struct {
	client   completionv1.CompletionClient
	upstream *pt.Server
	grpc     *GRPC
}

func newCompoundEnv(t *testing.T, kind string, script pt.Script, prefill bool, mutate ...func(*Config)) *compoundEnv {
	t.Helper()
	srv := upstreamServer(t, kind, script)
	routes := map[string]*config.Route{primaryRoute: upstreamRoute(primaryRoute, primaryModel, kind,
		realProvider(t, kind, srv, "sk-test-7Hq2xV9pLm4T"), 200_000, prefill, generous)}
	cfg := faultConfig(routes)
	for _, m := range mutate {
		m(&cfg)
	}
	client, g := grpcClient(t, cfg)
	return &compoundEnv{client: client, upstream: srv, grpc: g}
}

func (e *compoundEnv) stream(t *testing.T, req *completionv1.CompleteRequest) ([]*completionv1.CompletionEvent, *status.Status) {
	t.Helper()
	return (&testEnv{client: e.client}).streamAll(t, req)
}

// toolCallIDs are the ids of the tool_call events, in order.
func toolCallIDs(evs []*completionv1.CompletionEvent) []string {
	var ids []string
	for _, ev := range evs {
		if tc := ev.GetToolCall(); tc != nil {
			ids = append(ids, tc.GetId())
		}
	}
	return ids
}

// deltaAttempts are the attempts whose text deltas were sent.
func deltaAttempts(evs []*completionv1.CompletionEvent) []int32 {
	var as []int32
	for _, ev := range evs {
		if ev.GetDelta() != nil && !slices.Contains(as, ev.GetAttempt()) {
			as = append(as, ev.GetAttempt())
		}
	}
	return as
}

var searchTool = []*completionv1.Tool{{Name: "search"}}

// Defect 1: a tool call cut by max_tokens is a truncation (escalation, the
// output discarded), not a broken stream retried with backoff, and it
// opens no circuit: five completions in a row leave the route closed.
func TestToolCallCutByMaxTokensEscalates(t *testing.T) {
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			cut := pt.ToolCutByLimit(pt.Answer{Model: primaryModel, Text: []string{"Let", " me", " search."},
				Tools: []pt.ToolCall{{ID: "call_cut", Name: "search", Args: []string{`{"q":`, ` "retr`}}}})
			whole := pt.OK(pt.Answer{Model: primaryModel, Text: []string{"Searching."},
				Tools: []pt.ToolCall{{ID: "call_whole", Name: "search", Args: []string{`{"q":"retry"}`}}}})
			var replies []pt.Reply
			for range 5 {
				replies = append(replies, cut, whole)
			}
			env := newCompoundEnv(t, kind, pt.Seq(replies...), false, func(c *Config) {
				c.Breaker = config.BreakerSettings{Failures: 2, Cooldown: time.Hour}
			})
			for i := range 5 {
				req := prompt("Find it.", nil)
				req.Tools = searchTool
				evs, st := env.stream(t, req)
				res := checkContract(t, evs, st)
				if got := transitions(evs); !slices.Equal(got, []string{"MAX_OUTPUT_TOKENS_ESCALATE", "COMPLETED"}) {
					t.Fatalf("completion %d: transitions %v, want an escalation", i, got)
				}
				if tr := transitionEvents(evs)[0].GetTransition(); !tr.GetDiscardOutput() || tr.GetBackoff().AsDuration() != 0 || tr.GetMaxTokens() != 64_000 {
					t.Errorf("escalation %v: want the output discarded, no backoff, max_tokens 64000", tr)
				}
				if ids := toolCallIDs(evs); !slices.Equal(ids, []string{"call_whole"}) {
					t.Errorf("tool calls sent %v, want only the whole one", ids)
				}
				if res.GetStopReason() != completionv1.StopReason_STOP_REASON_TOOL_USE {
					t.Errorf("stop reason %v", res.GetStopReason())
				}
			}
			if n := env.upstream.Count(); n != 10 {
				t.Errorf("%d upstream requests, want 2 per completion", n)
			}
			if s := env.grpc.Completion.breakers.States()[primaryRoute]; s != 0 {
				t.Errorf("circuit state %d after five cut tool calls, want closed", s)
			}
		})
	}
}

// Defect 2: the tool calls of an attempt that failed are never sent. On
// Anthropic's wire a tool_use block is complete at its content_block_stop:
// a stream that breaks after one restarts cleanly (a prefill carries text
// only). On OpenAI's, calls are complete only with the finish_reason: the
// broken attempt has none, and its text continues by prefill. Either way
// the Stream caller sees only the call of the attempt that finished, and an
// eager Session client (one that answers each tool_call at once) never
// answers a stale id.
func TestToolCallsOfAFailedAttemptAreNeverSent(t *testing.T) {
	broken := func() pt.Reply {
		return pt.ResetBeforeFinish(pt.Answer{Model: primaryModel, Text: []string{"Checking."},
			Tools: []pt.ToolCall{{ID: "call_stale", Name: "search", Args: []string{`{"q":"a"}`}}}})
	}
	whole := pt.OK(pt.Answer{Model: primaryModel, Tools: []pt.ToolCall{{ID: "call_live", Name: "search", Args: []string{`{"q":"a"}`}}}})
	recovered := map[string]string{"anthropic": "RETRY", "openai": "STREAM_RESUME"}
	kept := map[string]string{"anthropic": "", "openai": "Checking."}
	for _, kind := range providerKinds {
		t.Run(kind+"/stream", func(t *testing.T) {
			env := newCompoundEnv(t, kind, pt.Seq(broken(), whole), true)
			req := prompt("Find it.", nil)
			req.Tools = searchTool
			evs, st := env.stream(t, req)
			checkContract(t, evs, st)
			if got := transitions(evs); !slices.Equal(got, []string{recovered[kind], "COMPLETED"}) {
				t.Fatalf("transitions %v, want %s then COMPLETED", got, recovered[kind])
			}
			if ids := toolCallIDs(evs); !slices.Equal(ids, []string{"call_live"}) {
				t.Errorf("tool calls sent %v, want only call_live", ids)
			}
		})
		t.Run(kind+"/eager-session", func(t *testing.T) {
			env := newCompoundEnv(t, kind, pt.Seq(broken(), whole, pt.OK(full())), true)
			req := prompt("Find it.", nil)
			req.Tools = searchTool
			evs, st := eagerSession(t, env.client, req)
			res := checkContract(t, evs, st)
			if st.Code() != codes.OK || resultText(res) != kept[kind]+primaryText {
				t.Fatalf("session ended %v with %q", st, resultText(res))
			}
			if ids := toolCallIDs(evs); !slices.Equal(ids, []string{"call_live"}) {
				t.Errorf("tool calls sent %v, want only call_live", ids)
			}
		})
	}
}

// Defect 3: settled delivery never sends output that is later discarded:
// a cut resumed by prefill whose prefill is then refused, and an answer
// continued after max_tokens that the output schema then blocks.
func TestSettledDeliveryHoldsUntilSettled(t *testing.T) {
	for _, kind := range providerKinds {
		t.Run(kind+"/cut-then-refused-prefill", func(t *testing.T) {
			env := newCompoundEnv(t, kind, pt.Seq(pt.CutAfter(cutAt, full()), pt.Fail(pt.PrefillRefused), pt.OK(full())), true)
			req := prompt("Explain recovery.", nil)
			req.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
			evs, st := env.stream(t, req)
			res := checkDelivery(t, evs, st, true)
			if got := transitions(evs); !slices.Equal(got, []string{"STREAM_RESUME", "RETRY", "COMPLETED"}) {
				t.Fatalf("transitions %v", got)
			}
			if as := deltaAttempts(evs); !slices.Equal(as, []int32{3}) || resultText(res) != primaryText {
				t.Errorf("deltas of attempts %v sent, answer %q; want only attempt 3's", as, resultText(res))
			}
		})
		t.Run(kind+"/stop-hook-block-after-continuation", func(t *testing.T) {
			part := func(toks ...string) pt.Reply {
				return pt.OK(pt.Answer{Model: primaryModel, Text: toks, Limit: true})
			}
			env := newCompoundEnv(t, kind, pt.Seq(part("Part", " one,"), pt.OK(pt.Answer{Model: primaryModel, Text: []string{" part", " two."}}),
				pt.OK(pt.Answer{Model: primaryModel, Text: []string{`{"parts":`, ` 2}`}})), false)
			req := prompt("Answer in JSON.", nil)
			req.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
			req.OutputJsonSchema = `{"type":"object"}`
			req.Policy = &completionv1.Policy{DisableEscalation: true}
			evs, st := env.stream(t, req)
			res := checkDelivery(t, evs, st, true)
			want := []string{"MAX_OUTPUT_TOKENS_RECOVERY", "STOP_HOOK_BLOCKING", "COMPLETED"}
			if got := transitions(evs); !slices.Equal(got, want) {
				t.Fatalf("transitions %v, want %v", got, want)
			}
			if as := deltaAttempts(evs); !slices.Equal(as, []int32{3}) || resultText(res) != `{"parts": 2}` {
				t.Errorf("deltas of attempts %v sent, answer %q; want only attempt 3's", as, resultText(res))
			}
		})
	}
}

// Defect 4: a summary is a phase of the one machine. In a Session at turn
// 2, a prompt too long is compacted by a summary that is itself rate
// limited: every try is an attempt of its own, the RETRY carries turn 2,
// and nothing goes backwards.
func TestSummaryRetriesAsAttemptsOfTheSession(t *testing.T) {
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			summary := pt.OK(pt.Answer{Model: primaryModel, Text: []string{"Earlier:", " greetings."}})
			env := newCompoundEnv(t, kind, pt.Seq(
				pt.OK(pt.Answer{Model: primaryModel, Tools: []pt.ToolCall{{ID: "call_1", Name: "search", Args: []string{`{}`}}}}),
				pt.Fail(pt.ContextExceeded), pt.RateLimited(""), summary, pt.OK(full())), false)
			req := conversationRequest(10)
			req.Tools = searchTool
			evs, st := eagerSession(t, env.client, req)
			res := checkContract(t, evs, st)
			want := []string{"NEXT_TURN", "RETRY", "REACTIVE_COMPACT_RETRY", "COMPLETED"}
			if got := transitions(evs); !slices.Equal(got, want) {
				t.Fatalf("transitions %v, want %v", got, want)
			}
			retry := transitionEvents(evs)[1]
			if retry.GetTurn() != 2 || retry.GetAttempt() != 3 {
				t.Errorf("the summary's RETRY is attempt %d turn %d, want attempt 3 turn 2", retry.GetAttempt(), retry.GetTurn())
			}
			var outcomes []string
			for i, a := range res.GetAttempts() {
				if a.GetAttempt() != int32(i+1) {
					t.Errorf("attempt records %v", res.GetAttempts())
				}
				outcomes = append(outcomes, strings.TrimPrefix(a.GetOutcome().String(), "ATTEMPT_OUTCOME_"))
			}
			wantOutcomes := []string{"ANSWERED", "FAILED", "FAILED", "DISCARDED", "ANSWERED"}
			if !slices.Equal(outcomes, wantOutcomes) {
				t.Errorf("attempt outcomes %v, want %v", outcomes, wantOutcomes)
			}
			if n := env.upstream.Count(); n != 5 {
				t.Errorf("%d upstream requests, want 5", n)
			}
		})
	}
}

// conversationRequest is a conversation of n short messages, enough for
// compaction to have a middle to summarise.
func conversationRequest(n int) *completionv1.CompleteRequest {
	req := prompt("Start.", nil)
	for i := 1; i < n; i++ {
		role := completionv1.Role_ROLE_ASSISTANT
		if i%2 == 0 {
			role = completionv1.Role_ROLE_USER
		}
		req.Messages = append(req.Messages, &completionv1.Message{Role: role,
			Content: []*completionv1.ContentBlock{convert.TextBlock("message " + strings.Repeat("x", i))}})
	}
	return req
}

// Defect 12: the idle limit times the upstream's silence, not the caller's
// back-pressure. A caller that stops reading for three idle limits, while a
// large answer fills the HTTP/2 window, gets the whole answer from one
// attempt: no timeout, no retry.
func TestSlowReaderIsNotAnIdleUpstream(t *testing.T) {
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			tokens := make([]string, 300)
			for i := range tokens {
				tokens[i] = " " + strings.Repeat("y", 2047)
			}
			srv := upstreamServer(t, kind, pt.Always(pt.OK(pt.Answer{Model: primaryModel, Text: tokens})))
			idle := 800 * time.Millisecond // long enough that a loaded machine does not make the upstream look idle
			to := generous
			to.Idle = idle
			routes := map[string]*config.Route{primaryRoute: upstreamRoute(primaryRoute, primaryModel, kind,
				realProvider(t, kind, srv, "sk-test-7Hq2xV9pLm4T"), 200_000, false, to)}
			srvc, err := New(faultConfig(routes))
			if err != nil {
				t.Fatal(err)
			}
			g := NewGRPC(srvc)
			client := slowWindowClient(t, g)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			s, err := client.Stream(ctx, prompt("Write a lot.", nil))
			if err != nil {
				t.Fatal(err)
			}
			first, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * idle) // the caller reads nothing: the server's sends block on the window
			rest, st := recvAll(s.Recv)
			evs := append([]*completionv1.CompletionEvent{first}, rest...)
			res := checkContract(t, evs, st)
			if got := transitions(evs); !slices.Equal(got, []string{"COMPLETED"}) {
				t.Errorf("transitions %v: a slow reader made the upstream look idle", got)
			}
			if n := srv.Count(); n != 1 || len(resultText(res)) != 300*2048 {
				t.Errorf("%d upstream requests, answer of %d bytes", n, len(resultText(res)))
			}
		})
	}
}

// slowWindowClient serves g on bufconn to a client whose HTTP/2 windows are
// fixed at 64 KiB (no BDP growth), so a caller that stops reading makes the
// server's sends block soon.
func slowWindowClient(t *testing.T, g *GRPC) completionv1.CompletionClient {
	t.Helper()
	lis := bufconn.Listen(64 << 10)
	go func() { _ = g.Server.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Server.Stop()
	})
	return completionv1.NewCompletionClient(conn)
}

// The policy's ceilings and the upstream's word, end to end: a Retry-After
// over the ceiling is not waited for (RESOURCE_EXHAUSTED carrying the
// upstream's wait), and a 500 with x-should-retry: false is not retried and
// ends UNAVAILABLE, the outage class (not INTERNAL).
func TestUpstreamWaitsAndRefusalsEndTyped(t *testing.T) {
	for _, kind := range providerKinds {
		t.Run(kind+"/retry-after-over-the-ceiling", func(t *testing.T) {
			env := newCompoundEnv(t, kind, pt.Always(pt.RateLimited("86400")), false)
			start := time.Now()
			evs, st := env.stream(t, prompt("Explain recovery.", nil))
			checkContract(t, evs, st)
			ri := retryInfo(st)
			if st.Code() != codes.ResourceExhausted || ri == nil || ri.GetRetryDelay().AsDuration() != 24*time.Hour {
				t.Errorf("status %v RetryInfo %v, want RESOURCE_EXHAUSTED retryable after 24h", st, ri)
			}
			if n := env.upstream.Count(); n != 1 || time.Since(start) > 5*time.Second {
				t.Errorf("%d requests in %v: the day-long wait must not be taken", n, time.Since(start))
			}
		})
		t.Run(kind+"/should-retry-false", func(t *testing.T) {
			env := newCompoundEnv(t, kind, pt.Always(pt.Fail(pt.ServerError).With("x-should-retry", "false")), false)
			evs, st := env.stream(t, prompt("Explain recovery.", nil))
			checkContract(t, evs, st)
			if st.Code() != codes.Unavailable || env.upstream.Count() != 1 {
				t.Errorf("status %v after %d requests, want UNAVAILABLE after 1", st, env.upstream.Count())
			}
		})
	}
}

// A request's policy moves only in the safe direction: backoff cannot be
// shrunk below the server's, budgets cannot be raised.
func TestPolicyOverridesOnlyTighten(t *testing.T) {
	env := newTestEnv(t)
	cases := []struct {
		field  string
		policy *completionv1.Policy
	}{
		{"policy.backoff_base", &completionv1.Policy{BackoffBase: durationpb.New(time.Nanosecond)}},
		{"policy.backoff_max", &completionv1.Policy{BackoffMax: durationpb.New(time.Nanosecond)}},
		{"policy.fallback_retries", &completionv1.Policy{FallbackRetries: ptr(int32(50))}},
		{"policy.retry_after_ceiling", &completionv1.Policy{RetryAfterCeiling: durationpb.New(48 * time.Hour)}},
		{"policy.fallback_wait", &completionv1.Policy{FallbackWait: durationpb.New(time.Hour)}},
	}
	for _, tc := range cases {
		req := faults("ok")
		req.Policy = tc.policy
		_, st := env.streamAll(t, req)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) {
			t.Errorf("%s: status %v, want INVALID_ARGUMENT naming it", tc.field, st)
		}
	}
	req := faults("rate_limit,ok")
	req.Policy = &completionv1.Policy{BackoffBase: durationpb.New(5 * time.Millisecond), RetryAfterCeiling: durationpb.New(time.Second),
		FallbackRetries: ptr(int32(1)), FallbackWait: durationpb.New(time.Second)}
	evs, st := env.streamAll(t, req)
	checkContract(t, evs, st)
	if tr := transitionEvents(evs); len(tr) < 2 || tr[0].GetTransition().GetBackoff().AsDuration() < 5*time.Millisecond {
		t.Errorf("transitions %v: a raised backoff must be used", transitions(evs))
	}
}
