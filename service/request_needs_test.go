package service

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// reasoningRoutes adds routes that reason, each served by up: claude-r
// (anthropic, thinking up to 16 000 tokens on request), gpt-r (openai,
// effort up to medium), claude-r-then-gpt-r, gpt (openai, no reasoning),
// claude-tool (anthropic, structured output through a forced tool) and
// claude-thinking-tool (the same, thinking on every call).
func reasoningRoutes(up provider.Provider) func(*Config) {
	return func(cfg *Config) {
		route := func(name, kind string, fallbacks ...string) *config.Route {
			return &config.Route{Spec: recovery.Route{Name: name, Provider: kind, Model: name, MaxOutputTokens: 64_000, Prefill: true},
				Upstream: up, Fallbacks: fallbacks}
		}
		claude := route("claude-r", "anthropic")
		claude.MaxThinkingBudget = 16_000
		gptR := route("gpt-r", "openai")
		gptR.MaxReasoningEffort = "medium"
		chain := route("claude-r-then-gpt-r", "anthropic", "gpt-r")
		chain.MaxThinkingBudget = 16_000
		tool := route("claude-tool", "anthropic")
		tool.StructuredOutput = provider.StructuredTool
		thinkingTool := route("claude-thinking-tool", "anthropic")
		thinkingTool.StructuredOutput, thinkingTool.Spec.Thinking, thinkingTool.ThinkingBudget, thinkingTool.MaxThinkingBudget =
			provider.StructuredTool, true, 2048, 2048
		for _, r := range []*config.Route{claude, gptR, chain, route("gpt", "openai"), tool, thinkingTool} {
			cfg.Routes[r.Spec.Name] = r
		}
	}
}

