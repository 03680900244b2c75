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
	// Delta is content_block_delta's, or message_delta's StopReason.
	Delta struct {
		Type, Text, Thinking, Signature, PartialJSON, StopReason string
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
	var seen sse.Fields
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			if seen.First(0) {
				e.Type = v.String()
			}
		case "index":
			if seen.First(1) {
				e.Index = v.Int()
			}
		case "message":
			if seen.First(2) && v.IsObject() {
				e.decodeMessage(v)
			}
		case "content_block":
			if seen.First(3) && v.IsObject() {
				e.decodeContentBlock(v)
			}
		case "delta":
			if seen.First(4) && v.IsObject() {
				e.decodeDelta(v)
			}
		case "usage":
			if seen.First(5) && v.IsObject() {
				e.Usage.decode(v)
			}
		}
		return true
	})
	return nil
}

func (e *event) decodeMessage(v gjson.Result) {
	m := &e.Message
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			if seen.First(0) {
				m.ID = v.String()
			}
		case "model":
			if seen.First(1) {
				m.Model = v.String()
			}
		case "usage":
			if seen.First(2) && v.IsObject() {
				m.Usage.decode(v)
			}
		}
		return true
	})
}

func (e *event) decodeContentBlock(v gjson.Result) {
	b := &e.ContentBlock
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			if seen.First(0) {
				b.Type = v.String()
			}
		case "id":
			if seen.First(1) {
				b.ID = v.String()
			}
		case "name":
			if seen.First(2) {
				b.Name = v.String()
			}
		case "text":
			if seen.First(3) {
				b.Text = v.String()
			}
		case "thinking":
			if seen.First(4) {
				b.Thinking = v.String()
			}
		case "signature":
			if seen.First(5) {
				b.Signature = v.String()
			}
		case "data":
			if seen.First(6) {
				b.Data = v.String()
			}
		}
		return true
	})
}

func (e *event) decodeDelta(v gjson.Result) {
	d := &e.Delta
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			if seen.First(0) {
				d.Type = v.String()
			}
		case "text":
			if seen.First(1) {
				d.Text = v.String()
			}
		case "thinking":
			if seen.First(2) {
				d.Thinking = v.String()
			}
		case "signature":
			if seen.First(3) {
				d.Signature = v.String()
			}
		case "partial_json":
			if seen.First(4) {
				d.PartialJSON = v.String()
			}
		case "stop_reason":
			if seen.First(5) {
				d.StopReason = v.String()
			}
		}
		return true
	})
}

func (u *usage) decode(v gjson.Result) {
	var seen sse.Fields
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			if seen.First(0) {
				u.InputTokens = v.Int()
			}
		case "output_tokens":
			if seen.First(1) {
				u.OutputTokens = v.Int()
			}
		case "cache_read_input_tokens":
			if seen.First(2) {
				u.CacheReadInputTokens = v.Int()
			}
		case "cache_creation_input_tokens":
			if seen.First(3) {
				u.CacheCreationInputTokens = v.Int()
			}
		}
		return true
	})
}
