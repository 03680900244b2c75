package anthropic

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	sdk "github.com/anthropics/anthropic-sdk-go"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/jsonenc"
	"github.com/completiond/completiond/recovery"
)

// body maps a request to the JSON body of a Messages call, encoded here by
// appending, not by the SDK: the SDK's encoder reflects over its params a
// frame per level, on every request, and grows the sending goroutine's
// stack (see Provider.send). The body is what the SDK would encode from the
// params the provider used to build (the parity tests, body_test.go, hold
// it to that) with "stream": true, which the SDK's streaming call would
// set. held is the number of trailing whitespace bytes of the prefill (the
// machine's, or the caller's final assistant message) kept off the wire
// (see the package doc).
func (p *Provider) body(req *provider.Request) (b []byte, held int, err error) {
	tools := declaredTools(req)
	marks := planMarks(req, tools)
	b = make([]byte, 0, sizeHint(req))
	b = append(b, `{"max_tokens":`...)
	b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	if b, held, err = appendMessages(b, req, &marks); err != nil {
		return nil, 0, err
	}
	if req.Model != "" { // the SDK omits an empty model
		b = jsonenc.AppendString(append(b, `,"model":`...), req.Model)
	}
	b = appendSampling(b, req.Sampling)
	if b, err = appendOutputConfig(b, req); err != nil {
		return nil, 0, err
	}
	b = appendStopSequences(b, req.StopSequences)
	b = appendSystem(b, req.System, marks.system)
	if budget := thinkingBudget(req); budget > 0 {
		b = append(b, `,"thinking":{"type":"enabled","budget_tokens":`...)
		b = append(strconv.AppendInt(b, int64(budget), 10), '}')
	}
	if b, err = appendToolChoice(b, toolChoice(req)); err != nil {
		return nil, 0, err
	}
	if b, err = appendTools(b, req, tools, &marks); err != nil {
		return nil, 0, err
	}
	// A number JSON cannot carry is refused last, where the SDK refused it:
	// in its encoder, after the refusals of the mapping to its params.
	if err = req.Sampling.Finite(); err != nil {
		return nil, 0, err
	}
	return append(b, `,"stream":true}`...), held, nil
}

// appendMessages appends the conversation, and the prefill as a final
// assistant message; held is the prefill's trailing whitespace kept off the
// wire.
func appendMessages(b []byte, req *provider.Request, marks *cacheMarks) (_ []byte, held int, err error) {
	b = append(b, `,"messages":[`...)
	conv := conversationOf(req)
	for i, m := range req.Messages {
		blocks, last, h := conv.message(i)
		held += h
		if b, err = appendMessage(b, m.Role, blocks, last, &marks.skipBlocks); err != nil {
			return nil, 0, fmt.Errorf("messages[%d].%w", i, err)
		}
	}
	if req.Prefill != "" {
		sent := strings.TrimRightFunc(req.Prefill, unicode.IsSpace)
		held = len(req.Prefill) - len(sent)
		if sent != "" {
			b = append(comma(b), `{"role":"assistant","content":[{"type":"text","text":`...)
			b = append(jsonenc.AppendString(b, sent), "}]}"...)
		}
	}
	return append(b, ']'), held, nil
}

// appendSystem appends the system prompt, if there is one, as an array of
// one text block (the SDK's params), with a cache mark when marked.
func appendSystem(b []byte, system string, mark bool) []byte {
	if system == "" {
		return b
	}
	b = append(b, `,"system":[{"text":`...)
	return append(typed(jsonenc.AppendString(b, system), mark, "text"), ']')
}

