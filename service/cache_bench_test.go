package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// Anthropic's published prompt-cache prices, as multiples of the base
// input price: a cache write (5-minute TTL) costs 1.25×, a cache read
// 0.1×.
const (
	cacheWritePrice = 1.25
	cacheReadPrice  = 0.1
)

// cachedPromptTokens is the prompt of the caching scenario, by the fault
// server's estimate of four bytes a token: a 2 000-token system prompt and
// an 18 000-token user message.
const (
	cachedSystemTokens = 2000
	cachedUserTokens   = 18000
)

// cachedPart is one part of the scenario's answer: 400 deltas of five
// bytes, about 500 tokens of the next call's prompt.
func cachedPart(letter string, limit bool) pt.Answer {
	words := make([]string, 400)
	for i := range words {
		words[i] = " " + strings.Repeat(letter, 4)
	}
	return pt.Answer{Model: "claude-cache", Text: words, Limit: limit, Usage: pt.Usage{Output: len(words), CountPrompt: true}}
}

// cachedScript is the scenario's upstream, per request of a completion
// (n counts on over completions, five requests each): the answer cut by
// max_tokens three times, and one stream broken before its end, retried.
//
//  1. part A, cut by max_tokens: continuation 1;
//  2. part B, cut by max_tokens: continuation 2;
//  3. part C, broken after 100 tokens (the stream ends without its end):
//     a retry, resumed from what arrived;
//  4. part C, cut by max_tokens: continuation 3;
//  5. part D, the end of the answer.
func cachedScript() pt.Script {
	replies := []pt.Reply{
		pt.OK(cachedPart("a", true)),
		pt.OK(cachedPart("b", true)),
		pt.CutAfter(100, cachedPart("c", true)),
		pt.OK(cachedPart("c", true)),
		pt.OK(cachedPart("d", false)),
	}
	return func(n int, _ time.Duration) pt.Reply { return replies[(n-1)%len(replies)] }
}

// cachedAttempts is how many upstream calls the scenario makes.
const cachedAttempts = 5

// cacheScenario is the caching scenario's service: a route on the real
// Anthropic provider and a fault server that models the prompt cache.
type cacheScenario struct {
	srv    *pt.Server
	client completionv1.CompletionClient
}

// newCacheScenario starts the scenario's fault server and a service whose
// one route, claude, calls it; both stop when tb ends.
func newCacheScenario(tb testing.TB) *cacheScenario {
	tb.Helper()
	srv := pt.NewAnthropic(tb, cachedScript())
	p, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "sk-test-cache", HTTPClient: srv.Client()})
	if err != nil {
		tb.Fatal(err)
	}
	route := &config.Route{Spec: recovery.Route{Name: "claude", Provider: anthropic.Kind, Model: "claude-cache",
		ContextWindow: 200_000, MaxOutputTokens: 64_000, Prefill: true}, Upstream: p, Timeouts: generous}
	cfg := DefaultConfig()
	cfg.Routes, cfg.DefaultRoute = map[string]*config.Route{"claude": route}, "claude"
	cfg.Policy.Retry.BackoffBase, cfg.Policy.Retry.BackoffMax = time.Microsecond, time.Microsecond
	client, _ := grpcClient(tb, cfg)
	return &cacheScenario{srv: srv, client: client}
}

// cachedRequest is the scenario's request under mode: a 20 000-token
// prompt, an explicit max_output_tokens (the caller's own ceiling: no
// escalation, each cut answer is continued).
func cachedRequest(mode completionv1.PromptCacheMode) *completionv1.CompleteRequest {
	text := func(tokens int, letter string) string {
		return strings.Repeat(letter, 4*tokens-len(`{"text":"","type":"text"}`))
	}
	maxOut := int32(500)
	return &completionv1.CompleteRequest{
		System: text(cachedSystemTokens, "s"),
		Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER,
			Content: []*completionv1.ContentBlock{convert.TextBlock(text(cachedUserTokens, "u"))}}},
		MaxOutputTokens: &maxOut,
		PromptCache:     &completionv1.PromptCache{Mode: mode},
	}
}

// inputCost is what the attempts' input costs in base input tokens: each
// uncached token at 1×, each written to the cache at 1.25×, each read from
// it at 0.1×.
func inputCost(res *completionv1.Result) float64 {
	cost := 0.0
	for _, a := range res.GetAttempts() {
		u := a.GetUsage()
		cost += float64(u.GetInputTokens()) + cacheWritePrice*float64(u.GetCacheCreationInputTokens()) +
			cacheReadPrice*float64(u.GetCacheReadInputTokens())
	}
	return cost
}

