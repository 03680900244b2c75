package client

import (
	"strings"

	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// scenario is one golden transcript: a request to the real server on the
// sim provider and, for a Session, the caller's answers.
type scenario struct {
	name, about string
	want        []string // the transitions' reasons (without TRANSITION_REASON_), in order
	stream      *completionv1.CompleteRequest
	session     *completionv1.SessionStart
	// answer is the Session caller: what it sends after receiving ev, if
	// anything. The same answers in every language's replay test.
	answer func(ev *completionv1.CompletionEvent, c *caller) *completionv1.SessionRequest
	// budgeted runs the scenario with the key budgetKey, whose budget is
	// budgetTokens tokens a day, on a server whose clock stands at
	// budgetNow.
	budgeted bool
}

// caller counts what a scripted Session caller has seen.
type caller struct{ hooks, deltas int }

// scenarios are every transcript of clients/testdata/transcripts: every
// transition reason, both delivery modes, failed statuses with each detail,
// the model parameters (stop sequences, tool choice, the output bounds,
// sampling, reasoning, the prompt cache, media by URL) and Session tool
// loops.
func scenarios() []scenario {
	return []scenario{
		{name: "completed", about: "a plain answer", want: []string{"COMPLETED"}, stream: ask("")},
		{name: "retry", about: "a 502 on the first attempt: retried after a backoff", want: []string{"RETRY", "COMPLETED"}, stream: ask("server_error=502")},
		{name: "retry_after", about: "a 429 with Retry-After 200ms: retried after the upstream's wait",
			want: []string{"RETRY", "COMPLETED"}, stream: ask("rate_limit=200ms")},
		{name: "model_fallback", about: "three overloads: the next route of the chain answers",
			want: []string{"RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"}, stream: ask("overload*3")},
		{name: "stream_resume", about: "the stream breaks after 4 words: continued by prefill, the partial kept",
			want: []string{"STREAM_RESUME", "COMPLETED"}, stream: ask("cut=4")},
		{name: "clean_restart", about: "the stream breaks on a route without prefill: attempt 1's text is discarded",
			want: []string{"RETRY", "COMPLETED"}, stream: on("sim-noprefill", ask("cut=4"))},
		{name: "clean_restart_settled", about: "clean_restart in settled delivery: the discarded text is never sent",
			want: []string{"RETRY", "COMPLETED"}, stream: settled(on("sim-noprefill", ask("cut=4")))},
		{name: "escalate", about: "cut by max_tokens: asked again with a larger limit, the short answer discarded",
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "COMPLETED"}, stream: ask("max_tokens=3")},
		{name: "escalate_settled", about: "escalate in settled delivery",
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "COMPLETED"}, stream: settled(ask("max_tokens=3"))},
		{name: "output_recovery", about: "cut again after escalating: continued where it stopped",
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"}, stream: ask("max_tokens=3,max_tokens=3")},
		{name: "still_truncated", about: "cut after three continuations: COMPLETED, truncated, stop MAX_TOKENS",
			want:   []string{"MAX_OUTPUT_TOKENS_ESCALATE", "MAX_OUTPUT_TOKENS_RECOVERY", "MAX_OUTPUT_TOKENS_RECOVERY", "MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"},
			stream: ask("max_tokens=2*5")},
		{name: "tool_cut", about: "a tool call cut by max_tokens: a truncation, escalated; the cut call is never sent",
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "COMPLETED"}, stream: tools(ask("tool_cut=search,tool_use=search"))},
		{name: "context_limit_adjust", about: "input + max_tokens over the window: max_tokens lowered",
			want: []string{"CONTEXT_LIMIT_ADJUST", "COMPLETED"}, stream: ask("context_limit")},
		{name: "collapse_drain", about: "prompt too long with one bulky old block: collapsed and retried",
			want: []string{"COLLAPSE_DRAIN_RETRY", "COMPLETED"}, stream: conversation(10, 40, true, "prompt_too_long")},
		{name: "reactive_compact", about: "prompt too long: the history summarized and retried",
			want: []string{"REACTIVE_COMPACT_RETRY", "COMPLETED"}, stream: conversation(10, 40, false, "prompt_too_long")},
		{name: "larger_context_fallback", about: "prompt too long: a route with a larger context answers",
			want: []string{"MODEL_FALLBACK", "COMPLETED"}, stream: ask("prompt_too_long")},
		{name: "prompt_too_long", about: "too long for every route: FAILED_PRECONDITION",
			want: []string{"PROMPT_TOO_LONG"}, stream: on("sim-large", ask("prompt_too_long*3"))},
		{name: "auto_compact", about: "near the context window: compacted before the call",
			want: []string{"AUTO_COMPACT", "COMPLETED"}, stream: on("sim-small", conversation(10, 2500, false, ""))},
		{name: "blocking_limit", about: "one message over the window: refused before any call",
			want: []string{"BLOCKING_LIMIT"}, stream: on("sim-small", prompt(strings.Repeat("huge prompt ", 2500), ""))},
		{name: "image_error", about: "an image refused twice: IMAGE_ERROR",
			want: []string{"REACTIVE_COMPACT_RETRY", "IMAGE_ERROR"}, stream: withImage(ask("media,media"))},
		{name: "budget_exceeded", about: "the key's budget of 5 tokens a day is spent by the broken first attempt: the resume is not sent, BUDGET_EXCEEDED, RESOURCE_EXHAUSTED until the day's end",
			want: []string{"STREAM_RESUME", "BUDGET_EXCEEDED"}, stream: ask("cut=4"), budgeted: true},
		{name: "token_budget", about: "a token budget of 100: continued until it is spent",
			want:   []string{"TOKEN_BUDGET_CONTINUATION", "TOKEN_BUDGET_CONTINUATION", "TOKEN_BUDGET_CONTINUATION", "COMPLETED"},
			stream: budget(ask(""), 100)},
		{name: "model_error", about: "a request the upstream refuses: MODEL_ERROR, FAILED_PRECONDITION",
			want: []string{"MODEL_ERROR"}, stream: ask("invalid")},
		{name: "outage_retry_info", about: "the last route overloaded until its circuit opens: UNAVAILABLE with RetryInfo (the cool-down)",
			want:   []string{"RETRY", "RETRY", "RETRY", "RETRY", "RETRY", "MODEL_ERROR"},
			stream: on("sim-large", ask("overload*20"))},
		{name: "rate_limit_over_ceiling", about: "Retry-After 10m, over the ceiling, on the last route: RESOURCE_EXHAUSTED with RetryInfo 10m",
			want: []string{"MODEL_ERROR"}, stream: on("sim-large", ask("rate_limit=10m"))},
		{name: "invalid_argument", about: "a request refused before any call: INVALID_ARGUMENT with field violations, no events",
			stream: &completionv1.CompleteRequest{MaxOutputTokens: proto.Int32(-1)}},
		{name: "tool_use", about: "Stream with tools: the call in a tool_call event, stop TOOL_USE",
			want: []string{"COMPLETED"}, stream: tools(ask("tool_use=search"))},
		{name: "stop_sequence", about: "a stop sequence the answer writes: it ends there, stop STOP_SEQUENCE, the sequence not part of the text",
			want: []string{"COMPLETED"}, stream: stop(ask(""), "models")},
		{name: "stop_split_resume", about: "a stop sequence split across a stream resume: matched by the service, nothing of the new attempt sent",
			want: []string{"STREAM_RESUME", "COMPLETED"}, stream: stop(ask("cut=3"), "hen up")},
		{name: "tool_choice", about: "tool_choice TOOL: a plain answer becomes a call of the named tool, stop TOOL_USE",
			want: []string{"COMPLETED"}, stream: choose(tools(ask("")), "fetch")},
		{name: "max_total_output", about: "max_output_tokens 2 is never escalated: continued until max_total_output_tokens 5 is spent, COMPLETED truncated",
			want: []string{"MAX_OUTPUT_TOKENS_RECOVERY", "MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"}, stream: capped(ask("max_tokens,max_tokens,max_tokens"), 2, 5)},
		{name: "sampling", about: "temperature 0 and a seed: accepted, a plain answer (the sim is deterministic)",
			want: []string{"COMPLETED"}, stream: sampled(ask(""), 0, 7)},
		{name: "reasoning", about: "reasoning effort LOW: the model thinks first (DELTA_KIND_THINKING deltas, the fold's thinking), then answers",
			want: []string{"COMPLETED"}, stream: reason(ask(""), completionv1.ReasoningEffort_REASONING_EFFORT_LOW)},
		{name: "reasoning_clean_restart", about: "reasoning on a route without prefill, the stream broken: attempt 1's thinking is discarded with its text, the restart thinks again",
			want: []string{"RETRY", "COMPLETED"}, stream: on("sim-noprefill", reason(ask("cut=4"), completionv1.ReasoningEffort_REASONING_EFFORT_LOW))},
		{name: "image_stripped", about: "of two images, the upstream rejects the first: stripped_blocks names it, the retry sends a placeholder in its place and the other image",
			want: []string{"REACTIVE_COMPACT_RETRY", "COMPLETED"}, stream: withImage(withImage(ask("media=0.1*2")))},
		{name: "image_url", about: "an image by its https URL, which the provider fetches: accepted, a plain answer",
			want: []string{"COMPLETED"}, stream: withBlocks(ask(""), &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
				Image: &completionv1.ImageBlock{Url: "https://example.com/diagram.png"}}})},
		{name: "prompt_cache_off", about: "prompt_cache OFF: no cache breakpoint sent, a plain answer",
			want: []string{"COMPLETED"}, stream: cached(ask(""), completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF, false)},
		{name: "prompt_cache_caller", about: "prompt_cache CALLER with the caller's marks: the system prompt, a tool and a PDF document by URL; a plain answer",
			want: []string{"COMPLETED"}, stream: cached(withBlocks(markedTools(ask("")), &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{
				Document: &completionv1.DocumentBlock{Url: "https://example.com/runbook.pdf", Title: "Runbook"}}, CacheBreakpoint: true}),
				completionv1.PromptCacheMode_PROMPT_CACHE_MODE_CALLER, true)},

		{name: "session_next_turn", about: "a Session tool loop: the call answered, the model answers in turn 2",
			want: []string{"NEXT_TURN", "COMPLETED"}, session: start(tools(ask("tool_use=search")), 0, false), answer: answerTools(false)},
		{name: "session_tool_reset_settled", about: "the stream breaks after a complete tool call: that call is never sent, the restart's is",
			want: []string{"RETRY", "NEXT_TURN", "COMPLETED"}, session: start(settled(tools(ask("tool_reset=search,tool_use=search"))), 0, false),
			answer: answerTools(false)},
		{name: "session_max_turns", about: "more tool calls than max_turns allows: MAX_TURNS, RESOURCE_EXHAUSTED",
			want: []string{"MAX_TURNS"}, session: start(tools(ask("tool_use=search,tool_use=search")), 1, false), answer: answerTools(false)},
		{name: "session_aborted_tools", about: "the caller cancels instead of running the tool: ABORTED_TOOLS, CANCELLED",
			want: []string{"ABORTED_TOOLS"}, session: start(tools(ask("tool_use=search")), 0, false),
			answer: func(ev *completionv1.CompletionEvent, _ *caller) *completionv1.SessionRequest {
				if ev.GetToolCall() != nil {
					return cancel("the user pressed stop")
				}
				return nil
			}},
		{name: "session_aborted_streaming", about: "the caller cancels while the answer streams: ABORTED_STREAMING, CANCELLED",
			want: []string{"ABORTED_STREAMING"}, session: start(paced(ask("")), 0, false),
			answer: func(ev *completionv1.CompletionEvent, c *caller) *completionv1.SessionRequest {
				if ev.GetDelta() != nil {
					if c.deltas++; c.deltas == 2 {
						return cancel("the user pressed stop")
					}
				}
				return nil
			}},
		{name: "session_stop_hook_blocking", about: "the stop hook blocks the first answer, allows the second",
			want: []string{"STOP_HOOK_BLOCKING", "COMPLETED"}, session: start(ask(""), 0, true), answer: answerHooks(completionv1.Verdict_VERDICT_BLOCK, completionv1.Verdict_VERDICT_ALLOW)},
		{name: "session_stop_hook_prevented", about: "the stop hook prevents the answer: STOP_HOOK_PREVENTED, ABORTED",
			want: []string{"STOP_HOOK_PREVENTED"}, session: start(ask(""), 0, true), answer: answerHooks(completionv1.Verdict_VERDICT_PREVENT)},
		{name: "session_hook_stopped", about: "a tool result asks to halt: HOOK_STOPPED, ABORTED",
			want: []string{"HOOK_STOPPED"}, session: start(tools(ask("tool_use=search")), 0, false), answer: answerTools(true)},
	}
}

