package service

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// recordingProvider keeps every request that reaches the upstream.
type recordingProvider struct {
	provider.Provider
	mu   sync.Mutex
	reqs []provider.Request
}

func (p *recordingProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, *req)
	p.mu.Unlock()
	return p.Provider.Stream(ctx, req, emit)
}

func (p *recordingProvider) requests() []provider.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
}

// kindRoutes adds routes of every provider kind to cfg, each served by up
// (a sim: the tests look at what reaches it, or that nothing does): claude
// (anthropic), claude-thinking (anthropic, thinking), gpt (openai), and
// sim-then-gpt (sim, falling back to gpt).
func kindRoutes(up provider.Provider) func(*Config) {
	return func(cfg *Config) {
		route := func(name, kind string, thinking bool, fallbacks ...string) *config.Route {
			r := &config.Route{Spec: recovery.Route{Name: name, Provider: kind, Model: name, MaxOutputTokens: 64_000, Prefill: !thinking, Thinking: thinking},
				Upstream: up, Fallbacks: fallbacks}
			if thinking {
				r.ThinkingBudget = 2048
			}
			return r
		}
		cfg.Routes["claude"] = route("claude", "anthropic", false)
		cfg.Routes["claude-thinking"] = route("claude-thinking", "anthropic", true)
		cfg.Routes["gpt"] = route("gpt", "openai", false)
		cfg.Routes["sim-then-gpt"] = route("sim-then-gpt", "sim", false, "gpt")
	}
}

func TestModelParametersAreRefusedBeforeAnyUpstreamCall(t *testing.T) {
	up := &countingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, kindRoutes(up))
	on := func(route string, mut func(r *completionv1.CompleteRequest)) *completionv1.CompleteRequest {
		r := prompt("hello", nil)
		r.Route = route
		r.Tools = []*completionv1.Tool{{Name: "lookup"}}
		mut(r)
		return r
	}
	tool := func(mode completionv1.ToolChoiceMode, name string) *completionv1.ToolChoice {
		return &completionv1.ToolChoice{Mode: mode, Name: name}
	}
	tests := []refusedRequest{
		{"temperature over 2", on("sim", func(r *completionv1.CompleteRequest) { r.Temperature = proto.Float64(2.5) }), "temperature", "between 0 and 2"},
		{"temperature NaN", on("sim", func(r *completionv1.CompleteRequest) { r.Temperature = proto.Float64(math.NaN()) }), "temperature", "NaN"},
		{"temperature over Anthropic's 1", on("claude", func(r *completionv1.CompleteRequest) { r.Temperature = proto.Float64(1.5) }), "temperature", `route "claude" takes a temperature between 0 and 1`},
		{"temperature on a thinking route", on("claude-thinking", func(r *completionv1.CompleteRequest) { r.Temperature = proto.Float64(0.2) }), "temperature", `route "claude-thinking" does not take a temperature`},
		{"top_p zero", on("sim", func(r *completionv1.CompleteRequest) { r.TopP = proto.Float64(0) }), "top_p", "(0, 1]"},
		{"top_p low on a thinking route", on("claude-thinking", func(r *completionv1.CompleteRequest) { r.TopP = proto.Float64(0.5) }), "top_p", "from 0.95"},
		{"top_k zero", on("sim", func(r *completionv1.CompleteRequest) { r.TopK = proto.Int32(0) }), "top_k", "at least 1"},
		{"top_k on OpenAI", on("gpt", func(r *completionv1.CompleteRequest) { r.TopK = proto.Int32(40) }), "top_k", `route "gpt" does not take top_k`},
		{"top_k on a fallback that cannot", on("sim-then-gpt", func(r *completionv1.CompleteRequest) { r.TopK = proto.Int32(40) }), "top_k", `route "gpt"`},
		{"seed on Anthropic", on("claude", func(r *completionv1.CompleteRequest) { r.Seed = proto.Int64(7) }), "seed", `route "claude" does not take a seed`},
		{"five stop sequences on OpenAI", on("gpt", func(r *completionv1.CompleteRequest) { r.StopSequences = []string{"a", "b", "c", "d", "e"} }), "stop_sequences", "at most 4"},
		{"seventeen stop sequences", on("sim", func(r *completionv1.CompleteRequest) {
			for i := range 17 {
				r.StopSequences = append(r.StopSequences, strings.Repeat("x", i+1))
			}
		}), "stop_sequences", "over the limit of 16"},
		{"empty stop sequence", on("sim", func(r *completionv1.CompleteRequest) { r.StopSequences = []string{"END", ""} }), "stop_sequences[1]", "empty"},
		{"long stop sequence", on("sim", func(r *completionv1.CompleteRequest) { r.StopSequences = []string{strings.Repeat("x", 1<<20)} }), "stop_sequences[0]", "over the limit of 256"},
		{"duplicate stop sequence", on("sim", func(r *completionv1.CompleteRequest) { r.StopSequences = []string{"END", "END"} }), "stop_sequences[1]", "duplicate"},
		{"named tool unknown", on("sim", func(r *completionv1.CompleteRequest) {
			r.ToolChoice = tool(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, "search")
		}), "tool_choice.name", "not one of the request's tools"},
		{"any without tools", on("sim", func(r *completionv1.CompleteRequest) {
			r.Tools, r.ToolChoice = nil, tool(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY, "")
		}), "tool_choice.mode", "needs tools"},
		{"name without mode tool", on("sim", func(r *completionv1.CompleteRequest) {
			r.ToolChoice = tool(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "lookup")
		}), "tool_choice.name", "TOOL_CHOICE_MODE_TOOL only"},
		{"unknown mode", on("sim", func(r *completionv1.CompleteRequest) { r.ToolChoice = tool(42, "") }), "tool_choice.mode", "unknown"},
		{"forced tool on a thinking route", on("claude-thinking", func(r *completionv1.CompleteRequest) {
			r.ToolChoice = tool(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY, "")
		}), "tool_choice.mode", `route "claude-thinking" cannot honour TOOL_CHOICE_MODE_ANY`},
		{"max total zero", on("sim", func(r *completionv1.CompleteRequest) { r.MaxTotalOutputTokens = proto.Int32(0) }), "max_total_output_tokens", "between 1 and"},
	}
	assertRefused(t, env, up, tests)
}

