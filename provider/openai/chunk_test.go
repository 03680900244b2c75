package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/completiond/completiond/provider/sse"
)

// decoded is what the reader takes from one event, as a test compares it.
type decoded struct {
	Outcome string // "chunk", "done", "error event", "malformed" (not JSON), "not an object"
	ID      string
	Model   string
	Choices []decodedChoice
	Usage   *usage
}

type decodedChoice struct {
	Index                                           int64
	Content, Refusal, Reasoning, Finish, StopReason string
	Tools                                           []toolCallDelta
}

// leanDecoded decodes data with chunk.decode into c, as Stream does.
func leanDecoded(c *chunk, data []byte) decoded {
	if bytes.HasPrefix(data, done) {
		return decoded{Outcome: "done"}
	}
	if d, ok := outcome(c.decode(data)); !ok {
		return d
	}
	d := decoded{Outcome: "chunk", ID: c.ID, Model: c.Model}
	for _, ch := range c.Choices {
		d.Choices = append(d.Choices, decodedChoice{Index: ch.Index, Content: ch.Delta.Content, Refusal: ch.Delta.Refusal,
			Reasoning: reasoning(&ch.Delta), Finish: ch.FinishReason, StopReason: ch.StopReason, Tools: append([]toolCallDelta(nil), ch.Delta.ToolCalls...)})
	}
	if c.HasUsage {
		u := c.Usage
		d.Usage = &u
	}
	return d
}