func prompt(text, script string) *completionv1.CompleteRequest {
	md := map[string]string{sim.MetaWords: "8"}
	if script != "" {
		md[sim.MetaFaults] = script
	}
	return &completionv1.CompleteRequest{
		Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{text2(text)}}},
		Metadata: md,
	}
}

func text2(text string) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: text}}}
}

func ask(script string) *completionv1.CompleteRequest {
	return prompt("Tell me about recovery.", script)
}

func on(route string, r *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	r.Route = route
	return r
}

func settled(r *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	r.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
	return r
}

func budget(r *completionv1.CompleteRequest, n int32) *completionv1.CompleteRequest {
	r.TokenBudget = n
	return r
}

func paced(r *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	r.Metadata[sim.MetaPace] = "20ms"
	r.Metadata[sim.MetaWords] = "40"
	return r
}

func tools(r *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	r.Tools = []*completionv1.Tool{{Name: "search", Description: "Searches the web."}}
	return r
}

// stop sets the request's stop sequences.
func stop(r *completionv1.CompleteRequest, seqs ...string) *completionv1.CompleteRequest {
	r.StopSequences = seqs
	return r
}

// choose offers a second tool, fetch, and forces the call of the tool name.
func choose(r *completionv1.CompleteRequest, name string) *completionv1.CompleteRequest {
	r.Tools = append(r.Tools, &completionv1.Tool{Name: "fetch", Description: "Fetches a page."})
	r.ToolChoice = &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, Name: name}
	return r
}

