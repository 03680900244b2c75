package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
)

// used is what the reader takes from an event of its type, as a test
// compares it: the fields the reader reads for that type, and nothing else.
type used struct {
	Outcome string // "event", "malformed" (not JSON)
	Type    string
	Index   int64
	Strings []string
	Usage   usage
}

// use projects e as the reader reads it.
func use(e *event) used {
	u := used{Outcome: "event", Type: e.Type}
	switch e.Type {
	case "message_start":
		u.Strings, u.Usage = []string{e.Message.ID, e.Message.Model}, e.Message.Usage
	case "content_block_start":
		b := e.ContentBlock
		u.Index, u.Strings = e.Index, []string{b.Type}
		switch b.Type {
		case "tool_use":
			u.Strings = append(u.Strings, b.ID, b.Name)
		case "text":
			u.Strings = append(u.Strings, b.Text)
		case "thinking":
			u.Strings = append(u.Strings, b.Thinking, b.Signature)
		case "redacted_thinking":
			u.Strings = append(u.Strings, b.Data)
		}
	case "content_block_delta":
		d := e.Delta
		u.Index, u.Strings = e.Index, []string{d.Type}
		switch d.Type {
		case "text_delta":
			u.Strings = append(u.Strings, d.Text)
		case "thinking_delta":
			u.Strings = append(u.Strings, d.Thinking)
		case "signature_delta":
			u.Strings = append(u.Strings, d.Signature)
		case "input_json_delta":
			u.Strings = append(u.Strings, d.PartialJSON)
		}
	case "content_block_stop":
		u.Index = e.Index
	case "message_delta":
		u.Strings, u.Usage = []string{e.Delta.StopReason, e.Delta.StopSequence}, e.Usage
	}
	return u
}

// leanUsed decodes data with event.decode into e.
func leanUsed(e *event, data []byte) used {
	if err := e.decode(data); err != nil {
		return failed(err)
	}
	return use(e)
}

// sdkUsed decodes data as the SDK's stream did: encoding/json into its
// union (apijson).
func sdkUsed(data []byte) used {
	var u sdk.MessageStreamEventUnion
	if err := json.Unmarshal(data, &u); err != nil {
		return failed(err)
	}
	e := event{Type: u.Type, Index: u.Index}
	e.Message.ID, e.Message.Model = u.Message.ID, string(u.Message.Model)
	mu := u.Message.Usage
	e.Message.Usage = usage{mu.InputTokens, mu.OutputTokens, mu.CacheReadInputTokens, mu.CacheCreationInputTokens}
	b := u.ContentBlock
	e.ContentBlock.Type, e.ContentBlock.ID, e.ContentBlock.Name, e.ContentBlock.Text = b.Type, b.ID, b.Name, b.Text
	e.ContentBlock.Thinking, e.ContentBlock.Signature, e.ContentBlock.Data = b.Thinking, b.Signature, b.Data
	d := u.Delta
	e.Delta.Type, e.Delta.Text, e.Delta.Thinking, e.Delta.Signature = d.Type, d.Text, d.Thinking, d.Signature
	e.Delta.PartialJSON, e.Delta.StopReason, e.Delta.StopSequence = d.PartialJSON, string(d.StopReason), d.StopSequence
	e.Usage = usage{u.Usage.InputTokens, u.Usage.OutputTokens, u.Usage.CacheReadInputTokens, u.Usage.CacheCreationInputTokens}
	return use(&e)
}

