package convert

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// ToMessages is the machine's conversation for the request's messages.
func ToMessages(in []*completionv1.Message) []recovery.Message {
	out := make([]recovery.Message, 0, len(in))
	for _, m := range in {
		msg := recovery.Message{Role: toRole(m.GetRole())}
		for _, b := range m.GetContent() {
			msg.Blocks = append(msg.Blocks, toBlock(b))
		}
		out = append(out, msg)
	}
	return out
}

func toRole(r completionv1.Role) recovery.Role {
	if r == completionv1.Role_ROLE_ASSISTANT {
		return recovery.RoleAssistant
	}
	return recovery.RoleUser
}

// toBlock is the machine's block for one of the request's, with the
// caller's cache mark.
func toBlock(b *completionv1.ContentBlock) recovery.Block {
	out := recovery.TextBlock(b.GetText().GetText())
	switch blk := b.GetBlock().(type) {
	case *completionv1.ContentBlock_Image:
		out = recovery.Block{Kind: recovery.BlockImage, MediaType: blk.Image.GetMediaType(), Data: blk.Image.GetData(),
			URL: blk.Image.GetUrl()}
	case *completionv1.ContentBlock_Document:
		d := blk.Document
		out = recovery.Block{Kind: recovery.BlockDocument, MediaType: d.GetMediaType(), Data: d.GetData(),
			URL: d.GetUrl(), Title: d.GetTitle()}
	case *completionv1.ContentBlock_ToolUse:
		out = recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: blk.ToolUse.GetId(),
			ToolName: blk.ToolUse.GetName(), ToolInput: structJSON(blk.ToolUse.GetInput())}
	case *completionv1.ContentBlock_ToolResult:
		out = ToToolResult(blk.ToolResult)
	case *completionv1.ContentBlock_Thinking:
		th := blk.Thinking
		out = recovery.Block{Kind: recovery.BlockThinking, Text: th.GetThinking(), Signature: th.GetSignature(),
			Data: th.GetRedactedData(), Redacted: len(th.GetRedactedData()) > 0, Model: th.GetModel()}
	}
	out.CacheBreakpoint = b.GetCacheBreakpoint()
	return out
}

// ToToolResult is the machine's block for a tool result a Session's caller sent.
func ToToolResult(r *completionv1.ToolResultBlock) recovery.Block {
	return recovery.Block{Kind: recovery.BlockToolResult, ToolUseID: r.GetToolUseId(), Text: r.GetText(),
		IsError: r.GetIsError(), Halt: r.GetHalt()}
}

// ToTools is the provider's tool list for the request's tools.
func ToTools(in []*completionv1.Tool) []provider.Tool {
	out := make([]provider.Tool, 0, len(in))
	for _, t := range in {
		out = append(out, provider.Tool{Name: t.GetName(), Description: t.GetDescription(), InputSchema: structJSON(t.GetInputSchema()),
			CacheBreakpoint: t.GetCacheBreakpoint()})
	}
	return out
}

// ToSampling is the provider's sampling parameters for the request's.
func ToSampling(req *completionv1.CompleteRequest) provider.Sampling {
	return provider.Sampling{Temperature: req.Temperature, TopP: req.TopP, TopK: int(req.GetTopK()), Seed: req.Seed}
}

// toolChoiceModes are the provider's tool choice modes by the wire's, by
// name: TOOL_CHOICE_MODE_UNSPECIFIED sends none.
var toolChoiceModes = map[completionv1.ToolChoiceMode]provider.ToolChoiceMode{
	completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO: provider.ToolChoiceAuto,
	completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY:  provider.ToolChoiceAny,
	completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE: provider.ToolChoiceNone,
	completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL: provider.ToolChoiceTool,
}

// ToToolChoice is the provider's tool choice for the request's.
func ToToolChoice(tc *completionv1.ToolChoice) provider.ToolChoice {
	return provider.ToolChoice{Mode: toolChoiceModes[tc.GetMode()], Name: tc.GetName(), DisableParallel: tc.GetDisableParallelToolUse()}
}

// structJSON encodes s as JSON; a nil struct is the empty object.
func structJSON(s *structpb.Struct) []byte {
	if s == nil {
		return []byte("{}")
	}
	b, err := s.MarshalJSON()
	if err != nil {
		return []byte("{}")
	}
	return b
}

// jsonStruct decodes a tool call's JSON arguments; arguments that are not a
// JSON object (a model's malformed output) are wrapped as {"_raw": "..."}.
func jsonStruct(raw []byte) *structpb.Struct {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err == nil {
		if s, err := structpb.NewStruct(m); err == nil {
			return s
		}
	}
	s, _ := structpb.NewStruct(map[string]any{"_raw": string(raw)})
	return s
}

// FromToolCall is the wire's tool call for one the machine delivers.
func FromToolCall(c recovery.ToolCall) *completionv1.ToolCall {
	return &completionv1.ToolCall{Id: c.ID, Name: c.Name, Input: jsonStruct(c.Input)}
}

// FromUsage is the wire's token usage for the machine's.
func FromUsage(u recovery.Usage) *completionv1.Usage {
	return &completionv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens}
}