// sizeHint is about the body's length, so that it is allocated once: the
// texts, the images in base64 and the schemas, and some room for the rest
// (paramsRoom more for the sampling parameters, the stop sequences and the
// tool choice).
func sizeHint(req *provider.Request) int {
	n := 256 + len(req.System) + len(req.Prefill) + len(req.Model)
	if req.Sampling != (provider.Sampling{}) || len(req.StopSequences) > 0 || req.ToolChoice != (provider.ToolChoice{}) {
		n += paramsRoom + len(req.ToolChoice.Name)
	}
	for _, s := range req.StopSequences {
		n += 8 + len(s)
	}
	if len(req.OutputSchema) > 0 {
		n += 128 + 2*len(req.OutputSchema) + len(structuredToolDescription)
	}
	if req.CacheSystem {
		n += len(cacheControl)
	}
	for _, m := range req.Messages {
		for _, b := range m.Blocks {
			if b.CacheBreakpoint {
				n += len(cacheControl)
			}
			n += 96 + len(b.Text) + len(b.Signature) + len(b.MediaType) + base64.StdEncoding.EncodedLen(len(b.Data)) +
				len(b.URL) + len(b.Title) + len(b.ToolUseID) + len(b.ToolName) + len(b.ToolInput)
		}
	}
	for _, t := range req.Tools {
		n += 96 + len(t.Name) + len(t.Description) + len(t.InputSchema)
		if t.CacheBreakpoint {
			n += len(cacheControl)
		}
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

// says reports whether a block goes on the wire: an empty text block does
// not, the API refuses it.
func says(blk recovery.Block) bool {
	return blk.Kind != recovery.BlockText || blk.Text != ""
}

// lastMessage is the index of the last message that goes on the wire (one
// with a block that says something), -1 if none does: the one that ends the
// conversation, which the API takes for a prefill if it is the assistant's.
func lastMessage(msgs []recovery.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if slices.ContainsFunc(msgs[i].Blocks, says) {
			return i
		}
	}
	return -1
}

// conversation is the request's messages as they go on the wire.
type conversation struct {
	msgs []recovery.Message
	// final is the caller's final assistant message, trimmed as a prefill;
	// -1 when there is none, or when the request has a Prefill of its own.
	final int
}

func conversationOf(req *provider.Request) conversation {
	c := conversation{msgs: req.Messages, final: -1}
	if req.Prefill == "" {
		if i := lastMessage(req.Messages); i >= 0 && req.Messages[i].Role == recovery.RoleAssistant {
			c.final = i
		}
	}
	return c
}

// message is what message i sends: its blocks, the change trimFinal makes to
// the last of them, and the whitespace it held off the wire.
func (c conversation) message(i int) (blocks []recovery.Block, last tail, held int) {
	if i != c.final {
		return c.msgs[i].Blocks, tail{}, 0
	}
	return trimFinal(c.msgs[i].Blocks)
}

// each calls f for each block that goes on the wire, in order: at is its
// place in the request, wire its place in the body's messages, and mark
// whether it carries a cache mark (before the limit of maxCacheMarks). It
// walks the blocks as appendMessages encodes them.
func (c conversation) each(f func(at, wire recovery.BlockRef, blk recovery.Block, mark bool)) {
	n := 0
	for i := range c.msgs {
		blocks, last, _ := c.message(i)
		k := 0
		for j, blk := range blocks {
			if !says(blk) {
				continue
			}
			f(recovery.BlockRef{Message: i, Block: j}, recovery.BlockRef{Message: n, Block: k}, blk,
				marked(blk, j == len(blocks)-1 && last.mark))
			k++
		}
		if k > 0 {
			n++
		}
	}
}

// tail is what trimFinal changes of the last block it keeps: text, if not
// empty, replaces its text, and mark adds the cache marks of the blocks
// trimmed away after it, which stay on what is sent.
type tail struct {
	text string
	mark bool
}

// trimFinal holds the trailing whitespace of the caller's own final
// assistant message off the wire, as a prefill's is: the API refuses final
// assistant content that ends in whitespace. Text blocks at the end of the
// message lose their trailing whitespace; one left empty is dropped, and so
// is the message if nothing is left of it, which then ends with the user's
// turn (an answer afresh, as there was nothing to continue). It returns the
// blocks to send, of which the last takes last's changes; held is the
// number of bytes removed: the continuation loses as much leading
// whitespace, so that the caller's text plus the stream reads as the model
// wrote it. The cache mark of a block of whitespace dropped moves to the
// last block kept (an empty block is not sent, nor its mark).
func trimFinal(blocks []recovery.Block) (_ []recovery.Block, last tail, held int) {
	for j := len(blocks) - 1; j >= 0; j-- {
		blk := blocks[j]
		if blk.Kind != recovery.BlockText {
			return blocks[:j+1], last, held
		}
		trimmed := strings.TrimRightFunc(blk.Text, unicode.IsSpace)
		held += len(blk.Text) - len(trimmed)
		if trimmed != "" {
			last.text = trimmed
			return blocks[:j+1], last, held
		}
		last.mark = last.mark || (blk.CacheBreakpoint && blk.Text != "")
	}
	return nil, tail{}, held
}

// appendMessage appends one message, nothing for one that says nothing.
// last changes its last block (trimFinal's); skip counts down the block
// marks left out (see cacheMarks). An error names the block, for the
// caller to prefix with the message.
func appendMessage(b []byte, role recovery.Role, blocks []recovery.Block, last tail, skip *int) ([]byte, error) {
	if !slices.ContainsFunc(blocks, says) {
		return b, nil
	}
	if role == recovery.RoleAssistant {
		b = append(comma(b), `{"role":"assistant","content":[`...)
	} else {
		b = append(comma(b), `{"role":"user","content":[`...)
	}
	for j, blk := range blocks {
		end := j == len(blocks)-1
		if end && last.text != "" {
			blk.Text = last.text
		}
		mark := says(blk) && keepMark(skip, marked(blk, end && last.mark))
		var err error
		if b, err = appendBlock(b, blk, mark); err != nil {
			return nil, fmt.Errorf("blocks[%d]: %w", j, err)
		}
	}
	return append(b, "]}"...), nil
}

// appendBlock appends one content block, with a cache mark when mark is
// set (never on a thinking block, which cannot carry one); nothing for an
// empty text block.
func appendBlock(b []byte, blk recovery.Block, mark bool) ([]byte, error) {
	switch blk.Kind {
	case recovery.BlockText:
		if blk.Text == "" {
			return b, nil
		}
		b = append(comma(b), `{"text":`...)
		return typed(jsonenc.AppendString(b, blk.Text), mark, "text"), nil
	case recovery.BlockImage:
		b = appendImageSource(append(comma(b), `{"source":`...), blk)
		return typed(b, mark, "image"), nil
	case recovery.BlockDocument:
		return typed(appendDocument(comma(b), blk), mark, "document"), nil
	case recovery.BlockToolUse:
		b, err := appendToolUse(comma(b), blk)
		if err != nil {
			return nil, err
		}
		return typed(b, mark, "tool_use"), nil
	case recovery.BlockToolResult:
		return typed(appendToolResult(comma(b), blk), mark, "tool_result"), nil
	case recovery.BlockThinking:
		return appendThinking(comma(b), blk), nil
	}
	return nil, fmt.Errorf("unknown block kind %d", blk.Kind)
}

// typed ends a block: its cache mark, if it has one, and its type.
func typed(b []byte, mark bool, typ string) []byte {
	if mark {
		b = append(b, cacheControl...)
	}
	b = append(append(b, `,"type":"`...), typ...)
	return append(b, `"}`...)
}

// appendURLSource appends the source of an image or a document given by
// URL, which the API fetches.
func appendURLSource(b []byte, url string) []byte {
	b = append(b, `{"type":"url","url":`...)
	return append(jsonenc.AppendString(b, url), '}')
}

// appendImageSource appends an image's source: its URL, or its data in
// base64 (the URL wins over data: the request validation lets only one be
// set).
func appendImageSource(b []byte, blk recovery.Block) []byte {
	if blk.URL != "" {
		return appendURLSource(b, blk.URL)
	}
	b = append(b, `{"data":"`...)
	b = base64.StdEncoding.AppendEncode(b, blk.Data)
	b = append(b, '"')
	if blk.MediaType != "" { // the SDK omits an empty media type
		b = jsonenc.AppendString(append(b, `,"media_type":`...), blk.MediaType)
	}
	return append(b, `,"type":"base64"}`...)
}

// appendDocument appends a PDF document but for its type: its URL, or its data in base64 as
// application/pdf, whatever Block.MediaType says — the only document the
// SDK's params carry as data (the request validation takes no other) — and
// its title, if it has one.
func appendDocument(b []byte, blk recovery.Block) []byte {
	b = append(b, `{"source":`...)
	if blk.URL != "" {
		b = appendURLSource(b, blk.URL)
	} else {
		b = append(b, `{"data":"`...)
		b = base64.StdEncoding.AppendEncode(b, blk.Data)
		b = append(b, `","media_type":"application/pdf","type":"base64"}`...)
	}
	if blk.Title != "" { // the SDK omits an empty title
		b = jsonenc.AppendString(append(b, `,"title":`...), blk.Title)
	}
	return b
}

// appendToolUse appends a tool call the model made, but for its type.
func appendToolUse(b []byte, blk recovery.Block) ([]byte, error) {
	b = jsonenc.AppendString(append(b, `{"id":`...), blk.ToolUseID)
	b = append(b, `,"input":`...)
	var err error
	if b, err = appendInput(b, blk.ToolInput); err != nil {
		return nil, err
	}
	return jsonenc.AppendString(append(b, `,"name":`...), blk.ToolName), nil
}

// appendToolResult appends the answer to a tool call but for its type; an
// empty output sends no content.
func appendToolResult(b []byte, blk recovery.Block) []byte {
	b = jsonenc.AppendString(append(b, `{"tool_use_id":`...), blk.ToolUseID)
	if blk.Text != "" {
		b = append(b, `,"content":[{"text":`...)
		b = append(jsonenc.AppendString(b, blk.Text), `,"type":"text"}]`...)
	}
	return strconv.AppendBool(append(b, `,"is_error":`...), blk.IsError)
}

// appendThinking appends a thinking block exactly as it came: its text and
// signature, or a redacted block's opaque data.
func appendThinking(b []byte, blk recovery.Block) []byte {
	if blk.Redacted {
		b = jsonenc.AppendString(append(b, `{"data":`...), blk.Data)
		return append(b, `,"type":"redacted_thinking"}`...)
	}
	b = jsonenc.AppendString(append(b, `{"signature":`...), blk.Signature)
	b = jsonenc.AppendString(append(b, `,"thinking":`...), blk.Text)
	return append(b, `,"type":"thinking"}`...)
}

// errInput is why a tool call's arguments are refused.
var errInput = errors.New("tool input is not valid JSON")

// appendInput appends a tool call's arguments, {} when there are none. They
// go as they came, as the SDK sent them (a json.RawMessage), but for bytes
// that are not UTF-8, which can only be inside strings and go as U+FFFD,
// what the server would read of them anyway: the body stays UTF-8.
func appendInput(b, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return append(b, "{}"...), nil
	}
	if !json.Valid(raw) {
		return nil, errInput
	}
	if utf8.Valid(raw) {
		return append(b, raw...), nil
	}
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, raw[i:i+size]...)
		}
		i += size
	}
	return b, nil
}

