package openai

import (
	"slices"
	"strings"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/recovery"
)

// finishReasons maps finish_reason. Anything else is taken as stop.
var finishReasons = map[string]recovery.StopReason{
	"stop":           recovery.StopEndTurn,
	"length":         recovery.StopMaxTokens,
	"tool_calls":     recovery.StopToolUse,
	"function_call":  recovery.StopToolUse,
	"content_filter": recovery.StopContentFilter,
}

// reader turns the chunks of one stream into chunks and a Finish.
type reader struct {
	attempt *classify.Attempt
	emit    func(provider.Chunk) error
	classes *classify.Classifier // scrubs the model the stream names; nil: patterns only

	stops   []string            // the request's stop sequences
	calls   map[int64]*toolCall // tool calls being streamed, by index
	order   []int64             // their indexes in order of appearance
	reason  string              // finish_reason, once it came
	usage   bool                // usage came with or after the finish_reason
	refused bool                // the answer was a refusal
	finish  provider.Finish
}

// toolCall is a tool call whose arguments are still arriving.
type toolCall struct {
	id, name string
	args     strings.Builder
}

func newReader(a *classify.Attempt, emit func(provider.Chunk) error) *reader {
	return &reader{attempt: a, emit: emit, calls: map[int64]*toolCall{}}
}

// finished reports whether the finish_reason came.
func (r *reader) finished() bool { return r.reason != "" }

// complete reports whether nothing more is to be read: the finish_reason and
// the usage after it came. [DONE] is not waited for.
func (r *reader) complete() bool { return r.reason != "" && r.usage }

// chunk handles one chunk; an error is emit's, returned as it is. The
// chunk's strings view the event: what is kept or emitted is copied.
func (r *reader) chunk(c *chunk) error {
	if r.finish.Model == "" {
		r.finish.Model = r.classes.Model(strings.Clone(c.Model))
	}
	if r.finish.ID == "" {
		r.finish.ID = r.classes.Model(strings.Clone(c.ID)) // the upstream's words: scrubbed and bounded alike
	}
	for i := range c.Choices {
		choice := &c.Choices[i]
		if choice.Index != 0 {
			continue // only one choice is asked for
		}
		if err := r.delta(&choice.Delta); err != nil {
			return err
		}
		if choice.FinishReason != "" && r.reason == "" {
			if err := r.finishWith(strings.Clone(choice.FinishReason), choice.StopReason); err != nil {
				return err
			}
		}
	}
	if c.HasUsage {
		r.setUsage(c.Usage)
		r.usage = r.reason != ""
	}
	return nil
}

func (r *reader) delta(d *delta) error {
	if s := reasoning(d); s != "" {
		r.attempt.Token()
		if err := r.emit(provider.Chunk{Kind: provider.ChunkThinking, Text: strings.Clone(s)}); err != nil {
			return err
		}
	}
	text := d.Content
	if d.Refusal != "" {
		r.refused = true
		text += d.Refusal
	}
	if text != "" {
		r.attempt.Token()
		if err := r.emit(provider.Chunk{Kind: provider.ChunkText, Text: strings.Clone(text)}); err != nil {
			return err
		}
	}
	for i := range d.ToolCalls {
		r.attempt.Token()
		r.toolDelta(&d.ToolCalls[i])
	}
	return nil
}

// toolDelta accumulates one piece of a tool call: the first piece of an
// index carries its id and name, the others pieces of the arguments.
func (r *reader) toolDelta(tc *toolCallDelta) {
	call := r.calls[tc.Index]
	if call == nil {
		call = &toolCall{}
		r.calls[tc.Index] = call
		r.order = append(r.order, tc.Index)
	}
	if tc.ID != "" {
		call.id = strings.Clone(tc.ID)
	}
	if tc.Name != "" {
		call.name = strings.Clone(tc.Name)
	}
	call.args.WriteString(tc.Arguments)
}

// finishWith records the finish_reason, with the choice's stop_reason,
// and emits the tool calls, which are complete now — unless the output
// limit stopped the answer, which drops them.
func (r *reader) finishWith(reason, stopReason string) error {
	r.reason = reason
	stop, ok := finishReasons[reason]
	if !ok {
		stop = recovery.StopEndTurn
	}
	switch {
	case stop == recovery.StopEndTurn && len(r.order) > 0:
		// Some compatible servers say stop after calling tools.
		stop = recovery.StopToolUse
	case stop == recovery.StopEndTurn && r.refused:
		stop = recovery.StopRefusal
	case reason == "stop":
		if seq, ok := r.stopSequence(stopReason); ok {
			stop, r.finish.StopSequence = recovery.StopSequence, seq
		}
	}
	r.finish.StopReason = stop
	if stop.Truncating() {
		// length: the output limit may have cut any of the calls, and the
		// wire does not say which; a partial call is never emitted.
		return nil
	}
	for _, i := range slices.Sorted(slices.Values(r.order)) {
		c := r.calls[i]
		args := []byte(c.args.String())
		if len(args) == 0 {
			args = []byte(`{}`)
		}
		call := recovery.ToolCall{ID: c.id, Name: c.name, Input: args}
		if err := r.emit(provider.Chunk{Kind: provider.ChunkToolCall, ToolCall: call}); err != nil {
			return err
		}
	}
	return nil
}

// stopSequence is the request's stop sequence that stopReason names, if
// it names one. OpenAI's own API ends with finish_reason "stop" at a stop
// sequence and at a natural end alike, and sends no stop_reason: that is
// end_turn. vLLM says which stop string matched in stop_reason; any other
// stop_reason — a stop token's id, null, a string the request did not ask
// for — is end_turn too. The sequence returned is the request's own, never
// the upstream's words.
func (r *reader) stopSequence(stopReason string) (string, bool) {
	if stopReason == "" {
		return "", false
	}
	i := slices.Index(r.stops, stopReason)
	if i < 0 {
		return "", false
	}
	return r.stops[i], true
}

// setUsage maps usage. prompt_tokens counts cached tokens too; they are
// split out, as Anthropic reports them, so that input + cache = the prompt.
func (r *reader) setUsage(u usage) {
	cached, written := u.CachedTokens, u.CacheWriteTokens
	r.finish.Usage = recovery.Usage{
		InputTokens:              max(u.PromptTokens-cached-written, 0),
		OutputTokens:             u.CompletionTokens,
		CacheReadInputTokens:     cached,
		CacheCreationInputTokens: written,
	}
}

// reasoning is the reasoning text of a delta, from whichever field the
// server uses: reasoning_content (DeepSeek, llama.cpp, older vLLM), then
// reasoning (vLLM, Ollama, OpenRouter).
func reasoning(d *delta) string {
	if d.ReasoningContent != "" {
		return d.ReasoningContent
	}
	return d.Reasoning
}
