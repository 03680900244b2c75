package provider

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/completiond/completiond/recovery"
)

// Tool declares a tool the model may call.
type Tool struct {
	// Name is the tool's name.
	Name string
	// Description tells the model what the tool does.
	Description string
	// InputSchema is the JSON Schema of the arguments, as JSON.
	InputSchema []byte
	// CacheBreakpoint marks the tools up to and including this one as a
	// prompt cache breakpoint (Anthropic cache_control).
	CacheBreakpoint bool
}

// Timeouts bound one attempt. Zero fields mean no limit.
type Timeouts struct {
	// Headers bounds the wait for response headers.
	Headers time.Duration
	// FirstToken bounds the wait from the request to the first chunk.
	FirstToken time.Duration
	// Idle bounds the upstream's silence between two chunks. Time spent in
	// the caller's emit (back-pressure downstream) is not silence: the
	// limit is suspended while emit runs and restarts when it returns.
	Idle time.Duration
	// Total bounds the whole attempt.
	Total time.Duration
}

// Request is one upstream attempt.
type Request struct {
	// Attempt is the attempt number within the completion (1-based).
	Attempt int
	// Model is the upstream model.
	Model string
	// System is the system prompt.
	System string
	// Messages is the conversation.
	Messages []recovery.Message
	// Tools the model may call.
	Tools []Tool
	// MaxTokens is the output limit.
	MaxTokens int
	// Prefill, when not empty, is sent as the start of the assistant's
	// answer; the stream yields only what follows it.
	Prefill string
	// ThinkingBudget, when positive, asks the model to think with about
	// this many tokens before answering (Anthropic extended thinking); 0
	// turns thinking off. Providers without such a knob ignore it. Thinking
	// streams as ChunkThinking, and each complete block as a
	// ChunkThinkingBlock.
	ThinkingBudget int
	// Reasoning is the caller's reasoning request, resolved against the
	// route: Anthropic's budget and interleaved thinking go through
	// ThinkingBudget and Interleaved, OpenAI's effort through Effort.
	Reasoning Reasoning
	// OutputSchema, when set, is the JSON Schema the answer must satisfy,
	// as JSON: a provider whose StructuredOutput is not StructuredHook
	// sends it as the upstream's structured output (the driver's stop hook
	// checks the answer either way).
	OutputSchema []byte
	// StructuredOutput is how the route asks for OutputSchema.
	StructuredOutput StructuredOutput
	// CacheSystem marks the end of the system prompt (with the tools
	// before it) as a prompt cache breakpoint. The blocks and tools marked
	// are Block.CacheBreakpoint and Tool.CacheBreakpoint; at most 4 marks
	// in all.
	CacheSystem bool
	// Sampling is the caller's sampling parameters, the same on every
	// attempt of a completion (none on a summarising call).
	Sampling Sampling
	// StopSequences end the answer where the model writes one of them; a
	// provider sends them upstream and reports the one that matched, when
	// its upstream says (Finish.StopSequence).
	StopSequences []string
	// ToolChoice says whether and which tool the model must call; the zero
	// value sends nothing (the upstream's default).
	ToolChoice ToolChoice
	// Metadata is the caller's free-form metadata (the sim provider reads its
	// fault script from it).
	Metadata map[string]string
	// Timeouts bound the attempt.
	Timeouts Timeouts
}

// Sampling is the caller's sampling parameters. A nil pointer or a zero
// TopK sends nothing: the upstream's default.
type Sampling struct {
	// Temperature is the sampling temperature.
	Temperature *float64
	// TopP is the nucleus sampling mass.
	TopP *float64
	// TopK samples from the K most likely tokens only (Anthropic).
	TopK int
	// Seed asks for reproducible sampling (OpenAI-compatible).
	Seed *int64
}

// ErrNotFinite is why a sampling parameter that is NaN or infinite is
// refused: JSON has no such number (the SDKs' encoders refuse the params
// and send nothing).
var ErrNotFinite = errors.New("is not a finite number")

// Finite refuses a temperature or top_p that JSON cannot carry. The
// request validation refuses them before; a provider checks again before
// it encodes a body.
func (s Sampling) Finite() error {
	for _, p := range []struct {
		name string
		v    *float64
	}{{"temperature", s.Temperature}, {"top_p", s.TopP}} {
		if p.v != nil && (math.IsNaN(*p.v) || math.IsInf(*p.v, 0)) {
			return fmt.Errorf("%s %w: %v", p.name, ErrNotFinite, *p.v)
		}
	}
	return nil
}

// Reasoning is what an OpenAI-compatible route is asked to reason with,
// and whether an Anthropic route thinks between tool calls.
type Reasoning struct {
	// Effort is OpenAI's reasoning_effort ("minimal", "low", "medium",
	// "high"); empty sends none.
	Effort string
	// Interleaved lets an Anthropic model think between tool calls
	// (the interleaved-thinking beta); its ThinkingBudget may then exceed
	// MaxTokens.
	Interleaved bool
}

// StructuredOutput is how a route asks its upstream for an answer that
// satisfies Request.OutputSchema.
type StructuredOutput int

