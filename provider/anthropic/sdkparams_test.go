package anthropic

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// This file is the mapping the provider used before it built its own body
// (request.go): requests to the SDK's params, which the SDK encodes. It is
// the oracle of the parity tests (body_test.go): what the SDK would send.

// sdkParams maps a request to the Messages API. held is the number of
// trailing whitespace bytes of the prefill kept off the wire (see the
// package doc).
func sdkParams(req *provider.Request) (params sdk.MessageNewParams, held int, err error) {
	msgs, err := sdkMessages(req.Messages)
	if err != nil {
		return params, 0, err
	}
	output, err := sdkOutputConfig(req)
	if err != nil {
		return params, 0, err
	}
	forced := len(req.OutputSchema) > 0 && req.StructuredOutput == provider.StructuredTool
	choice := req.ToolChoice
	if forced {
		choice = provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "structured_output", DisableParallel: true}
	}
	toolChoice, err := sdkToolChoice(choice)
	if err != nil {
		return params, 0, err
	}
	tools, err := sdkTools(req.Tools, forced)
	if err != nil {
		return params, 0, err
	}
	if forced {
		schema, err := sdkInputSchema(req.OutputSchema)
		if err != nil {
			return params, 0, fmt.Errorf("tool %q: %w", "structured_output", err)
		}
		tools = append(tools, sdk.ToolUnionParam{OfTool: &sdk.ToolParam{Name: "structured_output", InputSchema: schema,
			Description: sdk.String("Records your final answer. Call it exactly once, with the whole answer as its input.")}})
	}
	if req.Prefill != "" {
		sent := strings.TrimRightFunc(req.Prefill, unicode.IsSpace)
		held = len(req.Prefill) - len(sent)
		if sent != "" {
			msgs = append(msgs, sdk.NewAssistantMessage(sdk.NewTextBlock(sent)))
		}
	} else {
		msgs, held = sdkTrimFinalAssistant(msgs)
	}
	params = sdk.MessageNewParams{
		Model:        sdk.Model(req.Model),
		MaxTokens:    int64(req.MaxTokens),
		Messages:     msgs,
		Tools:        tools,
		ToolChoice:   toolChoice,
		OutputConfig: output,
	}
	sdkSampling(&params, req.Sampling)
	if len(req.StopSequences) > 0 { // none, nil or empty, sends none
		params.StopSequences = req.StopSequences
	}
	if req.System != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	if budget := thinkingBudget(req); budget > 0 && !forced { // thinking refuses a forced tool
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(budget))
	}
	sdkSystemMark(&params, req.CacheSystem)
	sdkLimitMarks(&params)
	return params, held, nil
}

// sdkSystemMark marks the end of the system prompt, or, without one, the
// last tool, which ends the same prefix.
func sdkSystemMark(params *sdk.MessageNewParams, mark bool) {
	switch {
	case !mark:
	case len(params.System) > 0:
		params.System[0].CacheControl = sdk.NewCacheControlEphemeralParam()
	case len(params.Tools) > 0:
		params.Tools[len(params.Tools)-1].OfTool.CacheControl = sdk.NewCacheControlEphemeralParam()
	}
}

// sdkLimitMarks leaves out the first cache marks, in the prompt's order
// (tools, system, messages), beyond the API's 4.
func sdkLimitMarks(params *sdk.MessageNewParams) {
	var marks []*sdk.CacheControlEphemeralParam
	add := func(c *sdk.CacheControlEphemeralParam) {
		if c != nil && c.Type != "" {
			marks = append(marks, c)
		}
	}
	for _, t := range params.Tools {
		add(&t.OfTool.CacheControl)
	}
	for i := range params.System {
		add(&params.System[i].CacheControl)
	}
	for _, m := range params.Messages {
		for i := range m.Content {
			add(sdkCacheControl(&m.Content[i]))
		}
	}
	for len(marks) > 4 {
		*marks[0] = sdk.CacheControlEphemeralParam{}
		marks = marks[1:]
	}
}

// sdkCacheControl is the cache control of a block, nil for a thinking
// block, which has none.
func sdkCacheControl(u *sdk.ContentBlockParamUnion) *sdk.CacheControlEphemeralParam {
	switch {
	case u.OfText != nil:
		return &u.OfText.CacheControl
	case u.OfImage != nil:
		return &u.OfImage.CacheControl
	case u.OfDocument != nil:
		return &u.OfDocument.CacheControl
	case u.OfToolUse != nil:
		return &u.OfToolUse.CacheControl
	case u.OfToolResult != nil:
		return &u.OfToolResult.CacheControl
	}
	return nil
}

// sdkMark marks a block, if it can carry a mark.
func sdkMark(u *sdk.ContentBlockParamUnion) {
	if c := sdkCacheControl(u); c != nil {
		*c = sdk.NewCacheControlEphemeralParam()
	}
}

