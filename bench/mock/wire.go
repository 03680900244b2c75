package mock

import (
	"encoding/json"
	"fmt"
)

// Token is the text of every token the server streams.
const Token = " token"

// InputTokens is the prompt size every answer reports.
const InputTokens = 8

// IDs the frames carry; providertest numbers them per request instead.
const (
	openaiID    = "chatcmpl-loadbench"
	anthropicID = "msg_loadbench"
)

// rendered is one answer on one wire: the frames before the first token,
// the frame of a token (the same for each), and the frames after the last.
type rendered struct {
	head  [][]byte
	token []byte
	tail  [][]byte
}

// wire is one provider's protocol.
type wire struct {
	name            string
	path            string
	requestIDHeader string
	// render frames an answer of n tokens from model.
	render func(model string, n int) rendered
	// errorBody is a 400 invalid_request_error saying msg.
	errorBody func(msg string) []byte
}

var (
	openaiWire = wire{name: "openai", path: "/v1/chat/completions", requestIDHeader: "x-request-id",
		render: renderOpenAI, errorBody: openaiError}
	anthropicWire = wire{name: "anthropic", path: "/v1/messages", requestIDHeader: "request-id",
		render: renderAnthropic, errorBody: anthropicError}
)

// mustJSON renders v as providertest does (encoding/json, keys sorted), so
// that the frames are the same bytes.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mock: %v", err))
	}
	return string(b)
}

// renderOpenAI frames the answer as Chat Completions streams it: a role
// chunk, the content deltas, the finish chunk, the usage chunk
// (stream_options.include_usage) and [DONE].
func renderOpenAI(model string, n int) rendered {
	chunk := func(choices []any, usage any) []byte {
		return []byte("data: " + mustJSON(map[string]any{
			"id": openaiID, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"system_fingerprint": "fp_test", "choices": choices, "usage": usage,
		}) + "\n\n")
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}}
	}
	usage := map[string]any{
		"prompt_tokens": InputTokens, "completion_tokens": n, "total_tokens": InputTokens + n,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}
	return rendered{
		head:  [][]byte{chunk(delta(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil), nil)},
		token: chunk(delta(map[string]any{"content": Token}, nil), nil),
		tail: [][]byte{
			chunk(delta(map[string]any{}, "stop"), nil),
			chunk([]any{}, usage),
			[]byte("data: [DONE]\n\n"),
		},
	}
}

func openaiError(msg string) []byte {
	return []byte(mustJSON(map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}}))
}

// event frames one server-sent event of Anthropic's wire.
func event(name string, data any) []byte {
	return []byte("event: " + name + "\ndata: " + mustJSON(data) + "\n\n")
}

// renderAnthropic frames the answer as the Messages API streams it:
// message_start, a ping, one text block (start, text_delta per token,
// stop), message_delta with the stop reason and usage, message_stop.
func renderAnthropic(model string, n int) rendered {
	start := map[string]any{"type": "message_start", "message": map[string]any{
		"id": anthropicID, "type": "message", "role": "assistant", "content": []any{},
		"model": model, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": InputTokens, "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
	}}
	return rendered{
		head: [][]byte{
			event("message_start", start),
			[]byte("event: ping\ndata: {\"type\": \"ping\"}\n\n"),
			event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]any{"type": "text", "text": ""}}),
		},
		token: event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": Token}}),
		tail: [][]byte{
			event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}),
			event("message_delta", map[string]any{"type": "message_delta",
				"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
				"usage": map[string]any{"output_tokens": n}}),
			event("message_stop", map[string]any{"type": "message_stop"}),
		},
	}
}

func anthropicError(msg string) []byte {
	return []byte(mustJSON(map[string]any{"type": "error",
		"error": map[string]any{"type": "invalid_request_error", "message": msg}, "request_id": "req_loadbench"}))
}