const (
	// StructuredNative sends the schema as the upstream's own structured
	// output: OpenAI response_format json_schema, Anthropic
	// output_config.format.
	StructuredNative StructuredOutput = iota
	// StructuredTool (Anthropic) declares a tool whose input schema is the
	// schema and forces the model to call it; the provider streams the
	// call's input as the answer's text.
	StructuredTool
	// StructuredHook sends nothing: the driver's stop hook alone holds the
	// answer to the schema (for upstreams without structured output).
	StructuredHook
)

// StructuredToolName is the tool a provider declares and forces for
// StructuredTool: its input is the answer.
const StructuredToolName = "structured_output"

// ToolChoiceMode is how the model chooses whether to call a tool.
type ToolChoiceMode int

const (
	// ToolChoiceDefault sends no tool choice: the upstream's default (auto).
	ToolChoiceDefault ToolChoiceMode = iota
	// ToolChoiceAuto lets the model decide.
	ToolChoiceAuto
	// ToolChoiceAny makes the model call at least one tool (OpenAI's
	// "required").
	ToolChoiceAny
	// ToolChoiceNone forbids tool calls.
	ToolChoiceNone
	// ToolChoiceTool makes the model call the tool ToolChoice.Name.
	ToolChoiceTool
)

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	// Mode is how the model chooses.
	Mode ToolChoiceMode
	// Name is the tool of ToolChoiceTool.
	Name string
	// DisableParallel asks for at most one tool call per answer
	// (Anthropic's disable_parallel_tool_use, OpenAI's parallel_tool_calls
	// false); it may go with any Mode, ToolChoiceDefault included.
	DisableParallel bool
}

// ChunkKind is the kind of a Chunk.
type ChunkKind int

const (
	// ChunkText is a piece of answer text.
	ChunkText ChunkKind = iota + 1
	// ChunkThinking is a piece of reasoning, streamed as it comes.
	ChunkThinking
	// ChunkToolCall is a complete tool call: its id, its name and its whole
	// input. A tool call the model did not finish — its input cut by
	// the output limit, or by a stream that broke — is never emitted as a
	// ChunkToolCall (see Provider.Stream).
	ChunkToolCall
	// ChunkThinkingBlock is a complete thinking block, emitted when the
	// block ends, after the ChunkThinking pieces of its text: the block
	// with its signature (or a redacted block's opaque data), to be sent
	// back unchanged on a tool-use turn. It adds nothing to what the caller
	// sees.
	ChunkThinkingBlock
)

// Chunk is one piece of an attempt's output.
type Chunk struct {
	// Kind says what the chunk holds.
	Kind ChunkKind
	// Text is the text of ChunkText and ChunkThinking.
	Text string
	// ToolCall is the call of ChunkToolCall.
	ToolCall recovery.ToolCall
	// Block is the recovery.BlockThinking of ChunkThinkingBlock.
	Block recovery.Block
}

// Finish is how an attempt ended.
type Finish struct {
	// StopReason is why the model stopped (meaningful when Stream returns nil).
	StopReason recovery.StopReason
	// Usage is the attempt's tokens, as far as the upstream reported them,
	// also when Stream returns an error.
	Usage recovery.Usage
	// Model is the model the upstream says answered, if it said.
	Model string
	// ID is the upstream's id of its response (Anthropic's message id,
	// OpenAI's chat completion id), if it said; scrubbed and bounded like
	// Model.
	ID string
	// StopSequence is the request's stop sequence that ended the answer,
	// with recovery.StopSequence, when the upstream named it.
	StopSequence string
}

// Provider streams attempts to one upstream.
type Provider interface {
	// Kind names the provider kind: "sim", "anthropic", "openai".
	Kind() string
	// Stream runs one attempt. It calls emit for each chunk, in order, and
	// returns how the attempt ended. Upstream failures are returned as a
	// *recovery.Failure (see AsFailure); an error from emit, or the context's,
	// is returned as it is and the upstream call is stopped at once.
	//
	// Tool calls cut short: a partial tool call is never emitted. When the
	// message ends on a truncating stop reason (max_tokens,
	// model_context_window_exceeded, OpenAI's length; see
	// recovery.StopReason.Truncating), Stream returns a nil error with that
	// stop reason, and the tool calls the limit cut are dropped: the caller
	// sees a truncated answer, not a failure, and its text is kept. A tool
	// call left incomplete by any other end is a FailStreamBroken.
	//
	// Emit and the timeouts: Request.Timeouts.Idle and FirstToken time the
	// upstream's silence, not the caller's: while emit runs (a slow reader
	// downstream), those limits do not run. Total always does.
	Stream(ctx context.Context, req *Request, emit func(Chunk) error) (Finish, error)
}

// Addressed is implemented by a provider that calls an upstream over the
// network: Address is the host and port of the upstream it calls, for the
// server.address and server.port of its traces.
type Addressed interface {
	Address() (host string, port int)
}

// HostPort is the host and port of an http(s) base URL: its explicit port,
// or the scheme's (443, 80). An unparsable URL gives "" and 0.
func HostPort(base string) (host string, port int) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", 0
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return u.Hostname(), p
	}
	switch u.Scheme {
	case "https":
		return u.Hostname(), 443
	case "http":
		return u.Hostname(), 80
	}
	return u.Hostname(), 0
}

// AsFailure returns the *recovery.Failure in err's chain, if there is one.
func AsFailure(err error) (*recovery.Failure, bool) {
	var f *recovery.Failure
	ok := errors.As(err, &f)
	return f, ok
}
