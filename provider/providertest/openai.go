package providertest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// openaiWire speaks Chat Completions.
type openaiWire struct{}

func (openaiWire) path() string            { return "/v1/chat/completions" }
func (openaiWire) requestIDHeader() string { return "x-request-id" }

// condition renders c as OpenAI (or, where OpenAI has no such error, the
// compatible server that has it) words it.
func (openaiWire) condition(c Condition) APIError {
	switch c {
	case RateLimit:
		return APIError{Status: 429, Type: "tokens", Code: "rate_limit_exceeded",
			Message: "Rate limit reached for gpt-4o in organization org-test on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s. Visit https://platform.openai.com/account/rate-limits to learn more."}
	case Quota:
		return APIError{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota",
			Message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}
	case Overloaded:
		return APIError{Status: 503, Type: "server_error",
			Message: "That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists."}
	case ServerError:
		return APIError{Status: 500, Type: "server_error",
			Message: "The server had an error while processing your request. Sorry about that!"}
	case Unavailable:
		// llama.cpp while it loads its model.
		return APIError{Status: 503, Type: "unavailable_error", Code: "503", Message: "Loading model"}
	case ContextExceeded:
		return APIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "messages",
			Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages."}
	case ContextLimit:
		return APIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "messages",
			Message: "This model's maximum context length is 128000 tokens. However, you requested 132000 tokens (124000 in the messages, 8000 in the completion). Please reduce the length of the messages or completion."}
	case ContentFilter:
		// Azure OpenAI's prompt filter.
		return APIError{Status: 400, Code: "content_filter", Param: "prompt",
			Message: "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766"}
	case PrefillRefused:
		// A gateway relaying Anthropic's refusal.
		return APIError{Status: 400, Type: "invalid_request_error",
			Message: "This model does not support assistant message prefill. The conversation must end with a user message."}
	case BadKey:
		return APIError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "Incorrect API key provided: sk-test-*******-123. You can find your API key at https://platform.openai.com/account/api-keys."}
	case ModelNotFound:
		return APIError{Status: 404, Type: "invalid_request_error", Code: "model_not_found",
			Message: "The model `gpt-nonexistent` does not exist or you do not have access to it."}
	case ImageTooLarge:
		return APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_image_format",
			Message: "You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp']."}
	}
	panic(fmt.Sprintf("providertest: unknown condition %d", c))
}

func (openaiWire) notFound(path string) APIError {
	return APIError{Status: http.StatusNotFound, Type: "invalid_request_error",
		Message: "Invalid URL (POST " + path + ")"}
}

// openaiObject is the error object {"message","type","param","code"}.
func (e APIError) openaiObject() map[string]any {
	return e.object(map[string]any{"message": e.Message, "type": orNil(e.Type), "param": orNil(e.Param), "code": orNil(e.Code)})
}

func (openaiWire) errorBody(e APIError, _ int) []byte {
	return []byte(mustJSON(map[string]any{"error": e.openaiObject()}))
}

func (openaiWire) errorEvent(e APIError) string {
	return "data: " + mustJSON(map[string]any{"error": e.openaiObject()}) + "\n\n"
}

func (openaiWire) malformed() string {
	return "data: {\"id\":\"chatcmpl-test\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"unterminated\n\n"
}

// frames renders a as the API streams it: a role chunk, the deltas, the
// finish chunk, the usage chunk (stream_options.include_usage) and [DONE].
func (openaiWire) frames(a Answer, n int) []frame { return openaiFrames(a, n, nil) }

// VLLMStopReason streams a on the Chat Completions wire (a server of
// NewOpenAI) as vLLM does: its finish chunk's choice carries, beside
// finish_reason, vLLM's stop_reason — the stop string that ended the
// answer (a string), the id of the stop token that did (an int), or null
// for a natural end (nil). OpenAI's own API sends no stop_reason. The
// stream is the reply's SSE, sent as it is, its chunks' id that of a first
// request (chatcmpl-test0001): Reply's Fault and delays do not apply to it.
func VLLMStopReason(a Answer, stopReason any) Reply {
	var b strings.Builder
	for _, f := range openaiFrames(a, 1, map[string]any{"stop_reason": stopReason}) {
		b.WriteString(f.data)
	}
	return Reply{SSE: b.String()}
}

// openaiFrames renders a for request n; finishExtra, when not nil, are
// more fields of the finish chunk's choice.
func openaiFrames(a Answer, n int, finishExtra map[string]any) []frame {
	id := fmt.Sprintf("chatcmpl-test%04d", n)
	chunk := func(choices []any, usage any) string {
		return "data: " + mustJSON(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": a.model(),
			"system_fingerprint": "fp_test", "choices": choices, "usage": usage,
		}) + "\n\n"
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}}
	}
	fs := []frame{{data: chunk(delta(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil), nil)}}
	for _, s := range a.Thinking {
		fs = append(fs, frame{token: true, data: chunk(delta(map[string]any{"reasoning_content": s}, nil), nil)})
	}
	for _, s := range a.Text {
		fs = append(fs, frame{token: true, data: chunk(delta(map[string]any{"content": s}, nil), nil)})
	}
	for i, t := range a.Tools {
		start := map[string]any{"index": i, "id": t.ID, "type": "function", "function": map[string]any{"name": t.Name, "arguments": ""}}
		fs = append(fs, frame{token: true, data: chunk(delta(map[string]any{"tool_calls": []any{start}}, nil), nil)})
		for _, arg := range t.Args {
			piece := map[string]any{"index": i, "function": map[string]any{"arguments": arg}}
			fs = append(fs, frame{token: true, data: chunk(delta(map[string]any{"tool_calls": []any{piece}}, nil), nil)})
		}
	}
	stop := a.Stop
	if a.Limit {
		stop = "length"
	}
	if stop == "" {
		stop = "stop"
		if len(a.Tools) > 0 {
			stop = "tool_calls"
		}
	}
	u := a.Usage
	usage := map[string]any{
		"prompt_tokens": u.Input + u.CacheRead, "completion_tokens": u.Output, "total_tokens": u.Input + u.CacheRead + u.Output,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CacheRead, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}
	finish := delta(map[string]any{}, stop)
	maps.Copy(finish[0].(map[string]any), finishExtra)
	return append(fs,
		frame{tail: true, data: chunk(finish, nil)},
		frame{tail: true, data: chunk([]any{}, usage)},
		frame{tail: true, end: true, data: "data: [DONE]\n\n"},
	)
}

func (openaiWire) refuse([]byte) *APIError { return nil }

// answer models what a Chat Completions server does with a final assistant
// message: it applies the chat template with a generation prompt and the
// model answers afresh — its reply says again what that message already
// said, then goes on — unless the body asks, as vLLM's
// continue_final_message does, that the message be continued; then the
// reply is a, the continuation.
func (openaiWire) answer(a Answer, body []byte) Answer {
	said, ok := finalAssistant(body)
	if !ok || said == "" {
		return a
	}
	var opts struct {
		Continue bool `json:"continue_final_message"`
	}
	if json.Unmarshal(body, &opts) == nil && opts.Continue {
		return a
	}
	a.Text = append([]string{said}, slices.Clone(a.Text)...)
	return a
}