// refusedRequest is a bad request and the field violation it must get.
type refusedRequest struct {
	name  string
	req   *completionv1.CompleteRequest
	field string
	says  string // a part of the violation's description
}

// assertRefused streams each request and checks that it is refused with
// INVALID_ARGUMENT, its violation and a small status, and that none of
// them reached the upstream.
func assertRefused(t *testing.T, env *testEnv, up *countingProvider, tests []refusedRequest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, st := env.streamAll(t, tt.req)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("status %v, want InvalidArgument", st.Code())
			}
			if !hasViolationSaying(st.Details(), tt.field, tt.says) {
				t.Errorf("details %v lack a violation of %q saying %q", st.Details(), tt.field, tt.says)
			}
			if size := proto.Size(st.Proto()); size > 4096 {
				t.Errorf("the status is %d bytes: a refusedRequest stays small", size)
			}
		})
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream was called %d times for bad requests, want 0", n)
	}
}

// TestModelParametersReachEveryAttempt: the caller's parameters go
// unchanged to every attempt — the first, a retry after a rate limit, a
// stream resume by prefill, a fallback — and a fallback chain the request
// turns off is not held against it.
func TestModelParametersReachEveryAttempt(t *testing.T) {
	up := &recordingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, kindRoutes(up), func(cfg *Config) {
		for _, r := range cfg.Routes {
			r.Upstream = up
		}
	})
	req := prompt("Tell me about recovery.", map[string]string{sim.MetaFaults: "rate_limit=1ms,cut=3,overload*3"})
	req.Route = "sim-then-gpt"
	req.Temperature, req.TopP, req.Seed = proto.Float64(0), proto.Float64(0.9), proto.Int64(-42)
	req.StopSequences = []string{"\n\nHuman:", "</answer>"}
	req.Tools = []*completionv1.Tool{{Name: "lookup"}}
	req.ToolChoice = &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, DisableParallelToolUse: true}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	got := transitions(evs)
	for _, want := range []string{"RETRY", "STREAM_RESUME", "MODEL_FALLBACK", "COMPLETED"} {
		if !slices.Contains(got, want) {
			t.Fatalf("transitions %v lack %s", got, want)
		}
	}
	if res.GetRoute() != "gpt" {
		t.Errorf("answered by %q, want the fallback gpt", res.GetRoute())
	}
	reqs := up.requests()
	if len(reqs) != len(res.GetAttempts()) {
		t.Fatalf("%d requests reached the upstream for %d attempts", len(reqs), len(res.GetAttempts()))
	}
	for i, r := range reqs {
		if r.Sampling.Temperature == nil || *r.Sampling.Temperature != 0 || r.Sampling.TopP == nil || *r.Sampling.TopP != 0.9 ||
			r.Sampling.Seed == nil || *r.Sampling.Seed != -42 || r.Sampling.TopK != 0 {
			t.Errorf("attempt %d: sampling %+v", i+1, r.Sampling)
		}
		if !slices.Equal(r.StopSequences, req.StopSequences) {
			t.Errorf("attempt %d: stop sequences %q", i+1, r.StopSequences)
		}
		if r.ToolChoice != (provider.ToolChoice{Mode: provider.ToolChoiceNone, DisableParallel: true}) {
			t.Errorf("attempt %d: tool choice %+v", i+1, r.ToolChoice)
		}
	}

	// top_k is refused on sim-then-gpt (gpt cannot take it), but not when
	// the request keeps to its first route.
	up.reqs = nil
	req = prompt("hello", nil)
	req.Route, req.TopK = "sim-then-gpt", proto.Int32(40)
	req.Policy = &completionv1.Policy{DisableFallback: true}
	evs, st = env.streamAll(t, req)
	checkContract(t, evs, st)
	if reqs := up.requests(); len(reqs) != 1 || reqs[0].Sampling.TopK != 40 {
		t.Errorf("requests %+v, want one with top_k 40", reqs)
	}
}