// errSchema is why a tool's input schema is refused.
var errSchema = errors.New("input schema is not a JSON object")

// errSchemaKey is why a schema with an empty top-level key is refused: the
// SDK set each of the schema's other fields by path (sjson), refused the
// empty one, and sent nothing.
var errSchemaKey = errors.New("input schema has an empty key")

// appendTools appends the tool declarations, the request's tools (see
// declaredTools), if there are any: no tools sends no "tools". marks says
// which carry a cache mark.
func appendTools(b []byte, req *provider.Request, tools []provider.Tool, marks *cacheMarks) ([]byte, error) {
	if len(tools) == 0 {
		return b, nil
	}
	b = append(b, `,"tools":[`...)
	for i, t := range tools {
		if err := checkToolName(req, t, i); err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		b = jsonenc.AppendString(append(comma(b), `{"name":`...), t.Name)
		if t.Description != "" {
			b = jsonenc.AppendString(append(b, `,"description":`...), t.Description)
		}
		var err error
		if b, err = appendSchema(b, t.InputSchema); err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		if keepMark(&marks.skipTools, marks.tool(tools, i)) {
			b = append(b, cacheControl...)
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendSchema appends a tool's input schema as the SDK's params had it:
// "type": "object" whatever the schema said, its properties, the strings
// of its required, and the rest of it ($defs, additionalProperties, …) as
// is — and no "input_schema" at all for a schema that has none of these,
// which the SDK omitted as a zero value. The schema is decoded as the provider decoded it into those params,
// so that it is refused where it was, and its values encoded by
// encoding/json, not by the SDK's reflective encoder; a request without
// tools, the common one, never comes here.
func appendSchema(b, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return b, nil
	}
	mark := len(b)
	b = append(b, `,"input_schema":{"type":"object"`...)
	empty := len(b)
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, errSchema
	}
	if props := fields["properties"]; props != nil {
		var err error
		if b, err = appendValue(append(b, `,"properties":`...), props); err != nil {
			return nil, err
		}
	}
	if req, ok := fields["required"].([]any); ok {
		n := 0
		for _, r := range req {
			if s, ok := r.(string); ok {
				if n == 0 {
					b = append(b, `,"required":[`...)
				} else {
					b = append(b, ',')
				}
				b = jsonenc.AppendString(b, s)
				n++
			}
		}
		if n > 0 {
			b = append(b, ']')
		}
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k == "" {
			return nil, errSchemaKey
		}
		if k != "type" && k != "properties" && k != "required" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		var err error
		if b, err = appendValue(append(jsonenc.AppendString(append(b, ','), k), ':'), fields[k]); err != nil {
			return nil, err
		}
	}
	if len(b) == empty {
		return b[:mark], nil
	}
	return append(b, '}'), nil
}

// appendValue appends a decoded schema value, encoded by encoding/json.
func appendValue(b []byte, v any) ([]byte, error) {
	enc, err := json.Marshal(v)
	if err != nil {
		return nil, errSchema
	}
	return append(b, enc...), nil
}

// MinThinkingBudget is the smallest budget_tokens the API accepts.
const MinThinkingBudget = 1024

// interleavedBeta is the anthropic-beta header value that lets the model
// think between tool calls.
const interleavedBeta = string(sdk.AnthropicBetaInterleavedThinking2025_05_14)

// interleaved reports whether the request goes with the interleaved-thinking
// beta: only when it asks for it and thinking is on — the header alone
// changes nothing, and a request without thinking is left as it was.
func interleaved(req *provider.Request) bool {
	return req.Reasoning.Interleaved && thinkingBudget(req) > 0
}

// thinkingBudget is the budget_tokens to send, 0 for no thinking (see the
// package doc). The budget must stay below max_tokens, which is the
// recovery machine's to set (escalation, CONTEXT_LIMIT_ADJUST): a budget
// that does not fit is cut to half of max_tokens, never the other way round.
// With interleaved thinking the budget is the whole turn's, across the
// thinking between its tool calls, and the API lets it exceed max_tokens:
// it goes as asked.
func thinkingBudget(req *provider.Request) int {
	if req.ThinkingBudget <= 0 || req.Prefill != "" || structuredTool(req) || !thinkingFits(req.Messages) {
		return 0
	}
	budget := max(req.ThinkingBudget, MinThinkingBudget)
	if req.Reasoning.Interleaved {
		return budget
	}
	if budget >= req.MaxTokens {
		budget = max(req.MaxTokens/2, MinThinkingBudget)
	}
	if budget >= req.MaxTokens {
		return 0 // max_tokens leaves no room for the smallest budget
	}
	return budget
}

// thinkingFits reports whether the conversation can be sent with thinking
// on: the API refuses it when the last assistant message calls tools but
// does not start with its thinking — a tool turn whose thinking was not
// kept, as a stateless caller's.
func thinkingFits(msgs []recovery.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != recovery.RoleAssistant {
			continue
		}
		uses := slices.ContainsFunc(m.Blocks, func(b recovery.Block) bool { return b.Kind == recovery.BlockToolUse })
		return !uses || (len(m.Blocks) > 0 && m.Blocks[0].Kind == recovery.BlockThinking)
	}
	return true
}