// capped sets max_output_tokens (one attempt's) and max_total_output_tokens
// (the completion's).
func capped(r *completionv1.CompleteRequest, attempt, total int32) *completionv1.CompleteRequest {
	r.MaxOutputTokens, r.MaxTotalOutputTokens = proto.Int32(attempt), proto.Int32(total)
	return r
}

// sampled sets the sampling parameters temperature and seed.
func sampled(r *completionv1.CompleteRequest, temperature float64, seed int64) *completionv1.CompleteRequest {
	r.Temperature, r.Seed = proto.Float64(temperature), proto.Int64(seed)
	return r
}

// reason asks the model to reason with effort.
func reason(r *completionv1.CompleteRequest, effort completionv1.ReasoningEffort) *completionv1.CompleteRequest {
	r.Reasoning = &completionv1.Reasoning{Effort: effort}
	return r
}

// withBlocks adds blocks to the prompt, after its text.
func withBlocks(r *completionv1.CompleteRequest, blocks ...*completionv1.ContentBlock) *completionv1.CompleteRequest {
	r.Messages[0].Content = append(r.Messages[0].Content, blocks...)
	return r
}

// cached sets the prompt cache's mode and whether the system prompt (one
// it adds) is a breakpoint of the caller's.
func cached(r *completionv1.CompleteRequest, mode completionv1.PromptCacheMode, system bool) *completionv1.CompleteRequest {
	r.PromptCache = &completionv1.PromptCache{Mode: mode, System: system}
	if system {
		r.System = "You are a concise site reliability engineer."
	}
	return r
}

