package openai

import (
	"encoding/json"
	"reflect"

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
	var seen sse.Fields
	failed := false
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			if seen.First(0) {
				c.ID = v.String()
			}
		case "model":
			if seen.First(1) {
				c.Model = v.String()
			}
		case "choices":
			if seen.First(2) && !sse.Objects(v, func(v gjson.Result) {
				var ch *choice
				c.Choices, ch = grow(c.Choices)
				*ch = choice{Delta: delta{ToolCalls: ch.Delta.ToolCalls[:0]}}
				ch.decode(v)
			}) {
				c.Choices = c.Choices[:0]
			}
		case "usage":
			if seen.First(3) && v.IsObject() {
				c.HasUsage = true
				c.Usage.decode(v)
			}
		case "error":
			failed = true
			return false
		}
		return true
	})
	if failed {
		return &sse.ErrorEvent{Data: data}
	}
	return nil
}

// grow extends s by one element, reusing its capacity, and returns the
// element as it is there: the caller resets it, keeping what it reuses.
func grow[T any](s []T) ([]T, *T) {
	if len(s) < cap(s) {
		s = s[:len(s)+1]
	} else {
		s = append(s, *new(T))
	}
	return s, &s[len(s)-1]
}

// The decoders below read one object each, into a zero value (but for the
// slices kept for reuse). null is read as the zero value: gjson gives ""
// and 0 for it, as apijson left the field untouched.

func (ch *choice) decode(v gjson.Result) {
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			if seen.First(0) {
				ch.Index = v.Int()
			}
		case "finish_reason":
			if seen.First(1) {
				ch.FinishReason = v.String()
			}
		case "delta":
			if seen.First(2) && v.IsObject() {
				ch.Delta.decode(v)
			}
		}
		return true
	})
}

func (d *delta) decode(v gjson.Result) {
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			if seen.First(0) {
				d.Content = v.String()
			}
		case "refusal":
			if seen.First(1) {
				d.Refusal = v.String()
			}
		case "reasoning_content":
			if seen.First(2) {
				d.ReasoningContent = jsonString(v)
			}
		case "reasoning":
			if seen.First(3) {
				d.Reasoning = jsonString(v)
			}
		case "tool_calls":
			if seen.First(4) && !sse.Objects(v, func(v gjson.Result) {
				var t *toolCallDelta
				d.ToolCalls, t = grow(d.ToolCalls)
				*t = toolCallDelta{}
				t.decode(v)
			}) {
				d.ToolCalls = d.ToolCalls[:0]
			}
		}
		return true
	})
}

func (t *toolCallDelta) decode(v gjson.Result) {
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			if seen.First(0) {
				t.Index = v.Int()
			}
		case "id":
			if seen.First(1) {
				t.ID = v.String()
			}
		case "function":
			if seen.First(2) && v.IsObject() {
				var fn sse.Fields
				v.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "name":
						if fn.First(0) {
							t.Name = v.String()
						}
					case "arguments":
						if fn.First(1) {
							t.Arguments = v.String()
						}
					}
					return true
				})
			}
		}
		return true
	})
}

func (u *usage) decode(v gjson.Result) {
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			if seen.First(0) {
				u.PromptTokens = v.Int()
			}
		case "completion_tokens":
			if seen.First(1) {
				u.CompletionTokens = v.Int()
			}
		case "prompt_tokens_details":
			if seen.First(2) && v.IsObject() {
				var details sse.Fields
				v.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "cached_tokens":
						if details.First(0) {
							u.CachedTokens = v.Int()
						}
					case "cache_write_tokens":
						if details.First(1) {
							u.CacheWriteTokens = v.Int()
						}
					}
					return true
				})
			}
		}
		return true
	})
}

// jsonString is v's text if it is a JSON string, and "" otherwise.
func jsonString(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.Str
	}
	return ""
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