// sdkTrimFinalAssistant holds the trailing whitespace of the caller's own final
// assistant message off the wire, as a prefill's is: the API refuses final
// assistant content that ends in whitespace. Text blocks at the end of the
// message lose their trailing whitespace; one left empty is dropped, and so
// is the message if nothing is left of it, which then ends with the user's
// turn (an answer afresh, as there was nothing to continue). held is the
// number of bytes removed: the continuation loses as much leading
// whitespace, so that the caller's text plus the stream reads as the model
// wrote it.
func sdkTrimFinalAssistant(msgs []sdk.MessageParam) (_ []sdk.MessageParam, held int) {
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != sdk.MessageParamRoleAssistant {
		return msgs, 0
	}
	last := &msgs[len(msgs)-1]
	blocks := slices.Clone(last.Content)
	mark := false // the marks of the blocks of whitespace dropped
	for len(blocks) > 0 {
		text := blocks[len(blocks)-1].OfText
		if text == nil {
			break
		}
		trimmed := strings.TrimRightFunc(text.Text, unicode.IsSpace)
		held += len(text.Text) - len(trimmed)
		if trimmed != "" {
			t := *text
			t.Text = trimmed
			blocks[len(blocks)-1] = sdk.ContentBlockParamUnion{OfText: &t}
			break
		}
		mark = mark || text.CacheControl.Type != ""
		blocks = blocks[:len(blocks)-1]
	}
	if len(blocks) == 0 {
		return msgs[:len(msgs)-1], held
	}
	if mark {
		end := blocks[len(blocks)-1]
		end = sdkCopy(end)
		sdkMark(&end)
		blocks[len(blocks)-1] = end
	}
	last.Content = blocks
	return msgs, held
}

// sdkCopy is u with its variant copied, so that a change to it is its own.
func sdkCopy(u sdk.ContentBlockParamUnion) sdk.ContentBlockParamUnion {
	switch {
	case u.OfText != nil:
		v := *u.OfText
		return sdk.ContentBlockParamUnion{OfText: &v}
	case u.OfImage != nil:
		v := *u.OfImage
		return sdk.ContentBlockParamUnion{OfImage: &v}
	case u.OfDocument != nil:
		v := *u.OfDocument
		return sdk.ContentBlockParamUnion{OfDocument: &v}
	case u.OfToolUse != nil:
		v := *u.OfToolUse
		return sdk.ContentBlockParamUnion{OfToolUse: &v}
	case u.OfToolResult != nil:
		v := *u.OfToolResult
		return sdk.ContentBlockParamUnion{OfToolResult: &v}
	}
	return u
}

// sdkMessages maps the conversation. Empty text blocks and messages left empty
// are dropped: the API refuses them.
func sdkMessages(in []recovery.Message) ([]sdk.MessageParam, error) {
	out := make([]sdk.MessageParam, 0, len(in)+1)
	for i, m := range in {
		blocks := make([]sdk.ContentBlockParamUnion, 0, len(m.Blocks))
		for j, b := range m.Blocks {
			block, ok, err := sdkContentBlock(b)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].blocks[%d]: %w", i, j, err)
			}
			if !ok {
				continue
			}
			if b.CacheBreakpoint {
				sdkMark(&block)
			}
			blocks = append(blocks, block)
		}
		if len(blocks) == 0 {
			continue
		}
		role := sdk.MessageParamRoleUser
		if m.Role == recovery.RoleAssistant {
			role = sdk.MessageParamRoleAssistant
		}
		out = append(out, sdk.MessageParam{Role: role, Content: blocks})
	}
	return out, nil
}

// sdkContentBlock maps one block; ok is false for a block that says nothing.
func sdkContentBlock(b recovery.Block) (block sdk.ContentBlockParamUnion, ok bool, err error) {
	switch b.Kind {
	case recovery.BlockText:
		if b.Text == "" {
			return block, false, nil
		}
		return sdk.NewTextBlock(b.Text), true, nil
	case recovery.BlockImage:
		if b.URL != "" {
			return sdk.NewImageBlock(sdk.URLImageSourceParam{URL: b.URL}), true, nil
		}
		return sdk.NewImageBlockBase64(b.MediaType, base64.StdEncoding.EncodeToString(b.Data)), true, nil
	case recovery.BlockDocument:
		return sdkDocument(b), true, nil
	case recovery.BlockToolUse:
		input, err := sdkToolInput(b.ToolInput)
		if err != nil {
			return block, false, err
		}
		return sdk.NewToolUseBlock(b.ToolUseID, input, b.ToolName), true, nil
	case recovery.BlockToolResult:
		result := sdk.ToolResultBlockParam{ToolUseID: b.ToolUseID, IsError: sdk.Bool(b.IsError)}
		if b.Text != "" {
			result.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: b.Text}}}
		}
		return sdk.ContentBlockParamUnion{OfToolResult: &result}, true, nil
	case recovery.BlockThinking:
		if b.Redacted {
			return sdk.NewRedactedThinkingBlock(string(b.Data)), true, nil
		}
		return sdk.NewThinkingBlock(b.Signature, b.Text), true, nil
	}
	return block, false, fmt.Errorf("unknown block kind %d", b.Kind)
}

