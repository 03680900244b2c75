package client

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// RequestOption sets a field of the request [Text] builds.
type RequestOption func(*completionv1.CompleteRequest)

// Text is a request of one user message holding prompt, with opts applied
// in order: the request most calls need, without four nested literals.
//
//	c.Stream(ctx, client.Text("Explain backoff.", client.WithRoute("claude"), client.WithResumeGrace(time.Minute)))
//
// Any field without an option can be set on the result, which is a plain
// generated message.
func Text(prompt string, opts ...RequestOption) *completionv1.CompleteRequest {
	req := &completionv1.CompleteRequest{Messages: []*completionv1.Message{UserText(prompt)}}
	for _, o := range opts {
		o(req)
	}
	return req
}

// UserText is a user message of one text block, followed by blocks, if
// any: images, documents ([ImageBlock], [ImageURLBlock], [DocumentBlock],
// [DocumentURLBlock]).
func UserText(text string, blocks ...*completionv1.ContentBlock) *completionv1.Message {
	return &completionv1.Message{Role: completionv1.Role_ROLE_USER, Content: append([]*completionv1.ContentBlock{TextBlock(text)}, blocks...)}
}

// AssistantText is an assistant message of one text block, for a
// conversation's earlier answers.
func AssistantText(text string) *completionv1.Message {
	return &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{TextBlock(text)}}
}

// TextBlock is a content block of plain text.
func TextBlock(text string) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: text}}}
}

// ImageBlock is a content block of an inline image: mediaType is one of
// image/png, image/jpeg, image/gif, image/webp, data the encoded image.
func ImageBlock(mediaType string, data []byte) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{Image: &completionv1.ImageBlock{MediaType: mediaType, Data: data}}}
}

// ImageURLBlock is a content block of an image by its https URL, which the
// provider fetches (completiond never does).
func ImageURLBlock(url string) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{Image: &completionv1.ImageBlock{Url: url}}}
}

// DocumentBlock is a content block of a PDF document (Anthropic routes):
// data is the PDF, title, when not empty, names it for the model.
func DocumentBlock(data []byte, title string) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{Document: &completionv1.DocumentBlock{
		MediaType: "application/pdf", Data: data, Title: title}}}
}

// DocumentURLBlock is a content block of a PDF document by its https URL,
// which the provider fetches (completiond never does); title, when not
// empty, names it for the model.
func DocumentURLBlock(url, title string) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{Document: &completionv1.DocumentBlock{Url: url, Title: title}}}
}

// CacheBreakpoint marks x, a content block or a tool, as a prompt cache
// breakpoint of the caller's (its cache_breakpoint) and returns it: the
// conversation up to and including the block, or the tools up to and
// including the tool, are cached. The server honours the caller's marks in
// PROMPT_CACHE_MODE_AUTO (the default) and PROMPT_CACHE_MODE_CALLER, and
// refuses them in PROMPT_CACHE_MODE_OFF.
func CacheBreakpoint[T *completionv1.ContentBlock | *completionv1.Tool](x T) T {
	switch v := any(x).(type) {
	case *completionv1.ContentBlock:
		v.CacheBreakpoint = true
	case *completionv1.Tool:
		v.CacheBreakpoint = true
	}
	return x
}

// WithRoute names the route to call first; empty is the server's default.
func WithRoute(route string) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.Route = route }
}

// WithSystem sets the system prompt.
func WithSystem(system string) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.System = system }
}

// WithHistory puts earlier messages of the conversation before the prompt.
func WithHistory(messages ...*completionv1.Message) RequestOption {
	return func(r *completionv1.CompleteRequest) {
		r.Messages = append(append([]*completionv1.Message{}, messages...), r.Messages...)
	}
}

// WithBlocks adds content blocks to the prompt's user message, after its
// text: images and documents ([ImageURLBlock], [DocumentBlock] …).
func WithBlocks(blocks ...*completionv1.ContentBlock) RequestOption {
	return func(r *completionv1.CompleteRequest) {
		if n := len(r.Messages); n > 0 {
			r.Messages[n-1].Content = append(r.Messages[n-1].Content, blocks...)
		}
	}
}

// WithTools declares tools the model may call.
func WithTools(tools ...*completionv1.Tool) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.Tools = append(r.Tools, tools...) }
}