// verdicts are the machine's verdicts by the wire's, by name: no enum is
// converted by its number.
var verdicts = map[completionv1.Verdict]recovery.Verdict{
	completionv1.Verdict_VERDICT_ALLOW:   recovery.VerdictAllow,
	completionv1.Verdict_VERDICT_BLOCK:   recovery.VerdictBlock,
	completionv1.Verdict_VERDICT_PREVENT: recovery.VerdictPrevent,
}

// ToVerdict is the machine's verdict for v; 0 (no verdict) for
// VERDICT_UNSPECIFIED and for a number the API does not define, which the
// Session refuses.
func ToVerdict(v completionv1.Verdict) recovery.Verdict { return verdicts[v] }

// FromReason is the wire's transition reason for the machine's, by name;
// TRANSITION_REASON_UNSPECIFIED for a reason the API does not define.
func FromReason(r recovery.Reason) completionv1.TransitionReason {
	v, ok := completionv1.TransitionReason_value["TRANSITION_REASON_"+r.String()]
	if !ok {
		return completionv1.TransitionReason_TRANSITION_REASON_UNSPECIFIED
	}
	return completionv1.TransitionReason(v)
}

var errorKinds = map[recovery.FailureKind]completionv1.ErrorKind{
	recovery.FailUnknown:         completionv1.ErrorKind_ERROR_KIND_UNSPECIFIED,
	recovery.FailConnection:      completionv1.ErrorKind_ERROR_KIND_CONNECTION,
	recovery.FailTimeout:         completionv1.ErrorKind_ERROR_KIND_TIMEOUT,
	recovery.FailRateLimit:       completionv1.ErrorKind_ERROR_KIND_RATE_LIMIT,
	recovery.FailOverloaded:      completionv1.ErrorKind_ERROR_KIND_OVERLOADED,
	recovery.FailServer:          completionv1.ErrorKind_ERROR_KIND_SERVER,
	recovery.FailStreamBroken:    completionv1.ErrorKind_ERROR_KIND_STREAM_BROKEN,
	recovery.FailInvalidRequest:  completionv1.ErrorKind_ERROR_KIND_INVALID_REQUEST,
	recovery.FailAuth:            completionv1.ErrorKind_ERROR_KIND_AUTH,
	recovery.FailNotFound:        completionv1.ErrorKind_ERROR_KIND_NOT_FOUND,
	recovery.FailQuota:           completionv1.ErrorKind_ERROR_KIND_QUOTA,
	recovery.FailContentFilter:   completionv1.ErrorKind_ERROR_KIND_CONTENT_FILTER,
	recovery.FailPromptTooLong:   completionv1.ErrorKind_ERROR_KIND_PROMPT_TOO_LONG,
	recovery.FailContextLimit:    completionv1.ErrorKind_ERROR_KIND_CONTEXT_LIMIT,
	recovery.FailMedia:           completionv1.ErrorKind_ERROR_KIND_MEDIA,
	recovery.FailPrefillRejected: completionv1.ErrorKind_ERROR_KIND_PREFILL_REJECTED,
	recovery.FailCircuitOpen:     completionv1.ErrorKind_ERROR_KIND_CIRCUIT_OPEN,
	recovery.FailReplicaLost:     completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST,
}

func fromFailure(f *recovery.Failure) *completionv1.UpstreamError {
	if f == nil {
		return nil
	}
	e := &completionv1.UpstreamError{Kind: errorKinds[f.Kind], Provider: f.Provider, HttpStatus: int32(f.HTTPStatus),
		Type: f.Type, Code: f.Code, Message: f.Message, RequestId: f.RequestID}
	if f.RetryAfter > 0 {
		e.RetryAfter = durationpb.New(f.RetryAfter)
	}
	return e
}

// MaxStrippedBlocks is how many stripped media blocks a wire transition
// names (Transition.stripped_blocks): the transition goes into the status
// and the event log, which stay small; its message still counts them all.
const MaxStrippedBlocks = 16

// FromTransition is the wire's transition for one the machine published.
func FromTransition(t recovery.Transition) *completionv1.Transition {
	pt := &completionv1.Transition{
		Reason: FromReason(t.Reason), Terminal: t.Terminal, DiscardOutput: t.DiscardOutput,
		FromRoute: t.From.Name, FromModel: t.From.Model, ToRoute: t.To.Name, ToModel: t.To.Model,
		MaxTokens: int32(t.MaxTokens), Error: fromFailure(t.Failure), Message: t.Message, Retry: int32(t.Retry),
	}
	if t.Backoff > 0 {
		pt.Backoff = durationpb.New(t.Backoff)
	}
	for _, a := range t.DiscardAttempts {
		pt.DiscardedAttempts = append(pt.DiscardedAttempts, int32(a))
	}
	for _, r := range t.Stripped[:min(len(t.Stripped), MaxStrippedBlocks)] {
		pt.StrippedBlocks = append(pt.StrippedBlocks, r.String())
	}
	return pt
}