// sdkDocument maps a PDF document, by URL or as base64 data.
func sdkDocument(b recovery.Block) sdk.ContentBlockParamUnion {
	doc := sdk.NewDocumentBlock(sdk.Base64PDFSourceParam{Data: base64.StdEncoding.EncodeToString(b.Data)})
	if b.URL != "" {
		doc = sdk.NewDocumentBlock(sdk.URLPDFSourceParam{URL: b.URL})
	}
	if b.Title != "" {
		doc.OfDocument.Title = sdk.String(b.Title)
	}
	return doc
}

// sdkToolInput is a tool call's arguments as JSON ({} when there are none).
func sdkToolInput(raw []byte) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("tool input is not valid JSON")
	}
	return json.RawMessage(raw), nil
}

// sdkOutputConfig is the output schema as the API's JSON output format, on
// a StructuredNative request.
func sdkOutputConfig(req *provider.Request) (sdk.OutputConfigParam, error) {
	var out sdk.OutputConfigParam
	if len(req.OutputSchema) == 0 {
		return out, nil
	}
	switch req.StructuredOutput {
	case provider.StructuredTool, provider.StructuredHook:
		return out, nil
	case provider.StructuredNative:
	default:
		return out, fmt.Errorf("unknown structured output mode %d", req.StructuredOutput)
	}
	var schema map[string]any
	if err := json.Unmarshal(req.OutputSchema, &schema); err != nil || schema == nil {
		return out, fmt.Errorf("output schema is not a JSON object")
	}
	out.Format = sdk.JSONOutputFormatParam{Schema: schema}
	return out, nil
}

// sdkTools maps the tool declarations. The schema's properties and required
// go to their fields, the rest of it ($defs, additionalProperties, …) as is.
// forced: the structured tool is declared after them, and no tool of the
// caller's may take its name.
func sdkTools(in []provider.Tool, forced bool) ([]sdk.ToolUnionParam, error) {
	var out []sdk.ToolUnionParam // nil, not empty: no tools sends no "tools"
	for _, t := range in {
		if forced && t.Name == "structured_output" {
			return nil, fmt.Errorf("tool %q: the name is the structured output tool's", t.Name)
		}
		schema, err := sdkInputSchema(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		tool := sdk.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = sdk.String(t.Description)
		}
		if t.CacheBreakpoint {
			tool.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		out = append(out, sdk.ToolUnionParam{OfTool: &tool})
	}
	return out, nil
}

// sdkInputSchema splits a JSON Schema object into the SDK's fields.
func sdkInputSchema(raw []byte) (sdk.ToolInputSchemaParam, error) {
	var schema sdk.ToolInputSchemaParam
	if len(raw) == 0 {
		return schema, nil
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return schema, fmt.Errorf("input schema is not a JSON object")
	}
	schema.Properties = fields["properties"]
	if req, ok := fields["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				schema.Required = append(schema.Required, s)
			}
		}
	}
	for _, k := range []string{"type", "properties", "required"} {
		delete(fields, k)
	}
	if len(fields) > 0 {
		schema.ExtraFields = fields
	}
	return schema, nil
}

// sdkSampling sets the sampling parameters that are set: a nil pointer or a
// zero TopK is the upstream's default. The API has no seed.
func sdkSampling(params *sdk.MessageNewParams, s provider.Sampling) {
	if s.Temperature != nil {
		params.Temperature = sdk.Float(*s.Temperature)
	}
	if s.TopP != nil {
		params.TopP = sdk.Float(*s.TopP)
	}
	if s.TopK != 0 {
		params.TopK = sdk.Int(int64(s.TopK))
	}
}

// sdkToolChoice maps the tool choice: none for ToolChoiceDefault, unless
// DisableParallel, which goes with auto; "none" has no
// disable_parallel_tool_use.
func sdkToolChoice(c provider.ToolChoice) (sdk.ToolChoiceUnionParam, error) {
	var u sdk.ToolChoiceUnionParam
	var parallel param.Opt[bool]
	if c.DisableParallel {
		parallel = sdk.Bool(true)
	}
	switch c.Mode {
	case provider.ToolChoiceDefault:
		if c.DisableParallel {
			u.OfAuto = &sdk.ToolChoiceAutoParam{DisableParallelToolUse: parallel}
		}
	case provider.ToolChoiceAuto:
		u.OfAuto = &sdk.ToolChoiceAutoParam{DisableParallelToolUse: parallel}
	case provider.ToolChoiceAny:
		u.OfAny = &sdk.ToolChoiceAnyParam{DisableParallelToolUse: parallel}
	case provider.ToolChoiceNone:
		u.OfNone = &sdk.ToolChoiceNoneParam{}
	case provider.ToolChoiceTool:
		u.OfTool = &sdk.ToolChoiceToolParam{Name: c.Name, DisableParallelToolUse: parallel}
	default:
		return u, fmt.Errorf("unknown tool choice mode %d", c.Mode)
	}
	return u, nil
}