// WithMaxOutputTokens caps the output of one attempt.
func WithMaxOutputTokens(n int32) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.MaxOutputTokens = &n }
}

// WithMaxTotalOutputTokens bounds the output tokens of the answer as a
// whole, across continuations, stream resumes and token-budget nudges; an
// answer that reaches it ends COMPLETED, flagged truncated.
func WithMaxTotalOutputTokens(n int32) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.MaxTotalOutputTokens = &n }
}

// WithTemperature sets the sampling temperature: 0 to 1 on Anthropic
// routes, 0 to 2 on OpenAI-compatible ones.
func WithTemperature(t float64) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.Temperature = &t }
}

// WithTopP sets nucleus sampling, in (0, 1].
func WithTopP(p float64) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.TopP = &p }
}

// WithTopK samples from the k most likely tokens only (Anthropic routes);
// k is at least 1.
func WithTopK(k int32) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.TopK = &k }
}

// WithSeed asks an OpenAI-compatible route for reproducible sampling.
func WithSeed(seed int64) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.Seed = &seed }
}

// WithStopSequences adds stop sequences: the answer ends where the model
// writes one of them (STOP_REASON_STOP_SEQUENCE, Result.stop_sequence),
// the sequence itself left out.
func WithStopSequences(sequences ...string) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.StopSequences = append(r.StopSequences, sequences...) }
}

// WithToolChoice says whether and which tool the model must call:
// [ToolChoiceAuto], [ToolChoiceAny], [ToolChoiceNone] or [ToolChoiceTool].
// It sets the mode and the tool's name and keeps what
// [WithDisableParallelToolUse] set, before or after it.
func WithToolChoice(c *completionv1.ToolChoice) RequestOption {
	return func(r *completionv1.CompleteRequest) {
		disable := r.GetToolChoice().GetDisableParallelToolUse()
		r.ToolChoice = &completionv1.ToolChoice{
			Mode:                   c.GetMode(),
			Name:                   c.GetName(),
			DisableParallelToolUse: disable || c.GetDisableParallelToolUse(),
		}
	}
}

// WithDisableParallelToolUse asks for at most one tool call per answer,
// whatever the tool choice (auto when none is set).
func WithDisableParallelToolUse() RequestOption {
	return func(r *completionv1.CompleteRequest) {
		if r.ToolChoice == nil {
			r.ToolChoice = &completionv1.ToolChoice{}
		}
		r.ToolChoice.DisableParallelToolUse = true
	}
}

// ToolChoiceAuto lets the model decide whether to call a tool, the
// default.
func ToolChoiceAuto() *completionv1.ToolChoice {
	return &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
}

// ToolChoiceAny makes the model call at least one of the request's tools.
func ToolChoiceAny() *completionv1.ToolChoice {
	return &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY}
}

// ToolChoiceNone forbids tool calls.
func ToolChoiceNone() *completionv1.ToolChoice {
	return &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}
}

// ToolChoiceTool makes the model call the tool named name, one of the
// request's tools.
func ToolChoiceTool(name string) *completionv1.ToolChoice {
	return &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, Name: name}
}

// WithReasoning asks the model to think before it answers, as r says
// (budget_tokens, effort, interleaved); r is copied. The options below set
// one field of it each.
func WithReasoning(r *completionv1.Reasoning) RequestOption {
	return func(req *completionv1.CompleteRequest) {
		req.Reasoning = &completionv1.Reasoning{BudgetTokens: r.GetBudgetTokens(), Effort: r.GetEffort(), Interleaved: r.GetInterleaved()}
	}
}

// WithReasoningEffort asks the model to reason with the given effort
// (OpenAI's reasoning_effort; on an Anthropic route without a budget it
// maps to one). It sets reasoning.effort and keeps what
// [WithReasoningBudgetTokens] and [WithReasoningInterleaved] set, before or
// after it. Every route of the chain must take reasoning.
func WithReasoningEffort(e completionv1.ReasoningEffort) RequestOption {
	return func(r *completionv1.CompleteRequest) { reasoning(r).Effort = e }
}

