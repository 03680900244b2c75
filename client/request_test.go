package client

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

func TestTextBuildsTheRequest(t *testing.T) {
	user := func(text string) *completionv1.Message {
		return &completionv1.Message{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{
			{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: text}}}}}
	}
	assistant := user("earlier answer")
	assistant.Role = completionv1.Role_ROLE_ASSISTANT
	n := int32(100)
	policy := &completionv1.Policy{DisableFallback: true}
	for _, tc := range []struct {
		name string
		got  *completionv1.CompleteRequest
		want *completionv1.CompleteRequest
	}{
		{"prompt only", Text("hi"), &completionv1.CompleteRequest{Messages: []*completionv1.Message{user("hi")}}},
		{"every option", Text("hi",
			WithRoute("claude"), WithSystem("be brief"), WithHistory(user("before"), AssistantText("earlier answer")),
			WithTools(&completionv1.Tool{Name: "search"}), WithMaxOutputTokens(100), WithResumeGrace(time.Minute),
			WithMetadata(map[string]string{"a": "1"}), WithMetadata(map[string]string{"b": "2"}), WithPolicy(policy),
			WithDelivery(completionv1.DeliveryMode_DELIVERY_MODE_SETTLED)),
			&completionv1.CompleteRequest{
				Route: "claude", System: "be brief",
				Messages:        []*completionv1.Message{user("before"), assistant, user("hi")},
				Tools:           []*completionv1.Tool{{Name: "search"}},
				MaxOutputTokens: &n, ResumeGrace: durationpb.New(time.Minute),
				Metadata: map[string]string{"a": "1", "b": "2"}, Policy: policy,
				Delivery: completionv1.DeliveryMode_DELIVERY_MODE_SETTLED,
			}},
		{"options apply in order", Text("hi", WithRoute("a"), WithRoute("b")),
			&completionv1.CompleteRequest{Route: "b", Messages: []*completionv1.Message{user("hi")}}},
		{"sampling, stop sequences and the total output bound", Text("hi",
			WithTemperature(0.25), WithTopP(0.9), WithTopK(40), WithSeed(-7),
			WithStopSequences("END"), WithStopSequences("\n\nHuman:", "###"), WithMaxTotalOutputTokens(20000)),
			&completionv1.CompleteRequest{
				Messages:    []*completionv1.Message{user("hi")},
				Temperature: proto.Float64(0.25), TopP: proto.Float64(0.9), TopK: proto.Int32(40), Seed: proto.Int64(-7),
				StopSequences:        []string{"END", "\n\nHuman:", "###"},
				MaxTotalOutputTokens: proto.Int32(20000),
			}},
		{"a zero temperature is sent, not left unset", Text("hi", WithTemperature(0), WithSeed(0)),
			&completionv1.CompleteRequest{Messages: []*completionv1.Message{user("hi")}, Temperature: proto.Float64(0), Seed: proto.Int64(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !proto.Equal(tc.got, tc.want) {
				t.Errorf("got  %v\nwant %v", tc.got, tc.want)
			}
		})
	}
}