func failed(err error) used {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return used{Outcome: "malformed"}
	}
	return used{Outcome: fmt.Sprintf("%T", err)}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       used
	}{
		{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":1000,"output_tokens":1,"service_tier":"standard"}}}`,
			used{Outcome: "event", Type: "message_start", Strings: []string{"msg_1", "claude-sonnet-4-5"}, Usage: usage{25, 1, 1000, 3}}},
		{"message_start without usage", `{"type":"message_start","message":{"id":"msg_1","model":"m","usage":null}}`,
			used{Outcome: "event", Type: "message_start", Strings: []string{"msg_1", "m"}}},
		{"text block", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			used{Outcome: "event", Type: "content_block_start", Strings: []string{"text", ""}}},
		{"tool_use block", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`,
			used{Outcome: "event", Type: "content_block_start", Index: 2, Strings: []string{"tool_use", "toolu_1", "get_weather"}}},
		{"thinking block", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			used{Outcome: "event", Type: "content_block_start", Strings: []string{"thinking", "", ""}}},
		{"redacted_thinking block", `{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}`,
			used{Outcome: "event", Type: "content_block_start", Index: 1, Strings: []string{"redacted_thinking", "EmwKAhgB"}}},
		{"text_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel\nlo \u00e9"}}`,
			used{Outcome: "event", Type: "content_block_delta", Strings: []string{"text_delta", "Hel\nlo é"}}},
		{"thinking_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}`,
			used{Outcome: "event", Type: "content_block_delta", Strings: []string{"thinking_delta", "Let me"}}},
		{"signature_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
			used{Outcome: "event", Type: "content_block_delta", Strings: []string{"signature_delta", "EqQB"}}},
		{"input_json_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San"}}`,
			used{Outcome: "event", Type: "content_block_delta", Index: 1, Strings: []string{"input_json_delta", `{"location": "San`}}},
		{"content_block_stop", `{"type":"content_block_stop","index":3}`, used{Outcome: "event", Type: "content_block_stop", Index: 3}},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`,
			used{Outcome: "event", Type: "message_delta", Strings: []string{"end_turn", ""}, Usage: usage{OutputTokens: 15}}},
		{"message_delta with every count", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"input_tokens":10,"output_tokens":89,"cache_read_input_tokens":2,"cache_creation_input_tokens":1}}`,
			used{Outcome: "event", Type: "message_delta", Strings: []string{"tool_use", ""}, Usage: usage{10, 89, 2, 1}}},
		{"message_stop", `{"type":"message_stop"}`, used{Outcome: "event", Type: "message_stop"}},
		{"ping", `{"type": "ping"}`, used{Outcome: "event", Type: "ping"}},
		{"wrong types take the SDK's conversions", `{"type":"content_block_delta","index":"1","delta":{"type":"text_delta","text":5}}`,
			used{Outcome: "event", Type: "content_block_delta", Index: 1, Strings: []string{"text_delta", "5"}}},
		{"message_delta on a stop sequence", `{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"\n\nHuman:"},"usage":{"output_tokens":12}}`,
			used{Outcome: "event", Type: "message_delta", Strings: []string{"stop_sequence", "\n\nHuman:"}, Usage: usage{OutputTokens: 12}}},
		{"message_delta with a number for a stop sequence", `{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":42}}`,
			used{Outcome: "event", Type: "message_delta", Strings: []string{"stop_sequence", "42"}}},
		{"wrong containers are empty", `{"type":"message_delta","delta":"x","usage":[1]}`,
			used{Outcome: "event", Type: "message_delta", Strings: []string{"", ""}}},
		{"not an object", `[{"type":"message_stop"}]`, used{Outcome: "event"}},
		{"not JSON", `not json`, used{Outcome: "malformed"}},
		{"cut", `{"type":"content_block_delta","index":0,`, used{Outcome: "malformed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e event
			if got := leanUsed(&e, []byte(tc.data)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n got %+v\nwant %+v", got, tc.want)
			}
			if sdkGot := sdkUsed([]byte(tc.data)); !reflect.DeepEqual(sdkGot, tc.want) {
				t.Errorf("the SDK's decoding differs\n got %+v\nwant %+v", sdkGot, tc.want)
			}
		})
	}
}

// FuzzDecodeParity decodes arbitrary event data with event.decode, into a
// fresh event and into one reused after another decode, and with the SDK's
// decoding: what the reader takes from it must be the same.
func FuzzDecodeParity(f *testing.F) {
	const reused = `{"type":"content_block_start","index":7,"message":{"id":"i","model":"m","usage":{"input_tokens":1}},"content_block":{"type":"tool_use","id":"a","name":"b","text":"c","thinking":"d","signature":"e","data":"f"},"delta":{"type":"text_delta","text":"g","stop_reason":"h","stop_sequence":"j"},"usage":{"output_tokens":2}}`
	for _, s := range []string{
		reused,
		`{"type":"message_start","message":{"id":1,"model":"m","usage":{"input_tokens":"5","output_tokens":null}}}`,
		`{"type":"message_delta","delta":{"stop_reason":5},"usage":{"output_tokens":1.5}}`,
		`{"type":"content_block_delta","index":0,"delta":null}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":7}}`,
		`{"type":"content_block_delta","type":"message_stop","index":1,"index":2}`,
		`{"type":5}`, `[]`, `"x"`, `5`, `null`, `true`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":["a"],"signature":{"s":1}}}`,
		`{"type":"message_start","message":[],"usage":{"input_tokens":3}}`,
		`{"type":"content_block_stop","index":1e3}`,
		`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":-1}}`,
		`{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":null}}`,
		`{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":["x"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fresh, again event
		want := sdkUsed(data)
		if got := leanUsed(&fresh, data); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n got %+v\nwant %+v (the SDK's)", got, want)
		}
		leanUsed(&again, []byte(reused))
		if got := leanUsed(&again, data); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded into a reused event\n got %+v\nwant %+v (the SDK's)", got, want)
		}
	})
}
