package openai

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/completiond/completiond/provider/sse"
)

// chunk is what the reader uses of one chat.completion.chunk; every other
// field is skipped unread. Its strings view the event's bytes (sse.JSON):
// valid until the next event, so the reader copies what it keeps or emits.
// Its slices are reused from chunk to chunk.
//
// Each field is read with gjson's conversions, the ones the SDK's apijson
// (built on gjson) applied: a number where a string belongs is its text, a
// string of digits where a number belongs is the number, null and a wrong
// container are the zero value, an array of objects holding anything else
// is empty, and of duplicate keys the first counts. Wrong types inside a
// chunk never failed an SDK decode and do not fail this one; text that is
// not JSON, or JSON that is not an object, does (FuzzDecodeParity holds
// the two decodings to the same results).
type chunk struct {
	ID, Model string
	Choices   []choice
	// HasUsage is whether "usage" was an object (null is none).
	HasUsage bool
	Usage    usage
}

// choice is one of a chunk's choices; the reader uses only index 0.
type choice struct {
	Index        int64
	Delta        delta
	FinishReason string
	// StopReason is vLLM's stop_reason, beside finish_reason "stop": the
	// stop string that ended the answer. Only a JSON string counts, as for
	// the reasoning fields: the stop token's id (a number) or null is "".
	StopReason string
}

// delta is what a choice adds to the answer.
type delta struct {
	Content, Refusal string
	// ReasoningContent and Reasoning are the compatible servers' reasoning
	// fields (see reasoning); only a JSON string counts, as the reader took
	// them from the SDK's extra fields with encoding/json.
	ReasoningContent, Reasoning string
	ToolCalls                   []toolCallDelta
}

// toolCallDelta is one piece of a tool call: its function's name and a
// piece of its arguments.
type toolCallDelta struct {
	Index               int64
	ID, Name, Arguments string
}

// usage is the chunk's token counts, which come with the finish_reason or
// after it (stream_options.include_usage).
type usage struct {
	PromptTokens, CompletionTokens int64
	// CachedTokens and CacheWriteTokens are prompt_tokens_details'.
	CachedTokens, CacheWriteTokens int64
}

// done is the data of the event that ends the stream; anything after its
// first bytes is ignored, as the SDK did.
var done = []byte("[DONE]")

// chunkType names chunk in the failure of an event that is JSON but not
// an object, as encoding/json named the SDK's type.
var chunkType = reflect.TypeFor[chunk]()

// decode reads one event's data into c. A chunk holding "error" — any
// top-level "error" key, even a null one, as the SDK had it — fails with an
// *sse.ErrorEvent; one that is not JSON with the *json.SyntaxError, and one
// that is JSON but neither an object nor null with a
// *json.UnmarshalTypeError, as the SDK's decoding did. [DONE] is the
// caller's to look for first.
func (c *chunk) decode(data []byte) error {
	root, err := sse.JSON(data)
	if err != nil {
		// The SDK looked for "error" before it parsed: an error chunk the
		// upstream garbled is still its error.
		if gjson.GetBytes(data, "error").Exists() {
			return &sse.ErrorEvent{Data: data}
		}
		return err
	}
	c.ID, c.Model, c.Choices, c.HasUsage, c.Usage = "", "", c.Choices[:0], false, usage{}
	switch {
	case root.IsObject():
	case root.Type == gjson.Null:
		return nil
	default:
		return &json.UnmarshalTypeError{Value: jsonKind(root), Type: chunkType}
	}
	failed := false
	sse.Decode(root,
		sse.String("id", &c.ID),
		sse.String("model", &c.Model),
		sse.Objects("choices", &c.Choices, (*choice).decode),
		sse.Object("usage", func(v gjson.Result) {
			c.HasUsage = true
			c.Usage.decode(v)
		}),
		sse.Value("error", func(gjson.Result) { failed = true }),
	)
	if failed {
		return &sse.ErrorEvent{Data: data}
	}
	return nil
}

// decode reads one element of choices into ch, keeping its tool call
// slice for reuse.
func (ch *choice) decode(v gjson.Result) {
	*ch = choice{Delta: delta{ToolCalls: ch.Delta.ToolCalls[:0]}}
	sse.Decode(v,
		sse.Int("index", &ch.Index),
		sse.String("finish_reason", &ch.FinishReason),
		sse.Value("stop_reason", func(v gjson.Result) { ch.StopReason = jsonString(v) }),
		sse.Object("delta", ch.Delta.decode),
	)
}

func (d *delta) decode(v gjson.Result) {
	sse.Decode(v,
		sse.String("content", &d.Content),
		sse.String("refusal", &d.Refusal),
		sse.Value("reasoning_content", func(v gjson.Result) { d.ReasoningContent = jsonString(v) }),
		sse.Value("reasoning", func(v gjson.Result) { d.Reasoning = jsonString(v) }),
		sse.Objects("tool_calls", &d.ToolCalls, (*toolCallDelta).decode),
	)
}

// decode reads one element of tool_calls into t.
func (t *toolCallDelta) decode(v gjson.Result) {
	*t = toolCallDelta{}
	sse.Decode(v,
		sse.Int("index", &t.Index),
		sse.String("id", &t.ID),
		sse.Object("function", func(v gjson.Result) {
			sse.Decode(v, sse.String("name", &t.Name), sse.String("arguments", &t.Arguments))
		}),
	)
}

func (u *usage) decode(v gjson.Result) {
	sse.Decode(v,
		sse.Int("prompt_tokens", &u.PromptTokens),
		sse.Int("completion_tokens", &u.CompletionTokens),
		sse.Object("prompt_tokens_details", func(v gjson.Result) {
			sse.Decode(v, sse.Int("cached_tokens", &u.CachedTokens), sse.Int("cache_write_tokens", &u.CacheWriteTokens))
		}),
	)
}

// jsonString is v's text if it is a JSON string, and "" otherwise, as
// encoding/json reads it, which is how the reader took these fields from
// the SDK's extra fields. gjson unescapes a lone escaped surrogate
// otherwise (it takes the escape after it for its pair, and drops it): a
// string holding a surrogate's escape is left to encoding/json, which
// costs an allocation only for such a string.
func jsonString(v gjson.Result) string {
	if v.Type != gjson.String {
		return ""
	}
	if escapedSurrogate(v.Raw) {
		var s string
		if json.Unmarshal([]byte(v.Raw), &s) == nil {
			return s
		}
	}
	return v.Str
}

// escapedSurrogate reports whether raw, a JSON string, may hold the \u
// escape of a UTF-16 surrogate (an escaped backslash before a u is taken
// for one too, which only sends the string the slow way).
func escapedSurrogate(raw string) bool {
	for {
		i := strings.Index(raw, `\u`)
		if i < 0 || i+6 > len(raw) {
			return false
		}
		if surrogate(raw[i+2 : i+6]) {
			return true
		}
		raw = raw[i+2:]
	}
}

// jsonKind names the kind of a JSON value as encoding/json's errors do.
func jsonKind(v gjson.Result) string {
	switch v.Type {
	case gjson.String:
		return "string"
	case gjson.Number:
		return "number"
	case gjson.True, gjson.False:
		return "bool"
	}
	if v.IsArray() {
		return "array"
	}
	return "object"
}
