package openai

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// This file is the mapping the provider used before it built its own body
// (body.go): requests to the SDK's params, which the SDK encodes. It is the
// oracle of the parity tests (body_test.go): what the SDK would send.

// sdkParams maps a request to the SDK's Chat Completions params.
func (p *Provider) sdkParams(req *provider.Request) (*sdk.ChatCompletionNewParams, error) {
	msgs := make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+2)
	if req.System != "" {
		msgs = append(msgs, sdk.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		mapped, err := sdkMessage(m)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs = append(msgs, mapped...)
	}
	if req.Prefill != "" {
		msgs = append(msgs, sdk.AssistantMessage(req.Prefill))
	}
	if err := req.Sampling.Finite(); err != nil {
		return nil, err
	}
	format, err := sdkResponseFormat(req)
	if err != nil {
		return nil, err
	}
	choice, err := sdkToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	tools, err := sdkTools(req.Tools)
	if err != nil {
		return nil, err
	}
	params := &sdk.ChatCompletionNewParams{
		Model:           shared.ChatModel(req.Model),
		Messages:        msgs,
		Tools:           tools,
		ToolChoice:      choice,
		StreamOptions:   sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
		ReasoningEffort: shared.ReasoningEffort(req.Reasoning.Effort),
		ResponseFormat:  format,
	}
	sdkSampling(params, req)
	if req.MaxTokens > 0 {
		if p.legacyMax {
			params.MaxTokens = sdk.Int(int64(req.MaxTokens))
		} else {
			params.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
		}
	}
	return params, nil
}

// sdkSampling sets the sampling parameters, the stop sequences (always as
// a list) and parallel_tool_calls false when parallel calls are disabled.
func sdkSampling(params *sdk.ChatCompletionNewParams, req *provider.Request) {
	s := req.Sampling
	if s.Temperature != nil {
		params.Temperature = sdk.Float(*s.Temperature)
	}
	if s.TopP != nil {
		params.TopP = sdk.Float(*s.TopP)
	}
	if s.Seed != nil {
		params.Seed = sdk.Int(*s.Seed)
	}
	if len(req.StopSequences) > 0 {
		params.Stop = sdk.ChatCompletionNewParamsStopUnion{OfStringArray: req.StopSequences}
	}
	if req.ToolChoice.DisableParallel {
		params.ParallelToolCalls = sdk.Bool(false)
	}
}

// sdkResponseFormat maps the output schema of StructuredNative to a
// json_schema response format; the zero union sends nothing.
func sdkResponseFormat(req *provider.Request) (sdk.ChatCompletionNewParamsResponseFormatUnion, error) {
	var u sdk.ChatCompletionNewParamsResponseFormatUnion
	if len(req.OutputSchema) == 0 || req.StructuredOutput != provider.StructuredNative {
		return u, nil
	}
	var schema map[string]any
	if err := json.Unmarshal(req.OutputSchema, &schema); err != nil || schema == nil {
		return u, errors.New("output schema is not a JSON object")
	}
	u.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
		Name:   "output",
		Strict: sdk.Bool(strictSchema(req.OutputSchema)),
		Schema: schema,
	}}
	return u, nil
}

// sdkToolChoice maps the tool choice; the zero union sends nothing.
func sdkToolChoice(tc provider.ToolChoice) (sdk.ChatCompletionToolChoiceOptionUnionParam, error) {
	var u sdk.ChatCompletionToolChoiceOptionUnionParam
	switch tc.Mode {
	case provider.ToolChoiceDefault:
	case provider.ToolChoiceAuto:
		u.OfAuto = sdk.String(string(sdk.ChatCompletionToolChoiceOptionAutoAuto))
	case provider.ToolChoiceAny:
		u.OfAuto = sdk.String(string(sdk.ChatCompletionToolChoiceOptionAutoRequired))
	case provider.ToolChoiceNone:
		u.OfAuto = sdk.String(string(sdk.ChatCompletionToolChoiceOptionAutoNone))
	case provider.ToolChoiceTool:
		u = sdk.ToolChoiceOptionFunctionToolChoice(sdk.ChatCompletionNamedToolChoiceFunctionParam{Name: tc.Name})
	default:
		return u, errToolChoice(tc.Mode)
	}
	return u, nil
}