func TestReasoningCachingMediaAndStructuredOutputAreRefusedBeforeAnyUpstreamCall(t *testing.T) {
	up := &countingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, reasoningRoutes(up))
	on := func(route string, mut func(r *completionv1.CompleteRequest)) *completionv1.CompleteRequest {
		r := prompt("hello", nil)
		r.Route = route
		mut(r)
		return r
	}
	effort := func(e completionv1.ReasoningEffort) func(r *completionv1.CompleteRequest) {
		return func(r *completionv1.CompleteRequest) { r.Reasoning = &completionv1.Reasoning{Effort: e} }
	}
	budget := func(n int32) func(r *completionv1.CompleteRequest) {
		return func(r *completionv1.CompleteRequest) { r.Reasoning = &completionv1.Reasoning{BudgetTokens: n} }
	}
	withBlock := func(b *completionv1.ContentBlock) func(r *completionv1.CompleteRequest) {
		return func(r *completionv1.CompleteRequest) { r.Messages[0].Content = append(r.Messages[0].Content, b) }
	}
	imageURL := func(u string) func(r *completionv1.CompleteRequest) {
		return withBlock(&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{Image: &completionv1.ImageBlock{Url: u}}})
	}
	document := func(d *completionv1.DocumentBlock) func(r *completionv1.CompleteRequest) {
		return withBlock(&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{Document: d}})
	}
	marks := func(n int, mode completionv1.PromptCacheMode) func(r *completionv1.CompleteRequest) {
		return func(r *completionv1.CompleteRequest) {
			r.PromptCache = &completionv1.PromptCache{Mode: mode}
			for range n {
				r.Messages[0].Content = append(r.Messages[0].Content, &completionv1.ContentBlock{CacheBreakpoint: true,
					Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "x"}}})
			}
		}
	}
	schema := func(s string, mut ...func(r *completionv1.CompleteRequest)) func(r *completionv1.CompleteRequest) {
		return func(r *completionv1.CompleteRequest) {
			r.OutputJsonSchema = s
			for _, m := range mut {
				m(r)
			}
		}
	}
	object := `{"type": "object", "properties": {"a": {"type": "string"}}}`
	pdf := []byte("%PDF-1.7 …")
	tests := []refusedRequest{
		{"budget under 1024", on("claude-r", budget(100)), "reasoning.budget_tokens", "between 1024 and"},
		{"budget absurd", on("claude-r", budget(1<<30)), "reasoning.budget_tokens", "between 1024 and"},
		{"budget over the route's ceiling", on("claude-r", budget(20_000)), "reasoning.budget_tokens", `route "claude-r" thinks with at most 16000 tokens`},
		{"reasoning on a route that has none", on("gpt", effort(completionv1.ReasoningEffort_REASONING_EFFORT_LOW)), "reasoning", `route "gpt" does not reason`},
		{"reasoning on a fallback that has none", on("claude-r-then-gpt-r", func(r *completionv1.CompleteRequest) {
			r.FallbackRoutes = []string{"gpt"}
			r.Reasoning = &completionv1.Reasoning{BudgetTokens: 4096}
		}), "reasoning", `route "gpt" does not reason`},
		{"effort over the route's ceiling", on("gpt-r", effort(completionv1.ReasoningEffort_REASONING_EFFORT_HIGH)), "reasoning.effort", `route "gpt-r" reasons with at most "medium" effort`},
		{"unknown effort", on("claude-r", effort(42)), "reasoning.effort", "unknown"},
		{"interleaved on OpenAI", on("claude-r-then-gpt-r", func(r *completionv1.CompleteRequest) {
			r.Reasoning = &completionv1.Reasoning{BudgetTokens: 4096, Interleaved: true}
		}), "reasoning.interleaved", `route "gpt-r" cannot think between tool calls`},
		{"temperature once reasoning makes the route think", on("claude-r", func(r *completionv1.CompleteRequest) {
			r.Reasoning, r.Temperature = &completionv1.Reasoning{BudgetTokens: 4096}, proto.Float64(0.3)
		}), "temperature", `route "claude-r" does not take a temperature`},
		{"five cache breakpoints", on("claude-r", marks(5, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO)), "prompt_cache", "over the limit of 4"},
		{"a breakpoint with caching off", on("claude-r", marks(1, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF)), "prompt_cache.mode", "PROMPT_CACHE_MODE_OFF with 1"},
		{"unknown cache mode", on("claude-r", marks(0, 42)), "prompt_cache.mode", "unknown"},
		{"image by http", on("claude-r", imageURL("http://example.com/a.png")), "messages[0].content[1].image.url", "must be https"},
		{"image by file", on("claude-r", imageURL("file:///etc/passwd")), "messages[0].content[1].image.url", "must be https"},
		{"image by gopher", on("claude-r", imageURL("gopher://example.com/")), "messages[0].content[1].image.url", "must be https"},
		{"image on localhost", on("claude-r", imageURL("https://localhost:8080/a.png")), "messages[0].content[1].image.url", "local or private"},
		{"image on a private address", on("claude-r", imageURL("https://10.0.0.7/a.png")), "messages[0].content[1].image.url", "local or private"},
		{"image on the metadata address", on("claude-r", imageURL("https://169.254.169.254/latest")), "messages[0].content[1].image.url", "local or private"},
		{"image on IPv6 loopback", on("claude-r", imageURL("https://[::1]/a.png")), "messages[0].content[1].image.url", "local or private"},
		{"image URL with credentials", on("claude-r", imageURL("https://user:secret@example.com/a.png")), "messages[0].content[1].image.url", "credentials"},
		{"image URL of a megabyte", on("claude-r", imageURL("https://example.com/"+strings.Repeat("a", 1<<20))), "messages[0].content[1].image.url", "over the limit of 2048"},
		{"image with data and url", on("claude-r", withBlock(&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
			Image: &completionv1.ImageBlock{Url: "https://example.com/a.png", Data: []byte{1}, MediaType: "image/png"}}})), "messages[0].content[1].image", "or a url alone"},
		{"document on OpenAI", on("gpt", document(&completionv1.DocumentBlock{MediaType: "application/pdf", Data: pdf})), "messages", `route "gpt" does not take documents`},
		{"document not a PDF", on("claude-r", document(&completionv1.DocumentBlock{MediaType: "application/pdf", Data: []byte("MZ\x90")})), "messages[0].content[1].document.data", "not a PDF"},
		{"document of another type", on("claude-r", document(&completionv1.DocumentBlock{MediaType: "text/html", Data: pdf})), "messages[0].content[1].document.media_type", "not application/pdf"},
		{"document without data", on("claude-r", document(&completionv1.DocumentBlock{})), "messages[0].content[1].document.data", "required"},
		{"document title too long", on("claude-r", document(&completionv1.DocumentBlock{Url: "https://example.com/a.pdf", Title: strings.Repeat("t", 300)})), "messages[0].content[1].document.title", "over the limit of 256"},
		{"document in an assistant message", on("claude-r", func(r *completionv1.CompleteRequest) {
			r.Messages = append(r.Messages, &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{
				{Block: &completionv1.ContentBlock_Document{Document: &completionv1.DocumentBlock{Url: "https://example.com/a.pdf"}}}}})
		}), "messages[1].content[0].document", "user messages only"},
		{"thinking without its signature", on("claude-r", func(r *completionv1.CompleteRequest) {
			r.Messages = append(r.Messages, &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{
				{Block: &completionv1.ContentBlock_Thinking{Thinking: &completionv1.ThinkingBlock{Thinking: "hm"}}}}})
		}), "messages[1].content[0].thinking", "signature are required"},
		{"thinking from the user", on("claude-r", withBlock(&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Thinking{
			Thinking: &completionv1.ThinkingBlock{Thinking: "hm", Signature: "s"}}})), "messages[0].content[1].thinking", "assistant messages only"},
		{"structured tool with a tool choice", on("claude-tool", schema(object, func(r *completionv1.CompleteRequest) {
			r.Tools = []*completionv1.Tool{{Name: "lookup"}}
			r.ToolChoice = &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}
		})), "tool_choice.mode", `route "claude-tool" answers output_json_schema through a forced tool`},
		{"structured tool with an array schema", on("claude-tool", schema(`{"type": "array"}`)), "output_json_schema", `type must be "object"`},
		{"structured tool while thinking", on("claude-thinking-tool", schema(object)), "output_json_schema", "thinking model"},
		{"structured tool's name taken", on("claude-tool", schema(object, func(r *completionv1.CompleteRequest) {
			r.Tools = []*completionv1.Tool{{Name: config.StructuredToolName}}
		})), "tools", "rename"},
	}
	assertRefused(t, env, up, tests)
}