// TestStopSequenceSplitAcrossAResume: the stream breaks after three
// tokens and is resumed by prefill; the request's stop sequence begins at
// the end of the kept text and ends in the resumed attempt's first token.
// The upstream cannot see it (it matches its own output only): the
// service ends the answer there, STOP_SEQUENCE, with the part the caller
// already has kept and nothing more sent.
func TestStopSequenceSplitAcrossAResume(t *testing.T) {
	env := newTestEnv(t)
	words := sim.Answer("Tell me about recovery.", 12)
	kept := strings.Join(words[:3], "")
	seq := kept[len(kept)-3:] + words[3][:3]
	req := faults("cut=3")
	req.StopSequences = []string{"never in the answer", seq}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := transitions(evs); !slices.Equal(got, []string{"STREAM_RESUME", "COMPLETED"}) {
		t.Fatalf("transitions %v", got)
	}
	if res.GetStopReason() != completionv1.StopReason_STOP_REASON_STOP_SEQUENCE || res.GetStopSequence() != seq {
		t.Errorf("stop %v %q, want STOP_SEQUENCE %q", res.GetStopReason(), res.GetStopSequence(), seq)
	}
	if got := resultText(res); got != kept {
		t.Errorf("answer %q, want the kept text %q", got, kept)
	}
	if res.GetTruncated() {
		t.Error("a stop sequence is a natural end, not a truncation")
	}
}

// TestStopSequenceSplitAcrossAContinuation: the same across a max_tokens
// cut continued by MAX_OUTPUT_TOKENS_RECOVERY.
func TestStopSequenceSplitAcrossAContinuation(t *testing.T) {
	env := newTestEnv(t)
	words := sim.Answer("Tell me about recovery.", 12)
	kept := strings.Join(words[:4], "")
	seq := kept[len(kept)-2:] + words[4][:2]
	req := faults("max_tokens=4")
	req.MaxOutputTokens = proto.Int32(100) // the caller's own cap: continued, not escalated
	req.StopSequences = []string{seq}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := transitions(evs); !slices.Equal(got, []string{"MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"}) {
		t.Fatalf("transitions %v", got)
	}
	if res.GetStopSequence() != seq || resultText(res) != kept {
		t.Errorf("stop sequence %q, answer %q; want %q, %q", res.GetStopSequence(), resultText(res), seq, kept)
	}
}

// TestMaxTotalOutputTokensBoundsTheCompletion: every attempt is cut at
// max_tokens; each asks for no more than is left of the completion's
// bound, and the completion ends COMPLETED, truncated, at the bound.
func TestMaxTotalOutputTokensBoundsTheCompletion(t *testing.T) {
	up := &recordingProvider{Provider: sim.New(sim.Config{Words: 200})}
	env := newTestEnv(t, func(cfg *Config) {
		for _, r := range cfg.Routes {
			r.Upstream = up
		}
	})
	req := faults("max_tokens,max_tokens,max_tokens,max_tokens")
	req.MaxOutputTokens, req.MaxTotalOutputTokens = proto.Int32(20), proto.Int32(45)
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := transitions(evs); !slices.Equal(got, []string{"MAX_OUTPUT_TOKENS_RECOVERY", "MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"}) {
		t.Fatalf("transitions %v", got)
	}
	var asked []int
	for _, r := range up.requests() {
		asked = append(asked, r.MaxTokens)
	}
	if !slices.Equal(asked, []int{20, 20, 5}) {
		t.Errorf("max_tokens asked %v, want [20 20 5]", asked)
	}
	if !res.GetTruncated() || res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || res.GetUsage().GetOutputTokens() != 45 {
		t.Errorf("result: reason %v truncated %t output %d; want COMPLETED, truncated, 45", res.GetReason(), res.GetTruncated(), res.GetUsage().GetOutputTokens())
	}
}

