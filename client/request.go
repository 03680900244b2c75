package client

import (
	"maps"
	"time"

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

// UserText is a user message of one text block.
func UserText(text string) *completionv1.Message {
	return &completionv1.Message{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{TextBlock(text)}}
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