// WithReasoningBudgetTokens asks the model to think before it answers,
// for at most n tokens (Anthropic extended thinking; at least 1024; on an
// OpenAI-compatible route without an effort it maps to one). It sets
// reasoning.budget_tokens and keeps the rest of reasoning.
func WithReasoningBudgetTokens(n int32) RequestOption {
	return func(r *completionv1.CompleteRequest) { reasoning(r).BudgetTokens = n }
}

// WithReasoningInterleaved lets an Anthropic model think between tool
// calls (reasoning.interleaved), keeping the rest of reasoning.
func WithReasoningInterleaved() RequestOption {
	return func(r *completionv1.CompleteRequest) { reasoning(r).Interleaved = true }
}

func reasoning(r *completionv1.CompleteRequest) *completionv1.Reasoning {
	if r.Reasoning == nil {
		r.Reasoning = &completionv1.Reasoning{}
	}
	return r.Reasoning
}

// WithPromptCache says who places the prompt cache breakpoints:
// [PromptCacheAuto], [PromptCacheOff] or [PromptCacheCaller]. It sets the
// mode and keeps what [WithPromptCacheSystem] set, before or after it.
func WithPromptCache(c *completionv1.PromptCache) RequestOption {
	return func(r *completionv1.CompleteRequest) {
		system := r.GetPromptCache().GetSystem()
		r.PromptCache = &completionv1.PromptCache{Mode: c.GetMode(), System: system || c.GetSystem()}
	}
}

// WithPromptCacheSystem marks the end of the system prompt (and the tools
// before it) as a prompt cache breakpoint of the caller's
// (prompt_cache.system), whatever the mode (auto when none is set).
func WithPromptCacheSystem() RequestOption {
	return func(r *completionv1.CompleteRequest) {
		if r.PromptCache == nil {
			r.PromptCache = &completionv1.PromptCache{}
		}
		r.PromptCache.System = true
	}
}

// PromptCacheAuto lets completiond place the breakpoints (the system
// prompt and tools, the end of the conversation, the end of each call's
// prompt) after the caller's own marks: the default.
func PromptCacheAuto() *completionv1.PromptCache {
	return &completionv1.PromptCache{Mode: completionv1.PromptCacheMode_PROMPT_CACHE_MODE_AUTO}
}

// PromptCacheOff sends no cache breakpoint; the server refuses the
// caller's marks with it.
func PromptCacheOff() *completionv1.PromptCache {
	return &completionv1.PromptCache{Mode: completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF}
}

// PromptCacheCaller sends the caller's marks only: the blocks and tools
// marked with [CacheBreakpoint], and [WithPromptCacheSystem].
func PromptCacheCaller() *completionv1.PromptCache {
	return &completionv1.PromptCache{Mode: completionv1.PromptCacheMode_PROMPT_CACHE_MODE_CALLER}
}

// WithResumeGrace keeps the completion running for d after its caller's
// connection dropped, so that the stream can attach again (and a Session
// resume) without missing an event.
func WithResumeGrace(d time.Duration) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.ResumeGrace = durationpb.New(d) }
}

// WithMetadata adds free-form metadata; keys starting with "sim." script
// the embedded simulator (e.g. "sim.faults": "rate_limit").
func WithMetadata(md map[string]string) RequestOption {
	return func(r *completionv1.CompleteRequest) {
		if r.Metadata == nil {
			r.Metadata = make(map[string]string, len(md))
		}
		maps.Copy(r.Metadata, md)
	}
}

// WithPolicy tightens the server's recovery policy for this request.
func WithPolicy(p *completionv1.Policy) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.Policy = p }
}

// WithDelivery chooses when token deltas are sent (live or settled).
func WithDelivery(m completionv1.DeliveryMode) RequestOption {
	return func(r *completionv1.CompleteRequest) { r.Delivery = m }
}

// withIdempotencyKey is req with an idempotency key: req itself when it
// has one, else a copy with a random one (16 bytes, hex), so that the
// caller's request is not changed and each call gets its own key.
func withIdempotencyKey(req *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	if req.GetIdempotencyKey() != "" {
		return req
	}
	out := proto.CloneOf(req)
	if out == nil {
		out = &completionv1.CompleteRequest{}
	}
	out.IdempotencyKey = newIdempotencyKey()
	return out
}

// newIdempotencyKey is a random idempotency key: 16 bytes, hex.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