func TestToolChoiceOptions(t *testing.T) {
	choice := func(mode completionv1.ToolChoiceMode, name string, disable bool) *completionv1.ToolChoice {
		return &completionv1.ToolChoice{Mode: mode, Name: name, DisableParallelToolUse: disable}
	}
	for _, tc := range []struct {
		name string
		opts []RequestOption
		want *completionv1.ToolChoice
	}{
		{"unset", nil, nil},
		{"auto", []RequestOption{WithToolChoice(ToolChoiceAuto())}, choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "", false)},
		{"any", []RequestOption{WithToolChoice(ToolChoiceAny())}, choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY, "", false)},
		{"none", []RequestOption{WithToolChoice(ToolChoiceNone())}, choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "", false)},
		{"a named tool", []RequestOption{WithToolChoice(ToolChoiceTool("search"))},
			choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, "search", false)},
		{"no parallel tool use alone", []RequestOption{WithDisableParallelToolUse()},
			choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED, "", true)},
		{"no parallel tool use, then a choice", []RequestOption{WithDisableParallelToolUse(), WithToolChoice(ToolChoiceAny())},
			choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY, "", true)},
		{"a choice, then no parallel tool use", []RequestOption{WithToolChoice(ToolChoiceTool("search")), WithDisableParallelToolUse()},
			choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, "search", true)},
		{"the latest choice wins", []RequestOption{WithToolChoice(ToolChoiceTool("search")), WithToolChoice(ToolChoiceNone())},
			choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "", false)},
		{"a message of the caller's", []RequestOption{WithToolChoice(choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY, "", true))},
			choice(completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY, "", true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Text("hi", append([]RequestOption{WithTools(&completionv1.Tool{Name: "search"})}, tc.opts...)...).GetToolChoice()
			if !proto.Equal(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
	// The option copies the caller's message: changing it later does not
	// change the request.
	mine := ToolChoiceAny()
	req := Text("hi", WithToolChoice(mine))
	mine.Mode = completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE
	if got := req.GetToolChoice().GetMode(); got != completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY {
		t.Errorf("mode %v after the caller changed its message, want ANY", got)
	}
}

func TestReasoningOptions(t *testing.T) {
	const low, high = completionv1.ReasoningEffort_REASONING_EFFORT_LOW, completionv1.ReasoningEffort_REASONING_EFFORT_HIGH
	reasoning := func(budget int32, effort completionv1.ReasoningEffort, interleaved bool) *completionv1.Reasoning {
		return &completionv1.Reasoning{BudgetTokens: budget, Effort: effort, Interleaved: interleaved}
	}
	for _, tc := range []struct {
		name string
		opts []RequestOption
		want *completionv1.Reasoning
	}{
		{"unset", nil, nil},
		{"an effort", []RequestOption{WithReasoningEffort(low)}, reasoning(0, low, false)},
		{"a budget", []RequestOption{WithReasoningBudgetTokens(4096)}, reasoning(4096, 0, false)},
		{"interleaved alone", []RequestOption{WithReasoningInterleaved()}, reasoning(0, 0, true)},
		{"all three, in any order", []RequestOption{WithReasoningInterleaved(), WithReasoningBudgetTokens(2048), WithReasoningEffort(high)},
			reasoning(2048, high, true)},
		{"the latest effort wins", []RequestOption{WithReasoningEffort(high), WithReasoningEffort(low)}, reasoning(0, low, false)},
		{"a message of the caller's", []RequestOption{WithReasoning(reasoning(8192, high, true))}, reasoning(8192, high, true)},
		{"a message, then a field", []RequestOption{WithReasoning(reasoning(8192, high, false)), WithReasoningEffort(low)},
			reasoning(8192, low, false)},
		{"a field, then a message: the message replaces it", []RequestOption{WithReasoningInterleaved(), WithReasoning(reasoning(0, low, false))},
			reasoning(0, low, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text("hi", tc.opts...).GetReasoning(); !proto.Equal(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
	mine := reasoning(4096, 0, false)
	req := Text("hi", WithReasoning(mine), WithReasoningInterleaved())
	if mine.GetInterleaved() {
		t.Error("WithReasoning changed the caller's message")
	}
	if !req.GetReasoning().GetInterleaved() || req.GetReasoning().GetBudgetTokens() != 4096 {
		t.Errorf("reasoning %v", req.GetReasoning())
	}
}

func TestPromptCacheOptions(t *testing.T) {
	const auto, off, caller = completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO, completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF,
		completionv1.PromptCacheMode_PROMPT_CACHE_MODE_CALLER
	cache := func(mode completionv1.PromptCacheMode, system bool) *completionv1.PromptCache {
		return &completionv1.PromptCache{Mode: mode, System: system}
	}
	for _, tc := range []struct {
		name string
		opts []RequestOption
		want *completionv1.PromptCache
	}{
		{"unset", nil, nil},
		{"auto", []RequestOption{WithPromptCache(PromptCacheAuto())}, cache(auto, false)},
		{"off", []RequestOption{WithPromptCache(PromptCacheOff())}, cache(off, false)},
		{"caller", []RequestOption{WithPromptCache(PromptCacheCaller())}, cache(caller, false)},
		{"the system prompt alone", []RequestOption{WithPromptCacheSystem()}, cache(0, true)},
		{"the system prompt, then a mode", []RequestOption{WithPromptCacheSystem(), WithPromptCache(PromptCacheCaller())}, cache(caller, true)},
		{"a mode, then the system prompt", []RequestOption{WithPromptCache(PromptCacheAuto()), WithPromptCacheSystem()}, cache(auto, true)},
		{"the latest mode wins", []RequestOption{WithPromptCache(PromptCacheCaller()), WithPromptCache(PromptCacheOff())}, cache(off, false)},
		{"a message of the caller's", []RequestOption{WithPromptCache(cache(caller, true))}, cache(caller, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text("hi", tc.opts...).GetPromptCache(); !proto.Equal(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
	mine := PromptCacheCaller()
	req := Text("hi", WithPromptCache(mine), WithPromptCacheSystem())
	if mine.GetSystem() {
		t.Error("WithPromptCache changed the caller's message")
	}
	if got := req.GetPromptCache(); !proto.Equal(got, cache(caller, true)) {
		t.Errorf("prompt_cache %v", got)
	}
}

func TestContentBlocks(t *testing.T) {
	png := []byte("\x89PNG\r\n")
	pdf := []byte("%PDF-1.7\n")
	for _, tc := range []struct {
		name      string
		got, want *completionv1.ContentBlock
	}{
		{"an inline image", ImageBlock("image/png", png),
			&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{Image: &completionv1.ImageBlock{MediaType: "image/png", Data: png}}}},
		{"an image by URL", ImageURLBlock("https://example.com/cat.jpg"),
			&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{Image: &completionv1.ImageBlock{Url: "https://example.com/cat.jpg"}}}},
		{"a PDF", DocumentBlock(pdf, "Spec"),
			&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{Document: &completionv1.DocumentBlock{
				MediaType: "application/pdf", Data: pdf, Title: "Spec"}}}},
		{"a PDF without a title", DocumentBlock(pdf, ""),
			&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{Document: &completionv1.DocumentBlock{MediaType: "application/pdf", Data: pdf}}}},
		{"a PDF by URL", DocumentURLBlock("https://example.com/spec.pdf", "Spec"),
			&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{Document: &completionv1.DocumentBlock{
				Url: "https://example.com/spec.pdf", Title: "Spec"}}}},
		{"a cache breakpoint", CacheBreakpoint(TextBlock("a long preamble")),
			&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "a long preamble"}}, CacheBreakpoint: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !proto.Equal(tc.got, tc.want) {
				t.Errorf("got  %v\nwant %v", tc.got, tc.want)
			}
		})
	}

	tool := &completionv1.Tool{Name: "search"}
	if got := CacheBreakpoint(tool); got != tool || !tool.GetCacheBreakpoint() {
		t.Errorf("CacheBreakpoint(tool) = %v, the tool %v: want the tool itself, marked", got, tool)
	}

	doc := CacheBreakpoint(DocumentURLBlock("https://example.com/spec.pdf", ""))
	req := Text("Summarise it.", WithBlocks(ImageURLBlock("https://example.com/cat.jpg"), doc),
		WithHistory(UserText("Look:", ImageBlock("image/png", png)), AssistantText("A cat.")))
	want := []*completionv1.Message{
		{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{TextBlock("Look:"), ImageBlock("image/png", png)}},
		AssistantText("A cat."),
		{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{TextBlock("Summarise it."),
			ImageURLBlock("https://example.com/cat.jpg"), CacheBreakpoint(DocumentURLBlock("https://example.com/spec.pdf", ""))}},
	}
	if !proto.Equal(req, &completionv1.CompleteRequest{Messages: want}) {
		t.Errorf("got  %v\nwant %v", req.GetMessages(), want)
	}
	// WithBlocks adds to the prompt wherever it comes among the options.
	if got := Text("x", WithBlocks(ImageURLBlock("https://a")), WithHistory(AssistantText("y"))).GetMessages(); len(got[1].GetContent()) != 2 {
		t.Errorf("messages %v: the prompt (the last) should hold the text and the image", got)
	}
}

// TestTextIsAValidRequest: the server takes what Text builds and answers.
func TestTextIsAValidRequest(t *testing.T) {
	c := New(serve(t))
	s, err := c.Stream(ctxFor(t), Text("Tell me about recovery.", WithRoute("sim"),
		WithMetadata(map[string]string{"sim.faults": "rate_limit", "sim.words": "5", "sim.pace": "1ms"}), WithResumeGrace(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if f.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || !strings.Contains(f.Text(), "recovery") {
		t.Errorf("reason %v, text %q", f.Reason(), f.Text())
	}
	if got := f.Transitions()[0].GetReason(); got != completionv1.TransitionReason_TRANSITION_REASON_RETRY {
		t.Errorf("first transition %v, want RETRY", got)
	}
}

// TestTextWithSamplingIsAValidRequest: the server takes every new request
// option Text sets (the sim routes honour them all) and answers.
func TestTextWithSamplingIsAValidRequest(t *testing.T) {
	c := New(serve(t))
	s, err := c.Stream(ctxFor(t), Text("Tell me about recovery.", WithRoute("sim"),
		WithMetadata(map[string]string{"sim.words": "5", "sim.pace": "1ms"}),
		WithTemperature(0.5), WithTopP(0.9), WithTopK(40), WithSeed(7), WithStopSequences("\n\nHuman:"),
		WithTools(&completionv1.Tool{Name: "search"}), WithToolChoice(ToolChoiceNone()), WithDisableParallelToolUse(),
		WithMaxOutputTokens(500), WithMaxTotalOutputTokens(2000)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if f.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || f.Text() == "" {
		t.Errorf("reason %v, text %q", f.Reason(), f.Text())
	}
	if got := f.Result().GetStopSequence(); got != "" {
		t.Errorf("stop_sequence %q of an answer no stop sequence ended", got)
	}
}

// TestTextWithReasoningAndMediaIsAValidRequest: the server takes what the
// reasoning, prompt cache and content block helpers build (the sim routes
// honour them all) and answers.
func TestTextWithReasoningAndMediaIsAValidRequest(t *testing.T) {
	c := New(serve(t))
	for _, tc := range []struct {
		name   string
		thinks bool
		opts   []RequestOption
	}{
		{"reasoning", true, []RequestOption{WithReasoningEffort(completionv1.ReasoningEffort_REASONING_EFFORT_LOW),
			WithReasoningBudgetTokens(2048), WithReasoningInterleaved()}},
		{"media by URL and the caller's cache marks", false, []RequestOption{WithSystem("Be brief."), WithPromptCacheSystem(),
			WithPromptCache(PromptCacheCaller()), WithTools(CacheBreakpoint(&completionv1.Tool{Name: "search"})),
			WithBlocks(ImageURLBlock("https://example.com/cat.jpg"), CacheBreakpoint(DocumentURLBlock("https://example.com/spec.pdf", "Spec")))}},
		{"inline media, no cache", false, []RequestOption{WithPromptCache(PromptCacheOff()),
			WithBlocks(ImageBlock("image/png", []byte("\x89PNG\r\n\x1a\n")), DocumentBlock([]byte("%PDF-1.7\n"), ""))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]RequestOption{WithRoute("sim"), WithMetadata(map[string]string{"sim.words": "5", "sim.pace": "1ms"})}, tc.opts...)
			s, err := c.Stream(ctxFor(t), Text("Tell me about recovery.", opts...))
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if f.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || f.Text() == "" {
				t.Errorf("reason %v, text %q", f.Reason(), f.Text())
			}
			if (f.Thinking() != "") != tc.thinks {
				t.Errorf("thinking %q; want some: %v (the sim thinks when reasoning is asked)", f.Thinking(), tc.thinks)
			}
		})
	}
}
