package anthropic

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	sdk "github.com/anthropics/anthropic-sdk-go"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/recovery"
)

// stopReasons maps the API's stop_reason. Anything else — a reason newer
// than this code — is taken as end_turn.
var stopReasons = map[sdk.StopReason]recovery.StopReason{
	sdk.StopReasonEndTurn:                    recovery.StopEndTurn,
	sdk.StopReasonStopSequence:               recovery.StopSequence,
	sdk.StopReasonMaxTokens:                  recovery.StopMaxTokens,
	sdk.StopReasonToolUse:                    recovery.StopToolUse,
	sdk.StopReasonPauseTurn:                  recovery.StopPauseTurn,
	sdk.StopReasonRefusal:                    recovery.StopRefusal,
	sdk.StopReasonModelContextWindowExceeded: recovery.StopContextWindow,
}

// reader turns the events of one stream into chunks and a Finish.
type reader struct {
	attempt *classify.Attempt
	classes *classify.Classifier
	emit    func(provider.Chunk) error

	// skip is how many bytes of leading whitespace of the continuation may
	// still be dropped: the prefill's, which were held off the wire.
	skip int
	// stops are the request's stop sequences, the only ones Finish names.
	stops []string
	// structured: the answer is the structured tool's input (a
	// StructuredTool request), streamed as text.
	structured bool
	// answered: the structured tool was called; calls counts the tool
	// calls emitted. The two decide the stop reason (see stopReason).
	answered bool
	calls    int
	// tools are the tool_use blocks being streamed, by content index.
	tools map[int64]*toolBlock
	// thoughts are the thinking and redacted_thinking blocks being
	// streamed, by content index.
	thoughts map[int64]*thinkingBlock
	// cut are the ids of tool_use blocks that stopped with input that is
	// not JSON: dropped if the message ends on a truncating stop reason,
	// a broken stream otherwise (see end).
	cut []string

	finish  provider.Finish
	stopped bool // message_stop came
}

// toolBlock is a tool_use block whose input is still arriving.
type toolBlock struct {
	id, name string
	input    strings.Builder
	// answer marks the structured tool's call, whose input is streamed as
	// the answer's text, not kept; streamed says some of it came.
	answer, streamed bool
}

// thinkingBlock is a thinking block whose text and signature are still
// arriving, or a redacted_thinking block, which comes whole.
type thinkingBlock struct {
	text, signature strings.Builder
	redacted        bool
	data            string
}

func newReader(a *classify.Attempt, c *classify.Classifier, emit func(provider.Chunk) error, held int, req *provider.Request) *reader {
	return &reader{attempt: a, classes: c, emit: emit, skip: held, stops: req.StopSequences, structured: structuredTool(req),
		tools: map[int64]*toolBlock{}, thoughts: map[int64]*thinkingBlock{}}
}

// event handles one event; an error is emit's, returned as it is, or the
// failure of a tool input that is not JSON. The event's strings view the
// stream's bytes: what is kept or emitted is copied.
func (r *reader) event(ev *event) error {
	switch ev.Type {
	case "message_start":
		r.finish.Model = r.classes.Model(strings.Clone(ev.Message.Model))
		r.finish.ID = r.classes.Model(strings.Clone(ev.Message.ID)) // the upstream's words: scrubbed and bounded alike
		r.usage(ev.Message.Usage)
	case "content_block_start":
		return r.blockStart(ev)
	case "content_block_delta":
		return r.delta(ev)
	case "content_block_stop":
		return r.blockStop(ev.Index)
	case "message_delta":
		if ev.Delta.StopReason != "" {
			r.finish.StopReason = r.stopReason(ev.Delta.StopReason)
			r.finish.StopSequence = r.stopSequence(ev.Delta.StopSequence)
		}
		r.usage(ev.Usage)
	case "message_stop":
		if r.finish.StopReason == recovery.StopNone {
			r.finish.StopReason = recovery.StopEndTurn
		}
		r.stopped = true
	}
	return nil
}

func (r *reader) blockStart(ev *event) error {
	b := &ev.ContentBlock
	switch b.Type {
	case "tool_use":
		r.attempt.Token()
		t := &toolBlock{id: strings.Clone(b.ID), name: strings.Clone(b.Name)}
		t.answer = r.structured && t.name == StructuredToolName
		r.answered = r.answered || t.answer
		r.tools[ev.Index] = t
	case "text":
		return r.text(b.Text)
	case "thinking":
		t := &thinkingBlock{}
		t.signature.WriteString(b.Signature)
		r.thoughts[ev.Index] = t
		return r.thinking(t, b.Thinking)
	case "redacted_thinking":
		r.attempt.Token()
		r.thoughts[ev.Index] = &thinkingBlock{redacted: true, data: strings.Clone(b.Data)}
	}
	return nil
}

func (r *reader) delta(ev *event) error {
	d := &ev.Delta
	switch d.Type {
	case "text_delta":
		return r.text(d.Text)
	case "thinking_delta":
		return r.thinking(r.thoughts[ev.Index], d.Thinking)
	case "signature_delta":
		r.attempt.Token()
		if t := r.thoughts[ev.Index]; t != nil {
			t.signature.WriteString(d.Signature)
		}
	case "input_json_delta":
		r.attempt.Token()
		t := r.tools[ev.Index]
		switch {
		case t == nil:
		case t.answer:
			t.streamed = t.streamed || d.PartialJSON != ""
			return r.text(d.PartialJSON)
		default:
			t.input.WriteString(d.PartialJSON)
		}
	}
	return nil
}