// sdkMessage maps one message, which may become several: each tool result is
// a message of role tool, and must follow the assistant's tool calls at once,
// so a user message's results come before the rest of its content.
func sdkMessage(m recovery.Message) ([]sdk.ChatCompletionMessageParamUnion, error) {
	if m.Role == recovery.RoleAssistant {
		a, err := sdkAssistant(m.Blocks)
		if err != nil || a == nil {
			return nil, err
		}
		return []sdk.ChatCompletionMessageParamUnion{{OfAssistant: a}}, nil
	}
	var out []sdk.ChatCompletionMessageParamUnion
	var parts []sdk.ChatCompletionContentPartUnionParam
	for _, b := range m.Blocks {
		switch b.Kind {
		case recovery.BlockToolResult:
			out = append(out, sdk.ToolMessage(b.Text, b.ToolUseID))
		case recovery.BlockText:
			if b.Text != "" {
				parts = append(parts, sdk.TextContentPart(b.Text))
			}
		case recovery.BlockImage:
			parts = append(parts, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: sdkImageURL(b)}))
		case recovery.BlockDocument:
			return nil, errDocument
		default:
			return nil, fmt.Errorf("a user message cannot hold block kind %d", b.Kind)
		}
	}
	switch {
	case len(parts) == 1 && parts[0].OfText != nil:
		// A plain string, which every compatible server understands.
		out = append(out, sdk.UserMessage(parts[0].OfText.Text))
	case len(parts) > 0:
		out = append(out, sdk.UserMessage(parts))
	}
	return out, nil
}

// sdkAssistant maps an assistant message: its text joined, its tool calls. It
// is nil for a message that says nothing. Thinking blocks (an Anthropic
// route's, before a fallback) are left out: Chat Completions has no place
// for them.
func sdkAssistant(blocks []recovery.Block) (*sdk.ChatCompletionAssistantMessageParam, error) {
	var text strings.Builder
	var calls []sdk.ChatCompletionMessageToolCallUnionParam
	for _, b := range blocks {
		switch b.Kind {
		case recovery.BlockThinking:
		case recovery.BlockText:
			text.WriteString(b.Text)
		case recovery.BlockDocument:
			return nil, errDocument
		case recovery.BlockToolUse:
			args := string(b.ToolInput)
			if args == "" {
				args = "{}"
			}
			calls = append(calls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID:       b.ToolUseID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.ToolName, Arguments: args},
				},
			})
		default:
			return nil, fmt.Errorf("an assistant message cannot hold block kind %d", b.Kind)
		}
	}
	if text.Len() == 0 && len(calls) == 0 {
		return nil, nil
	}
	a := &sdk.ChatCompletionAssistantMessageParam{ToolCalls: calls}
	if text.Len() > 0 {
		a.Content.OfString = sdk.String(text.String())
	}
	return a, nil
}

// sdkImageURL is an image's URL, or its data inlined.
func sdkImageURL(b recovery.Block) string {
	if b.URL != "" {
		return b.URL
	}
	return "data:" + b.MediaType + ";base64," + base64.StdEncoding.EncodeToString(b.Data)
}

// sdkTools maps the tool declarations to functions.
func sdkTools(in []provider.Tool) ([]sdk.ChatCompletionToolUnionParam, error) {
	var out []sdk.ChatCompletionToolUnionParam // nil, not empty: OpenAI refuses "tools": []
	for _, t := range in {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		if len(t.InputSchema) > 0 {
			var schema shared.FunctionParameters
			if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema == nil {
				return nil, fmt.Errorf("tool %q: input schema is not a JSON object", t.Name)
			}
			fn.Parameters = schema
		}
		out = append(out, sdk.ChatCompletionFunctionTool(fn))
	}
	return out, nil
}
