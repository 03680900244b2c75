package service

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/provider/sim"
)

// Extended thinking end to end: gRPC (bufconn) → driver → machine → the
// real anthropic provider → a providertest server streaming thinking blocks
// with their signature_delta, exactly as Anthropic does.

const (
	thinkingRoute  = "thinker"
	thinkingBudget = 2048
)

// thinkingEnv serves one Anthropic route that thinks (and claims prefill,
// which thinking must override) over a server answering with script.
func thinkingEnv(t *testing.T, script pt.Script) (*testEnv, *pt.Server) {
	t.Helper()
	srv := pt.NewAnthropic(t, script)
	r := upstreamRoute(thinkingRoute, primaryModel, anthropic.Kind, realProvider(t, anthropic.Kind, srv, "sk-test-thinking-key"),
		200_000, true, generous)
	r.ThinkingBudget, r.Spec.Thinking = thinkingBudget, true
	cfg := faultConfig(map[string]*config.Route{thinkingRoute: r})
	cfg.DefaultRoute = thinkingRoute
	client, _ := grpcClient(t, cfg)
	return &testEnv{client: client}, srv
}

// thinkingByAttempt concatenates the thinking deltas of each attempt.
func thinkingByAttempt(evs []*completionv1.CompletionEvent) map[int32]string {
	out := map[int32]string{}
	for _, ev := range evs {
		if d := ev.GetDelta(); d != nil && d.GetKind() == completionv1.DeltaKind_DELTA_KIND_THINKING {
			out[ev.GetAttempt()] += d.GetText()
		}
	}
	return out
}

// sentThinking checks that an upstream request asked for thinking with the route's budget.
func sentThinking(t *testing.T, r *pt.Request) {
	t.Helper()
	th, _ := r.JSON(t)["thinking"].(map[string]any)
	if th["type"] != "enabled" || th["budget_tokens"] != float64(thinkingBudget) {
		t.Errorf("request %d: thinking = %v, want enabled with budget_tokens %d", r.N, th, thinkingBudget)
	}
}

func TestSessionToolLoopWithThinking(t *testing.T) {
	env, srv := thinkingEnv(t, pt.Seq(
		pt.OK(pt.Answer{
			Thinking: []string{"The user wants ", "a lookup."}, Signature: "sig_turn1_EqQBCgIYAhIM",
			Redacted: []string{"EmwKAhgBEgy3va3pzix/LafPsn4a"},
			Text:     []string{"Let me ", "check."},
			Tools:    []pt.ToolCall{{ID: "toolu_01", Name: "search", Args: []string{`{"q":`, `"answer"}`}}},
			Usage:    pt.Usage{Input: 20, Output: 30},
		}),
		pt.OK(pt.Answer{
			Thinking: []string{"The tool said 42."}, Signature: "sig_turn2_Xy",
			Text:  []string{"The answer ", "is 42."},
			Usage: pt.Usage{Input: 60, Output: 12},
		}),
	))
	start := &completionv1.SessionStart{Request: prompt("What is the answer?", nil)}
	start.Request.Tools = []*completionv1.Tool{{Name: "search", Description: "searches"}}
	s := env.session(t, start)
	call := s.toolCall()
	if call.GetId() != "toolu_01" || call.GetName() != "search" {
		t.Fatalf("tool call %v", call)
	}
	s.answer(call.GetId(), "42", false)
	res, code := s.end() // checks the stream contract: the text deltas alone make the answer
	if code != codes.OK || res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN {
		t.Fatalf("ended %v with %v", code, res.GetStopReason())
	}
	if got := strings.Join(transitions(s.events), " "); got != "NEXT_TURN COMPLETED" {
		t.Errorf("transitions %s", got)
	}

	// The thinking reached the caller live, per attempt, and stayed out of the answer.
	want := map[int32]string{1: "The user wants a lookup.", 2: "The tool said 42."}
	if got := thinkingByAttempt(s.events); !maps.Equal(got, want) {
		t.Errorf("thinking deltas %v, want %v", got, want)
	}
	if got := resultText(res); got != "Let me check.The answer is 42." {
		t.Errorf("answer %q", got)
	}

	// Both requests asked for thinking; the second sent the first turn's
	// thinking back unchanged, signature and redacted data included,
	// ahead of the text and the tool use.
	if srv.Count() != 2 {
		t.Fatalf("upstream saw %d requests, want 2", srv.Count())
	}
	sentThinking(t, srv.Request(t, 1))
	second := srv.Request(t, 2)
	sentThinking(t, second)
	var body struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(second.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 || body.Messages[1].Role != "assistant" || body.Messages[2].Role != "user" {
		t.Fatalf("second request messages: %s", second.Body)
	}
	assistant := body.Messages[1].Content
	wantBlocks := []string{
		`{"type":"thinking","thinking":"The user wants a lookup.","signature":"sig_turn1_EqQBCgIYAhIM"}`,
		`{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"}`,
		`{"type":"text","text":"Let me check."}`,
		`{"type":"tool_use","id":"toolu_01","name":"search","input":{"q":"answer"}}`,
	}
	if len(assistant) != len(wantBlocks) {
		t.Fatalf("assistant message of turn 1 has %d blocks: %s", len(assistant), second.Body)
	}
	for i, w := range wantBlocks {
		pt.AssertJSON(t, assistant[i], w)
	}
	// The tool result ends the turn's prompt: a cache breakpoint (the
	// default prompt_cache, AUTO), so the next turn reads all of it from
	// the cache.
	pt.AssertJSON(t, body.Messages[2].Content[0], `{"type":"tool_result","tool_use_id":"toolu_01","is_error":false,"content":[{"type":"text","text":"42"}],"cache_control":{"type":"ephemeral"}}`)
}

func TestThinkingRouteRestartsABrokenStreamWithoutPrefill(t *testing.T) {
	answer := pt.Answer{Thinking: []string{"Hmm."}, Signature: "sig_1", Text: primaryTokens, Usage: primaryUsage}
	env, srv := thinkingEnv(t, pt.Seq(pt.CutAfter(1+cutAt, answer), pt.OK(answer)))
	evs, st := env.streamAll(t, prompt("Explain recovery.", nil))
	res := checkContract(t, evs, st)
	if got := strings.Join(transitions(evs), " "); got != "RETRY COMPLETED" {
		t.Fatalf("transitions %s, want a clean restart (the route claims prefill, but thinks)", got)
	}
	if tr := transitionEvents(evs)[0].GetTransition(); !tr.GetDiscardOutput() {
		t.Errorf("the retry keeps the cut output: %v", tr)
	}
	if resultText(res) != primaryText {
		t.Errorf("answer %q", resultText(res))
	}
	if role, _ := lastMessage(t, srv.Request(t, 2)); role != "user" {
		t.Errorf("the restart was sent a prefill (last message %s)", role)
	}
	sentThinking(t, srv.Request(t, 2))
}

func TestThinkingBudgetNeedsSpecThinking(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{}))
	r := *cfg.Routes["sim"]
	r.ThinkingBudget = 4096
	cfg.Routes["sim"] = &r
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "thinking") {
		t.Errorf("New = %v, want an error about the thinking budget", err)
	}
	if config.MinThinkingBudget != anthropic.MinThinkingBudget {
		t.Errorf("minThinkingBudget %d, anthropic's %d", config.MinThinkingBudget, anthropic.MinThinkingBudget)
	}
}