// blockStop emits a finished tool_use or thinking block.
func (r *reader) blockStop(index int64) error {
	if th := r.thoughts[index]; th != nil {
		delete(r.thoughts, index)
		b := recovery.Block{Kind: recovery.BlockThinking, Text: th.text.String(), Signature: th.signature.String()}
		if th.redacted {
			b = recovery.Block{Kind: recovery.BlockThinking, Redacted: true, Data: []byte(th.data)}
		}
		return r.emit(provider.Chunk{Kind: provider.ChunkThinkingBlock, Block: b})
	}
	t := r.tools[index]
	if t == nil {
		return nil
	}
	delete(r.tools, index)
	if t.answer {
		// Its input went as text, cut or not: a cut one is a truncated
		// answer, to be continued. An empty input is the object {}.
		if !t.streamed {
			return r.text("{}")
		}
		return nil
	}
	input := []byte(t.input.String())
	if len(input) == 0 {
		input = []byte(`{}`)
	}
	if !json.Valid(input) {
		// The output limit cuts a call mid-input; whether that is what
		// happened is known only when the message ends.
		r.cut = append(r.cut, t.id)
		return nil
	}
	call := recovery.ToolCall{ID: t.id, Name: t.name, Input: input}
	r.calls++
	return r.emit(provider.Chunk{Kind: provider.ChunkToolCall, ToolCall: call})
}

// end decides, once the message has its stop reason, what becomes of the
// tool_use blocks that were cut (input not JSON at their stop) or never
// stopped: on a truncating stop reason they are dropped and the attempt
// ends as truncated; on any other, the stream is broken.
func (r *reader) end() error {
	for _, t := range r.tools {
		if !t.answer { // the answer's text is out already, whatever it was
			r.cut = append(r.cut, t.id)
		}
	}
	clear(r.tools)
	if len(r.cut) == 0 || r.finish.StopReason.Truncating() {
		return nil
	}
	return r.classes.Broken(r.attempt.Status(), r.attempt.Header(),
		fmt.Errorf("tool_use %s: input is not valid JSON", strings.Join(r.cut, ", ")))
}

// text emits answer text, dropping what is left to skip of the prefill's
// held whitespace.
func (r *reader) text(s string) error {
	if s == "" {
		return nil
	}
	r.attempt.Token()
	s = r.skipHeld(s)
	if s == "" {
		return nil
	}
	return r.emit(provider.Chunk{Kind: provider.ChunkText, Text: strings.Clone(s)})
}

// skipHeld drops up to r.skip bytes of leading whitespace; the first other
// character ends the skipping.
func (r *reader) skipHeld(s string) string {
	for r.skip > 0 && s != "" {
		c, size := utf8.DecodeRuneInString(s)
		if !unicode.IsSpace(c) || size > r.skip {
			r.skip = 0
			break
		}
		s, r.skip = s[size:], r.skip-size
	}
	return s
}

// thinking emits a piece of reasoning and adds it to its block (nil for a
// delta whose block never started, which is only streamed).
func (r *reader) thinking(t *thinkingBlock, s string) error {
	if s == "" {
		return nil
	}
	r.attempt.Token()
	if t != nil {
		t.text.WriteString(s)
	}
	return r.emit(provider.Chunk{Kind: provider.ChunkThinking, Text: strings.Clone(s)})
}

// usage merges counts; both events report cumulative totals, so the larger wins.
func (r *reader) usage(n usage) {
	u := &r.finish.Usage
	u.InputTokens = max(u.InputTokens, n.InputTokens)
	u.OutputTokens = max(u.OutputTokens, n.OutputTokens)
	u.CacheReadInputTokens = max(u.CacheReadInputTokens, n.CacheReadInputTokens)
	u.CacheCreationInputTokens = max(u.CacheCreationInputTokens, n.CacheCreationInputTokens)
}

// maxStopSequence is the longest stop sequence a caller may send (the
// service refuses longer ones): an upstream's longer than that is no
// request's, and is not even compared.
const maxStopSequence = 256

// stopSequence is the request's stop sequence that message_delta says
// ended the answer, with stop_reason stop_sequence; "" otherwise, and when
// the upstream names none of the request's — its stop reason stands, but
// its words are never echoed: what Finish names is the caller's own string.
func (r *reader) stopSequence(s string) string {
	if r.finish.StopReason != recovery.StopSequence || s == "" || len(s) > maxStopSequence {
		return ""
	}
	if i := slices.Index(r.stops, s); i >= 0 {
		return r.stops[i]
	}
	return ""
}

// stopReason maps the API's stop_reason. tool_use that stands for the
// structured tool's call alone is end_turn: the answer is complete, and no
// tool is to be run.
func (r *reader) stopReason(s string) recovery.StopReason {
	reason, ok := stopReasons[sdk.StopReason(s)]
	if !ok {
		return recovery.StopEndTurn
	}
	if reason == recovery.StopToolUse && r.answered && r.calls == 0 {
		return recovery.StopEndTurn
	}
	return reason
}