// sdkDecoded decodes data as the SDK's stream did before: [DONE], then an
// "error" key anywhere at the top, then encoding/json into the SDK's chunk
// (apijson), the reasoning from the delta's extra fields, and vLLM's
// stop_reason from the choice's, as a string.
func sdkDecoded(data []byte) decoded {
	if bytes.HasPrefix(data, done) {
		return decoded{Outcome: "done"}
	}
	if gjson.GetBytes(data, "error").Exists() {
		return decoded{Outcome: "error event"}
	}
	var c sdk.ChatCompletionChunk
	if d, ok := outcome(json.Unmarshal(data, &c)); !ok {
		return d
	}
	d := decoded{Outcome: "chunk", ID: c.ID, Model: c.Model}
	for _, ch := range c.Choices {
		dc := decodedChoice{Index: ch.Index, Content: ch.Delta.Content, Refusal: ch.Delta.Refusal, Finish: ch.FinishReason}
		for _, k := range []string{"reasoning_content", "reasoning"} {
			var s string
			if f, ok := ch.Delta.JSON.ExtraFields[k]; ok && json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				dc.Reasoning = s
				break
			}
		}
		if f, ok := ch.JSON.ExtraFields["stop_reason"]; ok {
			_ = json.Unmarshal([]byte(f.Raw()), &dc.StopReason) // a number or null leaves it empty
		}
		for _, tc := range ch.Delta.ToolCalls {
			dc.Tools = append(dc.Tools, toolCallDelta{Index: tc.Index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		d.Choices = append(d.Choices, dc)
	}
	if c.JSON.Usage.Valid() {
		u := c.Usage
		d.Usage = &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
			CachedTokens: u.PromptTokensDetails.CachedTokens, CacheWriteTokens: u.PromptTokensDetails.CacheWriteTokens}
	}
	return d
}

// outcome classifies a decoding error; ok when there was none.
func outcome(err error) (decoded, bool) {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var ev *sse.ErrorEvent
	switch {
	case err == nil:
		return decoded{}, true
	case errors.As(err, &ev):
		return decoded{Outcome: "error event"}, false
	case errors.As(err, &syntax):
		return decoded{Outcome: "malformed"}, false
	case errors.As(err, &typ):
		return decoded{Outcome: "not an object"}, false
	}
	return decoded{Outcome: fmt.Sprintf("%T", err)}, false
}

func TestDecode(t *testing.T) {
	tool := func(i int64, id, name, args string) []toolCallDelta {
		return []toolCallDelta{{Index: i, ID: id, Name: name, Arguments: args}}
	}
	for _, tc := range []struct {
		name, data string
		want       decoded
	}{
		{"role chunk", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
			decoded{Outcome: "chunk", ID: "chatcmpl-1", Model: "gpt-4o", Choices: []decodedChoice{{}}}},
		{"content", `{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hel\nlo \u00e9"},"finish_reason":null}]}`,
			decoded{Outcome: "chunk", ID: "c", Model: "m", Choices: []decodedChoice{{Content: "Hel\nlo é"}}}},
		{"refusal", `{"choices":[{"index":0,"delta":{"refusal":"I can't"}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Refusal: "I can't"}}}},
		{"finish_reason and no usage", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Finish: "stop"}}}},
		{"vLLM's stop_reason, a stop string", `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":"</s>\n\u00e9"}]}`,
			decoded{Outcome: "chunk", ID: "c", Model: "m", Choices: []decodedChoice{{Finish: "stop", StopReason: "</s>\né"}}}},
		{"vLLM's stop_reason, a stop token id", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":128009}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Finish: "stop"}}}},
		{"vLLM's stop_reason, null", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":null}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Finish: "stop"}}}},
		{"stop_reason neither a string nor a number", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":["x"]},{"index":1,"stop_reason":true}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Finish: "stop"}, {Index: 1}}}},
		{"stop_reason in the delta is not the choice's", `{"choices":[{"index":0,"delta":{"stop_reason":"x"},"finish_reason":"stop"}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Finish: "stop"}}}},
		{"a lone escaped surrogate is encoding/json's U+FFFD", `{"choices":[{"index":0,"delta":{"reasoning":"\ud800\u00e9"},"finish_reason":"stop","stop_reason":"\udc00x"}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Reasoning: "\ufffdé", Finish: "stop", StopReason: "\ufffdx"}}}},
		{"usage with cache details", `{"choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"cache_write_tokens":50,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
			decoded{Outcome: "chunk", Usage: &usage{PromptTokens: 2006, CompletionTokens: 300, CachedTokens: 1920, CacheWriteTokens: 50}}},
		{"empty usage", `{"choices":[],"usage":{}}`, decoded{Outcome: "chunk", Usage: &usage{}}},
		{"usage null, details null", `{"usage":{"prompt_tokens":5,"prompt_tokens_details":null},"choices":null}`,
			decoded{Outcome: "chunk", Usage: &usage{PromptTokens: 5}}},
		{"tool call start", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"search","arguments":""}}]}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Tools: tool(0, "call_1", "search", "")}}}},
		{"tool call piece", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"q\":"}}]}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Tools: tool(1, "", "", `{"q":`)}}}},
		{"several tool calls in one chunk", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{}"}},{"index":1,"id":"b","function":{"name":"y","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Finish: "tool_calls", Tools: []toolCallDelta{{0, "a", "x", "{}"}, {1, "b", "y", "{}"}}}}}},
		{"reasoning_content", `{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let me think"}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Reasoning: "Let me think"}}}},
		{"reasoning", `{"choices":[{"index":0,"delta":{"reasoning":"Hmm"}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Reasoning: "Hmm"}}}},
		{"reasoning_content wins over reasoning", `{"choices":[{"index":0,"delta":{"reasoning":"b","reasoning_content":"a"}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Reasoning: "a"}}}},
		{"an empty or non-string reasoning_content gives way", `{"choices":[{"index":0,"delta":{"reasoning_content":5,"reasoning":"b"}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Reasoning: "b"}}}},
		{"a second choice", `{"choices":[{"index":1,"delta":{"content":"other"}}]}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Index: 1, Content: "other"}}}},
		{"wrong types take the SDK's conversions", `{"id":5,"model":["m"],"choices":[{"index":"0","delta":{"content":12.5,"tool_calls":[{"index":"2","id":3,"function":{"name":true,"arguments":{"a":1}}}]},"finish_reason":7}],"usage":{"prompt_tokens":"7","completion_tokens":true}}`,
			decoded{Outcome: "chunk", ID: "5", Model: `["m"]`, Choices: []decodedChoice{{Content: "12.5", Finish: "7", Tools: tool(2, "3", "true", `{"a":1}`)}},
				Usage: &usage{PromptTokens: 7, CompletionTokens: 1}}},
		{"wrong containers are empty", `{"choices":{"index":0},"usage":5}`, decoded{Outcome: "chunk"}},
		{"null", `null`, decoded{Outcome: "chunk"}},
		{"unknown fields", `{"x":{"choices":[1]},"choices":[{"index":0,"delta":{"content":"a","audio":{"id":"x"}},"logprobs":{"content":[]}}],"service_tier":"default"}`,
			decoded{Outcome: "chunk", Choices: []decodedChoice{{Content: "a"}}}},
		{"[DONE]", `[DONE]`, decoded{Outcome: "done"}},
		{"error", `{"error":{"message":"overloaded","type":"server_error"}}`, decoded{Outcome: "error event"}},
		{"error null is an error too, as the SDK had it", `{"error":null,"choices":[]}`, decoded{Outcome: "error event"}},
		{"a garbled error is an error", `{"error":{"message":"x"`, decoded{Outcome: "error event"}},
		{"not JSON", `not json`, decoded{Outcome: "malformed"}},
		{"cut", `{"choices":[{"delta":`, decoded{Outcome: "malformed"}},
		{"empty", ``, decoded{Outcome: "malformed"}},
		{"an array", `[{"choices":[]}]`, decoded{Outcome: "not an object"}},
		{"a string", `"chunk"`, decoded{Outcome: "not an object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c chunk
			if got := leanDecoded(&c, []byte(tc.data)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n got %+v\nwant %+v", got, tc.want)
			}
			if sdkGot := sdkDecoded([]byte(tc.data)); !reflect.DeepEqual(sdkGot, tc.want) {
				t.Errorf("the SDK's decoding differs\n got %+v\nwant %+v", sdkGot, tc.want)
			}
		})
	}
}

// reused is a chunk with more of everything than most: decoding it before
// another checks that nothing of it is left in the reused chunk.
const reused = `{"id":"old","model":"old","choices":[{"index":0,"delta":{"content":"x","refusal":"r","reasoning":"t","tool_calls":[{"index":4,"id":"i","function":{"name":"n","arguments":"a"}},{"index":5}]},"finish_reason":"stop","stop_reason":"old"},{"index":1}],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":3}}}`

// FuzzDecodeParity decodes arbitrary event data with chunk.decode, into a
// fresh chunk and into one reused after another decode, and with the SDK's
// decoding: what the reader takes from it must be the same.
func FuzzDecodeParity(f *testing.F) {
	for _, s := range []string{
		reused,
		`{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":-5}}`,
		`{"choices":[null,5,"x",[],{"index":0,"delta":null,"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[null,5,{"function":null},{"function":"f"}]}}]}`,
		`{"choices":[{"index":1e2,"delta":{"content":"x"}},{"index":0.5},{"index":-1}]}`,
		`{"usage":[],"choices":[{"index":0,"delta":"x"}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[{"index":0,"delta":{"content":"b"}}]}`,
		`{"usage":{"prompt_tokens":1},"usage":null}`,
		`{"err\u006fr":1}`,
		`[{"error":1}]`,
		`{"x":{"error":1}}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"","reasoning":"r","reasoning":5}}]}`,
		`{"choices":[{"index":true,"delta":{"content":"\ud83d\ude00 \u0000"}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning":"\ud800\u00e9 \\ud800 \ud83d\ude00"},"finish_reason":"stop","stop_reason":"###","stop_reason":5}]}`,
		`{"choices":[{"index":0,"finish_reason":"stop","stop_reason":128009},{"index":0,"stop_reason":null},{"stop_reason":"\ud800\u00e9"}]}`,
		`{"choices":[{"index":0,"finish_reason":"stop","stop_reason":{"s":"x"}},{"index":0,"stop_reason":"a\"b"}]}`,
		`{"choices":[{"index":"1","delta":{}}]} `,
		"[DONE] trailing",
		`{"error"`,
		`{"choices":[{"index":0,"delta":{"content":"a"}}]`,
		`123`, `true`, `"s"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fresh, again chunk
		want := sdkDecoded(data)
		if got := leanDecoded(&fresh, data); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n got %+v\nwant %+v (the SDK's)", got, want)
		}
		leanDecoded(&again, []byte(reused))
		if got := leanDecoded(&again, data); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded into a reused chunk\n got %+v\nwant %+v (the SDK's)", got, want)
		}
	})
}