var stopReasons = map[recovery.StopReason]completionv1.StopReason{
	recovery.StopNone:          completionv1.StopReason_STOP_REASON_UNSPECIFIED,
	recovery.StopEndTurn:       completionv1.StopReason_STOP_REASON_END_TURN,
	recovery.StopMaxTokens:     completionv1.StopReason_STOP_REASON_MAX_TOKENS,
	recovery.StopContextWindow: completionv1.StopReason_STOP_REASON_MAX_TOKENS,
	recovery.StopSequence:      completionv1.StopReason_STOP_REASON_STOP_SEQUENCE,
	recovery.StopToolUse:       completionv1.StopReason_STOP_REASON_TOOL_USE,
	recovery.StopRefusal:       completionv1.StopReason_STOP_REASON_REFUSAL,
	recovery.StopContentFilter: completionv1.StopReason_STOP_REASON_CONTENT_FILTER,
	recovery.StopPauseTurn:     completionv1.StopReason_STOP_REASON_PAUSE_TURN,
}

var outcomes = map[recovery.Outcome]completionv1.AttemptOutcome{
	recovery.OutcomeAnswered:  completionv1.AttemptOutcome_ATTEMPT_OUTCOME_ANSWERED,
	recovery.OutcomeDiscarded: completionv1.AttemptOutcome_ATTEMPT_OUTCOME_DISCARDED,
	recovery.OutcomeFailed:    completionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED,
}

// FromResult is the wire's result for the machine's: the answer, its
// transcript and the usage of every attempt. The driver fills in the
// models the upstreams named.
func FromResult(r *recovery.Result) *completionv1.Result {
	msg := &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT}
	for _, b := range r.Thinking {
		msg.Content = append(msg.Content, fromThinking(b))
	}
	if r.Text != "" {
		msg.Content = append(msg.Content, TextBlock(r.Text))
	}
	for _, c := range r.ToolCalls {
		msg.Content = append(msg.Content, &completionv1.ContentBlock{Block: &completionv1.ContentBlock_ToolUse{
			ToolUse: &completionv1.ToolUseBlock{Id: c.ID, Name: c.Name, Input: jsonStruct(c.Input)}}})
	}
	out := &completionv1.Result{
		Reason: FromReason(r.Reason), Message: msg, StopReason: stopReasons[r.StopReason], StopSequence: r.StopSequence, Truncated: r.Truncated,
		Route: r.Route.Name, Model: r.Route.Model, Usage: FromUsage(r.Usage), Error: fromFailure(r.Failure),
	}
	for _, m := range r.Transcript {
		out.Transcript = append(out.Transcript, FromMessage(m))
	}
	for _, a := range r.Attempts {
		out.Attempts = append(out.Attempts, &completionv1.AttemptUsage{Attempt: int32(a.Attempt), Route: a.Route.Name,
			Model: a.Route.Model, Outcome: outcomes[a.Outcome], Usage: FromUsage(a.Usage)})
	}
	return out
}

// fromThinking is the wire's block for a thinking block, with the model
// that signed it.
func fromThinking(b recovery.Block) *completionv1.ContentBlock {
	th := &completionv1.ThinkingBlock{Signature: b.Signature, Model: b.Model}
	if b.Redacted {
		th.RedactedData = b.Data
	} else {
		th.Thinking = b.Text
	}
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Thinking{Thinking: th}}
}

// TextBlock is a content block of text s.
func TextBlock(s string) *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: s}}}
}

// FromMessage is the wire's message for one of the machine's conversation,
// the cache marks and the thinking blocks (with the model that signed
// each) included.
func FromMessage(m recovery.Message) *completionv1.Message {
	out := &completionv1.Message{Role: completionv1.Role_ROLE_USER}
	if m.Role == recovery.RoleAssistant {
		out.Role = completionv1.Role_ROLE_ASSISTANT
	}
	for _, b := range m.Blocks {
		var c *completionv1.ContentBlock
		switch b.Kind {
		case recovery.BlockText:
			c = TextBlock(b.Text)
		case recovery.BlockToolUse:
			c = &completionv1.ContentBlock{Block: &completionv1.ContentBlock_ToolUse{
				ToolUse: &completionv1.ToolUseBlock{Id: b.ToolUseID, Name: b.ToolName, Input: jsonStruct(b.ToolInput)}}}
		case recovery.BlockToolResult:
			c = &completionv1.ContentBlock{Block: &completionv1.ContentBlock_ToolResult{
				ToolResult: &completionv1.ToolResultBlock{ToolUseId: b.ToolUseID, Text: b.Text, IsError: b.IsError, Halt: b.Halt}}}
		case recovery.BlockImage:
			c = &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
				Image: &completionv1.ImageBlock{MediaType: b.MediaType, Data: b.Data, Url: b.URL}}}
		case recovery.BlockDocument:
			c = &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{
				Document: &completionv1.DocumentBlock{MediaType: b.MediaType, Data: b.Data, Url: b.URL, Title: b.Title}}}
		case recovery.BlockThinking:
			c = fromThinking(b)
		default:
			continue
		}
		c.CacheBreakpoint = b.CacheBreakpoint
		out.Content = append(out.Content, c)
	}
	return out
}