// TestStopSequenceEndsTheAnswer: a stop sequence the model writes ends the
// answer there (the sim matches it as a provider does): STOP_SEQUENCE, the
// sequence named in the result, no continuation, the sequence not sent.
func TestStopSequenceEndsTheAnswer(t *testing.T) {
	env := newTestEnv(t)
	words := sim.Answer("Tell me about recovery.", 12)
	req := faults("")
	req.StopSequences = []string{words[5]}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := transitions(evs); !slices.Equal(got, []string{"COMPLETED"}) {
		t.Fatalf("transitions %v", got)
	}
	want := strings.Join(words[:5], "")
	if res.GetStopReason() != completionv1.StopReason_STOP_REASON_STOP_SEQUENCE || res.GetStopSequence() != words[5] || resultText(res) != want {
		t.Errorf("stop %v %q, answer %q; want STOP_SEQUENCE %q, %q", res.GetStopReason(), res.GetStopSequence(), resultText(res), words[5], want)
	}
}

// TestToolChoiceForcesACall: with TOOL_CHOICE_MODE_TOOL the model calls
// the named tool, and the completion stops for the caller to run it.
func TestToolChoiceForcesACall(t *testing.T) {
	env := newTestEnv(t)
	req := faults("")
	req.Tools = []*completionv1.Tool{{Name: "lookup"}, {Name: "search"}}
	req.ToolChoice = &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, Name: "search"}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if res.GetStopReason() != completionv1.StopReason_STOP_REASON_TOOL_USE {
		t.Fatalf("stop %v, want TOOL_USE", res.GetStopReason())
	}
	var calls []string
	for _, ev := range evs {
		if c := ev.GetToolCall(); c != nil {
			calls = append(calls, c.GetName())
		}
	}
	if !slices.Equal(calls, []string{"search"}) {
		t.Errorf("tool calls %v, want [search]", calls)
	}
}

// TestTakeoverKeepsTheModelParameters: replica A dies mid-stream and B
// takes the completion over from the logged request: B's attempt carries
// the same sampling, stop sequences and tool choice as A's did.
func TestTakeoverKeepsTheModelParameters(t *testing.T) {
	req := slowRequest("sim", 40, 10*time.Millisecond)
	req.Temperature, req.TopK, req.Seed = proto.Float64(0.3), proto.Int32(5), proto.Int64(9)
	req.StopSequences = []string{"</never>"}
	req.Tools = []*completionv1.Tool{{Name: "lookup"}}
	req.ToolChoice = &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}
	req.System, req.PromptCache = "Be brief.", &completionv1.PromptCache{Mode: completionv1.PromptCacheMode_PROMPT_CACHE_MODE_CALLER, System: true}
	first, rest := takenOver(t, req)
	for i, r := range rest {
		if *r.Sampling.Temperature != *first.Sampling.Temperature || r.Sampling.TopK != 5 || *r.Sampling.Seed != 9 ||
			!slices.Equal(r.StopSequences, first.StopSequences) || r.ToolChoice != first.ToolChoice || !r.CacheSystem {
			t.Errorf("attempt %d after the takeover: %+v %q %+v cache system %v; before: %+v %q %+v", i+2,
				r.Sampling, r.StopSequences, r.ToolChoice, r.CacheSystem, first.Sampling, first.StopSequences, first.ToolChoice)
		}
	}

	// Reasoning: B's routes think as A's did, from the logged request.
	req = slowRequest("sim", 40, 10*time.Millisecond)
	req.Reasoning = &completionv1.Reasoning{Effort: completionv1.ReasoningEffort_REASONING_EFFORT_LOW, Interleaved: true}
	first, rest = takenOver(t, req)
	if first.ThinkingBudget != 2048 || first.Reasoning != (provider.Reasoning{Effort: "low", Interleaved: true}) {
		t.Fatalf("A's attempt: thinking budget %d, reasoning %+v", first.ThinkingBudget, first.Reasoning)
	}
	for i, r := range rest {
		if r.ThinkingBudget != first.ThinkingBudget || r.Reasoning != first.Reasoning || r.Prefill != "" {
			t.Errorf("attempt %d after the takeover: thinking budget %d, reasoning %+v, prefill %q", i+2, r.ThinkingBudget, r.Reasoning, r.Prefill)
		}
	}
}