// markedTools is tools with the tool marked as a cache breakpoint.
func markedTools(r *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	r = tools(r)
	r.Tools[0].CacheBreakpoint = true
	return r
}

func withImage(r *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	r.Messages[0].Content = append(r.Messages[0].Content, &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
		Image: &completionv1.ImageBlock{MediaType: "image/png", Data: []byte("\x89PNG fake")}}})
	return r
}

// conversation is n alternating messages of size bytes; bulky makes the
// second one a large block.
func conversation(n, size int, bulky bool, script string) *completionv1.CompleteRequest {
	r := prompt("Summarise the incident.", script)
	for i := 1; i < n; i++ {
		role := completionv1.Role_ROLE_ASSISTANT
		if i%2 == 0 {
			role = completionv1.Role_ROLE_USER
		}
		text := strings.Repeat("word ", size/5)
		if bulky && i == 2 {
			text = strings.Repeat("log line ", 1000)
		}
		r.Messages = append(r.Messages, &completionv1.Message{Role: role, Content: []*completionv1.ContentBlock{text2(text)}})
	}
	return r
}

func start(r *completionv1.CompleteRequest, maxTurns int32, stopHook bool) *completionv1.SessionStart {
	return &completionv1.SessionStart{Request: r, MaxTurns: maxTurns, StopHook: stopHook}
}

func cancel(reason string) *completionv1.SessionRequest {
	return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Cancel{Cancel: &completionv1.Cancel{Reason: reason}}}
}

// answerTools answers every tool call with "42" (and asks to halt).
func answerTools(halt bool) func(*completionv1.CompletionEvent, *caller) *completionv1.SessionRequest {
	return func(ev *completionv1.CompletionEvent, _ *caller) *completionv1.SessionRequest {
		call := ev.GetToolCall()
		if call == nil {
			return nil
		}
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{
			Results: []*completionv1.ToolResultBlock{{ToolUseId: call.GetId(), Text: "42", Halt: halt}}}}}
	}
}

// answerHooks answers the stop-hook requests with verdicts, in order.
func answerHooks(verdicts ...completionv1.Verdict) func(*completionv1.CompletionEvent, *caller) *completionv1.SessionRequest {
	return func(ev *completionv1.CompletionEvent, c *caller) *completionv1.SessionRequest {
		req := ev.GetStopHookRequest()
		if req == nil {
			return nil
		}
		v := verdicts[min(c.hooks, len(verdicts)-1)]
		c.hooks++
		msg := ""
		if v != completionv1.Verdict_VERDICT_ALLOW {
			msg = "Cite a source."
		}
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{StopHookVerdict: &completionv1.StopHookVerdict{
			HookId: req.GetHookId(), Verdict: v, Message: msg}}}
	}
}
