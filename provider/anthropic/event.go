package anthropic

import (
	"github.com/tidwall/gjson"

	"github.com/completiond/completiond/provider/sse"
)

// event is what the reader uses of one stream event, every type's fields
// side by side as in the SDK's MessageStreamEventUnion; every other field is
// skipped unread. Its strings view the event's bytes (sse.JSON): valid
// until the next event, so the reader copies what it keeps or emits.
//
// Each field is read with gjson's conversions, the ones the SDK's apijson
// (built on gjson) applied: a number where a string belongs is its text, a
// string of digits where a number belongs is the number, null and a wrong
// container are the zero value. Wrong types never failed an SDK decode and
// do not fail this one; only text that is not JSON does (FuzzDecodeParity
// holds the two to the same results).
type event struct {
	Type  string
	Index int64
	// Message is message_start's.
	Message struct {
		ID, Model string
		Usage     usage
	}
	// ContentBlock is content_block_start's.
	ContentBlock struct {
		Type, ID, Name, Text, Thinking, Signature, Data string
	}
	// Delta is content_block_delta's, or message_delta's StopReason and
	// StopSequence (the one that matched, with stop_reason stop_sequence).
	Delta struct {
		Type, Text, Thinking, Signature, PartialJSON, StopReason, StopSequence string
	}
	// Usage is message_delta's.
	Usage usage
}

// usage is the token counts of message_start's message and of message_delta.
type usage struct {
	InputTokens, OutputTokens, CacheReadInputTokens, CacheCreationInputTokens int64
}

// decode reads one event's data into e. Data that is not JSON fails with
// the *json.SyntaxError; any JSON value is an event, as the SDK's union
// took it (one that is not an object has no type, and is ignored).
func (e *event) decode(data []byte) error {
	root, err := sse.JSON(data)
	if err != nil {
		return err
	}
	*e = event{}
	if !root.IsObject() {
		return nil
	}
	m, b, d := &e.Message, &e.ContentBlock, &e.Delta
	sse.Decode(root,
		sse.String("type", &e.Type),
		sse.Int("index", &e.Index),
		sse.Object("message", func(v gjson.Result) {
			sse.Decode(v, sse.String("id", &m.ID), sse.String("model", &m.Model), sse.Object("usage", m.Usage.decode))
		}),
		sse.Object("content_block", func(v gjson.Result) {
			sse.Decode(v, sse.String("type", &b.Type), sse.String("id", &b.ID), sse.String("name", &b.Name),
				sse.String("text", &b.Text), sse.String("thinking", &b.Thinking), sse.String("signature", &b.Signature),
				sse.String("data", &b.Data))
		}),
		sse.Object("delta", func(v gjson.Result) {
			sse.Decode(v, sse.String("type", &d.Type), sse.String("text", &d.Text), sse.String("thinking", &d.Thinking),
				sse.String("signature", &d.Signature), sse.String("partial_json", &d.PartialJSON),
				sse.String("stop_reason", &d.StopReason), sse.String("stop_sequence", &d.StopSequence))
		}),
		sse.Object("usage", e.Usage.decode),
	)
	return nil
}

func (u *usage) decode(v gjson.Result) {
	sse.Decode(v,
		sse.Int("input_tokens", &u.InputTokens),
		sse.Int("output_tokens", &u.OutputTokens),
		sse.Int("cache_read_input_tokens", &u.CacheReadInputTokens),
		sse.Int("cache_creation_input_tokens", &u.CacheCreationInputTokens),
	)
}