// run completes the scenario's request under mode against an empty cache
// and returns its result; it fails tb unless the completion went as
// scripted.
func (sc *cacheScenario) run(tb testing.TB, mode completionv1.PromptCacheMode) *completionv1.Result {
	tb.Helper()
	sc.srv.ResetCache()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := sc.client.Complete(ctx, cachedRequest(mode))
	if err != nil {
		tb.Fatal(err)
	}
	res := resp.GetResult()
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || len(res.GetAttempts()) != cachedAttempts {
		tb.Fatalf("%v: ended %v after %d attempts, want COMPLETED after %d (transitions %v)",
			mode, res.GetReason(), len(res.GetAttempts()), cachedAttempts, resp.GetTransitions())
	}
	return res
}

// BenchmarkPromptCache completes a 20 000-token prompt whose answer the
// output limit cuts three times (three continuations) and whose stream
// breaks once (a retry) — five calls to an Anthropic-wire fault server
// that models the prompt cache — with prompt_cache AUTO (completiond marks
// the breakpoints) and OFF, and reports the input cost of each, in base
// input tokens summed over the attempts (uncached ×1, cache writes ×1.25,
// cache reads ×0.1: Anthropic's prices), and their ratio. The counts are
// the fault server's estimate and deterministic: the metrics do not vary
// from run to run; the time per op is the two completions'.
func BenchmarkPromptCache(b *testing.B) {
	sc := newCacheScenario(b)
	var auto, off float64
	for b.Loop() {
		auto = inputCost(sc.run(b, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO))
		off = inputCost(sc.run(b, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF))
	}
	b.ReportMetric(auto, "input-cost-auto")
	b.ReportMetric(off, "input-cost-off")
	b.ReportMetric(auto/off, "auto/off")
}

// TestPromptCacheSavesTheRepeatedPrompt is BenchmarkPromptCache's
// scenario, checked: with AUTO the five calls' input costs at most 0.4 of
// what it costs with OFF (which marks nothing); every call after the first
// carries the first call's breakpoints on the prompt they share (the
// system prompt and the caller's conversation), and reads from the cache
// at least what the call before it wrote there — its prompt up to its last
// breakpoint, as far as the two prompts are the same.
func TestPromptCacheSavesTheRepeatedPrompt(t *testing.T) {
	newCacheScenario(t).check(t)
}

// check runs the scenario with AUTO, then OFF, and checks what
// TestPromptCacheSavesTheRepeatedPrompt says.
func (sc *cacheScenario) check(t *testing.T) {
	auto := sc.run(t, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO)
	reqs := sc.srv.Requests()
	off := sc.run(t, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF)
	for _, r := range sc.srv.Requests()[len(reqs):] {
		for _, b := range r.Prompt() {
			if b.Breakpoint {
				t.Errorf("OFF: request %d marks %s", r.N, b.Path)
			}
		}
	}
	costAuto, costOff := inputCost(auto), inputCost(off)
	t.Logf("input cost: AUTO %.0f, OFF %.0f, ratio %.3f", costAuto, costOff, costAuto/costOff)
	if ratio := costAuto / costOff; ratio > 0.4 {
		t.Errorf("AUTO costs %.3f of OFF, want at most 0.4", ratio)
	}

	attempts := auto.GetAttempts() // one per request, in order
	first := reqs[0].Prompt()
	for i := 1; i < len(reqs); i++ {
		prompt, prev := reqs[i].Prompt(), reqs[i-1].Prompt()
		if diff := breakpointsDiffer(first, prompt); diff != "" {
			t.Errorf("request %d against the first: %s", reqs[i].N, diff)
		}
		if read, want := attempts[i].GetUsage().GetCacheReadInputTokens(), int64(writtenBefore(prev, prompt)); read < want {
			t.Errorf("attempt %d read %d tokens from the cache, want the %d of the prompt the attempt before wrote",
				attempts[i].GetAttempt(), read, want)
		}
	}
}

// breakpointsDiffer says where two prompts mark the first blocks they
// share differently, or "" if they mark them alike.
func breakpointsDiffer(a, b []pt.PromptBlock) string {
	var diffs []string
	for i := range shared(a, b) {
		if a[i].Breakpoint != b[i].Breakpoint {
			diffs = append(diffs, fmt.Sprintf("%s marked %v, then %v", a[i].Path, a[i].Breakpoint, b[i].Breakpoint))
		}
	}
	return strings.Join(diffs, "; ")
}

// writtenBefore is the tokens of prev, up to its last breakpoint among the
// blocks next shares with it: what next can read of what prev wrote.
func writtenBefore(prev, next []pt.PromptBlock) int {
	n, sum := 0, 0
	for i := range shared(prev, next) {
		sum += prev[i].Tokens
		if prev[i].Breakpoint {
			n = sum
		}
	}
	return n
}

// shared is the number of first blocks two prompts have in common.
func shared(a, b []pt.PromptBlock) int {
	n := 0
	for n < min(len(a), len(b)) && a[n].Prefix == b[n].Prefix {
		n++
	}
	return n
}