// TestReasoningReachesEveryAttempt: a request's reasoning goes to every
// attempt as each route takes it — a budget on the Anthropic route, the
// effort it stands for on its OpenAI fallback — and makes the machine
// restart a broken stream cleanly where it would have resumed it by
// prefill (a thinking call takes none).
func TestReasoningReachesEveryAttempt(t *testing.T) {
	up := &recordingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, reasoningRoutes(up))
	req := prompt("Think first.", map[string]string{sim.MetaFaults: "cut=3,overload*3"})
	req.Route = "claude-r-then-gpt-r"
	req.Reasoning = &completionv1.Reasoning{BudgetTokens: 6000}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	got := transitions(evs)
	if slices.Contains(got, "STREAM_RESUME") || !slices.Contains(got, "RETRY") || !slices.Contains(got, "MODEL_FALLBACK") {
		t.Errorf("transitions %v: want a clean RETRY (no STREAM_RESUME on a thinking route) and a MODEL_FALLBACK", got)
	}
	reqs := up.requests()
	if len(reqs) != len(res.GetAttempts()) || res.GetRoute() != "gpt-r" {
		t.Fatalf("%d requests for %d attempts, answered by %q", len(reqs), len(res.GetAttempts()), res.GetRoute())
	}
	for i, r := range reqs {
		want := provider.Request{ThinkingBudget: 6000}
		if r.Model == "gpt-r" {
			want = provider.Request{Reasoning: provider.Reasoning{Effort: "medium"}}
		}
		if r.ThinkingBudget != want.ThinkingBudget || r.Reasoning != want.Reasoning || r.Prefill != "" {
			t.Errorf("attempt %d on %s: thinking budget %d, reasoning %+v, prefill %q; want %d, %+v, none",
				i+1, r.Model, r.ThinkingBudget, r.Reasoning, r.Prefill, want.ThinkingBudget, want.Reasoning)
		}
	}
}