// takenOver streams req on replica A of a fleet of two, kills A after five
// deltas, attaches through B, and returns the upstream requests of A's
// first attempt and of every later one.
func takenOver(t *testing.T, req *completionv1.CompleteRequest) (provider.Request, []provider.Request) {
	t.Helper()
	up := &recordingProvider{Provider: sim.New(sim.Config{})}
	replicas := inProcessFleetLimited(t, 2, fleet.NewMemLeases(time.Second), "", config.EventLogLimits{}, func(cfg *Config) {
		for _, r := range cfg.Routes {
			r.Upstream = up
		}
	})
	a, b := replicas[0], replicas[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := a.client.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	var id string
	for deltas := 0; deltas < 5; {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("before the kill: %v", err)
		}
		last = ev.GetSeq()
		if s := ev.GetStarted(); s != nil {
			id = s.GetCompletionId()
		}
		if ev.GetDelta() != nil {
			deltas++
		}
	}
	a.kill()
	at, err := b.client.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: last})
	if err != nil {
		t.Fatal(err)
	}
	if _, s := recvAll(at.Recv); s.Code() != codes.OK {
		t.Fatalf("attach through B: %v", s)
	}
	reqs := up.requests()
	if len(reqs) < 2 {
		t.Fatalf("%d attempts reached the upstream, want A's and B's", len(reqs))
	}
	return reqs[0], reqs[1:]
}

// TestSignedThinkingNeverReachesAnotherModel: a Session's tool turn
// thinks on claude-a (its block signed for claude-a); the next turn's call
// is overloaded and falls back to claude-b. The fault server refuses, as
// the API does, a thinking block signed for another model: the completion
// ends COMPLETED only because claude-b's request leaves a's block out.
func TestSignedThinkingNeverReachesAnotherModel(t *testing.T) {
	srv := pt.NewAnthropic(t, pt.Seq(
		pt.OK(pt.Answer{Model: "claude-a", Thinking: []string{"Need ", "weather."}, Signature: pt.SignatureFor("claude-a"),
			Text: []string{"Checking."}, Tools: []pt.ToolCall{{ID: "toolu_1", Name: "weather", Args: []string{`{}`}}}}),
		pt.Fail(pt.Overloaded),
		pt.OK(pt.Answer{Model: "claude-b", Text: []string{"Sunny."}}),
	))
	p := realProvider(t, anthropic.Kind, srv, "sk-ant-test")
	env := newTestEnv(t, func(cfg *Config) {
		a := upstreamRoute("claude-a", "claude-a", anthropic.Kind, p, 200_000, false, provider.Timeouts{}, "claude-b")
		b := upstreamRoute("claude-b", "claude-b", anthropic.Kind, p, 200_000, false, provider.Timeouts{})
		for _, r := range []*config.Route{a, b} {
			r.Spec.Thinking, r.ThinkingBudget = true, 2048
			cfg.Routes[r.Spec.Name] = r
		}
		cfg.Policy.Retry.OverloadsBeforeFallback = 1
	})
	req := prompt("What is the weather?", nil)
	req.Route, req.Tools = "claude-a", []*completionv1.Tool{{Name: "weather"}}
	s := env.session(t, &completionv1.SessionStart{Request: req})
	call := s.toolCall()
	if call == nil {
		t.Fatalf("no tool call; events %v", s.events)
	}
	s.answer(call.GetId(), "sunny", false)
	res, code := s.end()
	if code != codes.OK || res.GetRoute() != "claude-b" || resultText(res) != "Checking.Sunny." {
		t.Fatalf("ended %v on %q with %q; transitions %v", code, res.GetRoute(), resultText(res), transitions(s.events))
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	if !bytes.Contains(reqs[1].Body, []byte(pt.SignatureFor("claude-a"))) {
		t.Errorf("claude-a's second call lacks its own thinking block: %s", reqs[1].Body)
	}
	if bytes.Contains(reqs[2].Body, []byte(`"type":"thinking"`)) {
		t.Errorf("claude-b was sent a thinking block: %s", reqs[2].Body)
	}
}
