package openai

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/jsonenc"
	"github.com/completiond/completiond/recovery"
)

// body maps a request to the JSON body of a Chat Completions call, encoded
// here by appending, not by the SDK: the SDK's encoder reflects over its
// params a frame per level, and took the sending goroutine's stack to
// 32 KiB (see Provider.send). The body is what the SDK would encode from
// the params the provider used to build (the parity tests, body_test.go,
// hold it to that: JSON-equal, and byte for byte at the top level but for
// the messages' and tools' inner key order) with "stream": true, which the
// SDK's streaming call would set, and without the prefill fields, which
// Provider.prefillOpts set.
func (p *Provider) body(req *provider.Request) ([]byte, error) {
	b := make([]byte, 0, sizeHint(req))
	b = append(b, `{"messages":[`...)
	if req.System != "" {
		b = appendText(b, "system", req.System)
	}
	for i, m := range req.Messages {
		var err error
		if b, err = appendMessage(b, m); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	if req.Prefill != "" {
		b = appendText(b, "assistant", req.Prefill)
	}
	b, err := p.appendParams(append(b, ']'), req)
	if err != nil {
		return nil, err
	}
	return append(b, `,"stream":true}`...), nil
}

// appendParams appends the fields after the messages, in the order of the
// SDK's params struct, which its encoder keeps: the body's top-level keys
// come in the order the SDK's do ("stream" last, where the SDK's streaming
// call sets it), and each field's value is the SDK's byte for byte
// (checkTopLevel, in the parity tests).
func (p *Provider) appendParams(b []byte, req *provider.Request) ([]byte, error) {
	if req.Model != "" { // the SDK omits an empty model
		b = jsonenc.AppendString(append(b, `,"model":`...), req.Model)
	}
	b, err := appendSampling(p.appendMaxTokens(b, req.MaxTokens), req.Sampling)
	if err != nil {
		return nil, err
	}
	if req.ToolChoice.DisableParallel {
		b = append(b, `,"parallel_tool_calls":false`...)
	}
	b = appendEffort(b, req.Reasoning.Effort)
	b = appendStop(b, req.StopSequences)
	b = append(b, `,"stream_options":{"include_usage":true}`...)
	if b, err = appendResponseFormat(b, req); err != nil {
		return nil, err
	}
	if b, err = appendToolChoice(b, req.ToolChoice); err != nil {
		return nil, err
	}
	return appendTools(b, req.Tools)
}

// appendMaxTokens sets the output limit, in the field the server knows.
func (p *Provider) appendMaxTokens(b []byte, n int) []byte {
	if n <= 0 {
		return b
	}
	if p.legacyMax {
		b = append(b, `,"max_tokens":`...)
	} else {
		b = append(b, `,"max_completion_tokens":`...)
	}
	return strconv.AppendInt(b, int64(n), 10)
}

// sizeHint is about the body's length, so that it is allocated once: the
// texts, the images in base64 or their URLs and the schemas, and some room
// for the rest (the sampling, effort, response format and tool choice
// fields included).
func sizeHint(req *provider.Request) int {
	n := 384 + len(req.System) + len(req.Prefill) + len(req.Model) + len(req.ToolChoice.Name) +
		len(req.Reasoning.Effort) + len(req.OutputSchema)
	for _, m := range req.Messages {
		for _, b := range m.Blocks {
			n += 64 + len(b.Text) + len(b.MediaType) + base64.StdEncoding.EncodedLen(len(b.Data)) + len(b.URL) +
				len(b.ToolUseID) + len(b.ToolName) + len(b.ToolInput)
		}
	}
	for _, t := range req.Tools {
		n += 64 + len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, s := range req.StopSequences {
		n += 8 + len(s)
	}
	return n
}

// comma separates a value from the one before it in an array or object.
func comma(b []byte) []byte {
	if c := b[len(b)-1]; c != '[' && c != '{' {
		b = append(b, ',')
	}
	return b
}

// appendText appends a message whose content is a plain string, which
// every compatible server understands.
func appendText(b []byte, role, text string) []byte {
	b = append(comma(b), `{"role":"`...)
	b = append(b, role...)
	b = append(b, `","content":`...)
	return append(jsonenc.AppendString(b, text), '}')
}

// appendMessage appends one message, which may become several: each tool
// result is a message of role tool, and must follow the assistant's tool
// calls at once, so a user message's results come before the rest of its
// content.
func appendMessage(b []byte, m recovery.Message) ([]byte, error) {
	if m.Role == recovery.RoleAssistant {
		return appendAssistant(b, m.Blocks)
	}
	parts := 0
	for _, blk := range m.Blocks {
		switch blk.Kind {
		case recovery.BlockToolResult:
			b = append(comma(b), `{"role":"tool","tool_call_id":`...)
			b = append(jsonenc.AppendString(b, blk.ToolUseID), `,"content":`...)
			b = append(jsonenc.AppendString(b, blk.Text), '}')
		case recovery.BlockText:
			if blk.Text != "" {
				parts++
			}
		case recovery.BlockImage:
			parts++
		case recovery.BlockDocument:
			return nil, errDocument
		default:
			return nil, fmt.Errorf("a user message cannot hold block kind %d", blk.Kind)
		}
	}
	if parts == 0 {
		return b, nil
	}
	if parts == 1 {
		for _, blk := range m.Blocks {
			if blk.Kind == recovery.BlockText && blk.Text != "" {
				return appendText(b, "user", blk.Text), nil
			}
		}
	}
	return appendParts(b, m.Blocks), nil
}

// errDocument is why a request holding a document is refused: Chat
// Completions has no document part that every compatible server takes, and
// the request validation keeps documents off openai routes.
var errDocument = errors.New("a document block cannot be sent on the Chat Completions wire")

// appendParts appends a user message whose content is an array of parts:
// its texts and its images.
func appendParts(b []byte, blocks []recovery.Block) []byte {
	b = append(comma(b), `{"role":"user","content":[`...)
	for _, blk := range blocks {
		switch {
		case blk.Kind == recovery.BlockText && blk.Text != "":
			b = append(comma(b), `{"type":"text","text":`...)
			b = append(jsonenc.AppendString(b, blk.Text), '}')
		case blk.Kind == recovery.BlockImage:
			b = appendImage(comma(b), blk)
		}
	}
	return append(b, "]}"...)
}

// appendImage appends an image part: its URL, which the server fetches,
// or its data inlined as a data URL.
func appendImage(b []byte, blk recovery.Block) []byte {
	b = append(b, `{"type":"image_url","image_url":{"url":`...)
	if blk.URL != "" {
		return append(jsonenc.AppendString(b, blk.URL), "}}"...)
	}
	b = append(b, `"data:`...)
	b = jsonenc.AppendEscaped(b, blk.MediaType)
	b = append(b, ";base64,"...)
	b = base64.StdEncoding.AppendEncode(b, blk.Data)
	return append(b, `"}}`...)
}

// appendAssistant appends an assistant message: its text joined, its tool
// calls; nothing for a message that says nothing. Thinking blocks (an
// Anthropic route's, before a fallback) are left out: Chat Completions has
// no place for them.
func appendAssistant(b []byte, blocks []recovery.Block) ([]byte, error) {
	texts, calls := 0, 0
	for _, blk := range blocks {
		switch blk.Kind {
		case recovery.BlockThinking:
		case recovery.BlockText:
			if blk.Text != "" {
				texts++
			}
		case recovery.BlockToolUse:
			calls++
		case recovery.BlockDocument:
			return nil, errDocument
		default:
			return nil, fmt.Errorf("an assistant message cannot hold block kind %d", blk.Kind)
		}
	}
	if texts == 0 && calls == 0 {
		return b, nil
	}
	b = append(comma(b), `{"role":"assistant"`...)
	if texts > 0 {
		b = jsonenc.AppendString(append(b, `,"content":`...), joinText(blocks, texts))
	}
	if calls > 0 {
		b = appendCalls(append(b, `,"tool_calls":[`...), blocks)
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// joinText is the text of an assistant message's blocks, as one string: it
// is escaped whole, as the SDK escaped it, and not block by block, which
// could differ where a block ends in the middle of a UTF-8 sequence.
func joinText(blocks []recovery.Block, texts int) string {
	var s strings.Builder
	for _, blk := range blocks {
		if blk.Kind == recovery.BlockText {
			if texts == 1 && blk.Text != "" {
				return blk.Text // the common case, without a copy
			}
			s.WriteString(blk.Text)
		}
	}
	return s.String()
}

// appendCalls appends an assistant message's tool calls, as functions.
func appendCalls(b []byte, blocks []recovery.Block) []byte {
	for _, blk := range blocks {
		if blk.Kind != recovery.BlockToolUse {
			continue
		}
		b = append(comma(b), `{"id":`...)
		b = append(jsonenc.AppendString(b, blk.ToolUseID), `,"type":"function","function":{"name":`...)
		b = append(jsonenc.AppendString(b, blk.ToolName), `,"arguments":`...)
		if len(blk.ToolInput) == 0 {
			b = append(b, `"{}"`...)
		} else {
			b = jsonenc.AppendString(b, blk.ToolInput)
		}
		b = append(b, "}}"...)
	}
	return b
}

// appendTools appends the tool declarations as functions, if there are
// any: OpenAI refuses "tools": [].
func appendTools(b []byte, tools []provider.Tool) ([]byte, error) {
	if len(tools) == 0 {
		return b, nil
	}
	b = append(b, `,"tools":[`...)
	for _, t := range tools {
		b = append(comma(b), `{"type":"function"`...)
		if t.Name == "" && t.Description == "" && len(t.InputSchema) == 0 {
			// The SDK omits a function that is all zero; the server
			// refuses the tool either way.
			b = append(b, '}')
			continue
		}
		b = jsonenc.AppendString(append(b, `,"function":{"name":`...), t.Name)
		if t.Description != "" {
			b = jsonenc.AppendString(append(b, `,"description":`...), t.Description)
		}
		if len(t.InputSchema) > 0 {
			var err error
			if b, err = appendSchema(append(b, `,"parameters":`...), t.InputSchema); err != nil {
				return nil, fmt.Errorf("tool %q: input schema %w", t.Name, err)
			}
		}
		b = append(b, "}}"...)
	}
	return append(b, ']'), nil
}