// TestCacheBreakpointsOnEveryAttempt: every call of a recovered completion
// marks the caller's conversation end, so that its retry and its
// continuations read the prompt from the cache; with caching off, no call
// marks anything.
func TestCacheBreakpointsOnEveryAttempt(t *testing.T) {
	up := &recordingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, reasoningRoutes(up))
	for _, mode := range []completionv1.PromptCacheMode{completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF} {
		t.Run(mode.String(), func(t *testing.T) {
			up.mu.Lock()
			up.reqs = nil
			up.mu.Unlock()
			req := prompt("A long prompt.", map[string]string{sim.MetaFaults: "server_error,max_tokens=3,max_tokens=3"})
			req.Route, req.System, req.MaxOutputTokens = "claude-r", "You are terse.", proto.Int32(100)
			req.PromptCache = &completionv1.PromptCache{Mode: mode}
			evs, st := env.streamAll(t, req)
			checkContract(t, evs, st)
			reqs := up.requests()
			if len(reqs) != 4 {
				t.Fatalf("%d calls, want 4 (a retry, then two continuations)", len(reqs))
			}
			for i, r := range reqs {
				callerEnd := r.Messages[0].Blocks[len(r.Messages[0].Blocks)-1].CacheBreakpoint
				last := r.Messages[len(r.Messages)-1]
				tail := last.Blocks[len(last.Blocks)-1].CacheBreakpoint
				on := mode == completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO
				if callerEnd != on || tail != on || r.CacheSystem != on {
					t.Errorf("call %d (%d messages): caller's end marked %v, prompt's end %v, system %v; want %v",
						i+1, len(r.Messages), callerEnd, tail, r.CacheSystem, on)
				}
			}
		})
	}
}

// TestOutputSchemaReachesEveryAttempt: the output schema goes to every
// call, with the route's way of asking for it.
func TestOutputSchemaReachesEveryAttempt(t *testing.T) {
	up := &recordingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, reasoningRoutes(up))
	req := prompt("Answer in JSON.", map[string]string{sim.MetaFaults: "rate_limit=1ms"})
	req.Route, req.OutputJsonSchema = "claude-tool", `{"type": "object"}`
	req.Policy = &completionv1.Policy{MaxStopHookBlocks: proto.Int32(0)}
	evs, st := env.streamAll(t, req)
	checkContract(t, evs, st) // the sim's answer is no JSON: the stop hook has the last word
	reqs := up.requests()
	if len(reqs) < 2 {
		t.Fatalf("%d calls, want a retry", len(reqs))
	}
	for i, r := range reqs {
		if string(r.OutputSchema) != req.OutputJsonSchema || r.StructuredOutput != provider.StructuredTool {
			t.Errorf("call %d: schema %q, structured output %v", i+1, r.OutputSchema, r.StructuredOutput)
		}
	}
}

// TestSummaryCallCarriesNoneOfTheCallersParameters: the summarising call
// of a reactive compaction is completiond's own, with a prompt of its own:
// it carries neither the request's reasoning nor its output schema nor
// cache marks, while the calls before and after it carry them all.
func TestSummaryCallCarriesNoneOfTheCallersParameters(t *testing.T) {
	up := &recordingProvider{Provider: sim.New(sim.Config{Words: 12})}
	env := newTestEnv(t, reasoningRoutes(up))
	req := conversation(10, 40, false, map[string]string{sim.MetaFaults: "prompt_too_long"})
	req.Route = "claude-r"
	req.Reasoning = &completionv1.Reasoning{BudgetTokens: 2048}
	req.OutputJsonSchema = `{"type": "string"}`
	req.Policy = &completionv1.Policy{MaxStopHookBlocks: proto.Int32(0)}
	evs, st := env.streamAll(t, req)
	checkContract(t, evs, st)
	if got := transitions(evs); !slices.Contains(got, "REACTIVE_COMPACT_RETRY") {
		t.Fatalf("transitions %v, want a reactive compaction", got)
	}
	summaries := 0
	for i, r := range up.requests() {
		marked := r.CacheSystem || slices.ContainsFunc(r.Messages, func(m recovery.Message) bool {
			return slices.ContainsFunc(m.Blocks, func(b recovery.Block) bool { return b.CacheBreakpoint })
		})
		if r.Metadata == nil { // the summary: completiond's call carries no caller metadata
			summaries++
			if r.ThinkingBudget != 0 || r.Reasoning != (provider.Reasoning{}) || r.OutputSchema != nil || marked {
				t.Errorf("call %d, the summary: thinking %d, reasoning %+v, schema %q, cache marks %v; want none",
					i+1, r.ThinkingBudget, r.Reasoning, r.OutputSchema, marked)
			}
			continue
		}
		if r.ThinkingBudget != 2048 || string(r.OutputSchema) != req.OutputJsonSchema || !marked {
			t.Errorf("call %d: thinking %d, schema %q, cache marks %v; want the request's", i+1, r.ThinkingBudget, r.OutputSchema, marked)
		}
	}
	if summaries != 1 {
		t.Errorf("%d summary calls, want 1", summaries)
	}
}
