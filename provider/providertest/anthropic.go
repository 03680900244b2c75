package providertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode"
)

// anthropicWire speaks the Messages API.
type anthropicWire struct{}

func (anthropicWire) path() string            { return "/v1/messages" }
func (anthropicWire) requestIDHeader() string { return "request-id" }

// retry and noRetry are the x-should-retry headers Anthropic sends.
var (
	retry   = map[string]string{"x-should-retry": "true"}
	noRetry = map[string]string{"x-should-retry": "false"}
)

// condition renders c as the API words it.
func (anthropicWire) condition(c Condition) APIError {
	switch c {
	case RateLimit:
		return APIError{Status: 429, Type: "rate_limit_error", Header: retry,
			Message: "This request would exceed the rate limit for your organization (00000000-0000-0000-0000-000000000000) of 50,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}
	case Quota:
		return APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
			Message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}
	case Overloaded:
		return APIError{Status: 529, Type: "overloaded_error", Message: "Overloaded", Header: retry}
	case ServerError:
		return APIError{Status: 500, Type: "api_error", Message: "Internal server error", Header: retry}
	case Unavailable:
		return APIError{Status: 503, Type: "api_error", Message: "Service Unavailable", Header: retry}
	case ContextExceeded:
		return APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
			Message: "prompt is too long: 210000 tokens > 200000 maximum"}
	case ContextLimit:
		return APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
			Message: "input length and `max_tokens` exceed context limit: 190000 + 64000 > 200000, decrease input length or `max_tokens` and try again"}
	case ContentFilter:
		return APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
			Message: "Output blocked by content filtering policy"}
	case PrefillRefused:
		return APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
			Message: "This model does not support assistant message prefill. The conversation must end with a user message."}
	case BadKey:
		return APIError{Status: 401, Type: "authentication_error", Message: "invalid x-api-key", Header: noRetry}
	case ModelNotFound:
		return APIError{Status: 404, Type: "not_found_error", Message: "model: claude-nonexistent", Header: noRetry}
	case ImageTooLarge:
		return APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
			Message: "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: 6418576 bytes > 5242880 bytes"}
	}
	panic(fmt.Sprintf("providertest: unknown condition %d", c))
}

func (anthropicWire) notFound(path string) APIError {
	return APIError{Status: http.StatusNotFound, Type: "not_found_error", Message: "Not Found: " + path}
}

// errorBody is {"type":"error","error":{"type","message"},"request_id"}.
func (anthropicWire) errorBody(e APIError, n int) []byte {
	return []byte(mustJSON(map[string]any{
		"type":       "error",
		"error":      e.object(map[string]any{"type": e.Type, "message": e.Message}),
		"request_id": fmt.Sprintf("req_test_%04d", n),
	}))
}

func (anthropicWire) errorEvent(e APIError) string {
	return event("error", map[string]any{
		"type":  "error",
		"error": e.object(map[string]any{"type": e.Type, "message": e.Message}),
	})
}

func (anthropicWire) malformed() string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"unterminated\n\n"
}

// event frames one server-sent event.
func event(name string, data any) string {
	return "event: " + name + "\ndata: " + mustJSON(data) + "\n\n"
}

// frames renders a as the API streams it: message_start, a ping, one content
// block per kind (thinking with its signature_delta, each redacted_thinking,
// text, each tool_use), message_delta (with the stop sequence, if any),
// message_stop.
func (anthropicWire) frames(a Answer, n int) []frame {
	u := a.Usage
	fs := []frame{
		{data: event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": fmt.Sprintf("msg_test_%04d", n), "type": "message", "role": "assistant", "content": []any{},
			"model": a.model(), "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": u.Input, "output_tokens": 1,
				"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead},
		}})},
		{data: "event: ping\ndata: {\"type\": \"ping\"}\n\n"},
	}
	index := 0
	// block streams one content block: its start, its token deltas, then
	// deltas that carry no token (a signature), then its stop.
	block := func(start map[string]any, deltas []map[string]any, untokened ...map[string]any) {
		fs = append(fs, frame{data: event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start})})
		delta := func(d map[string]any, token bool) {
			fs = append(fs, frame{token: token, data: event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d})})
		}
		for _, d := range deltas {
			delta(d, true)
		}
		for _, d := range untokened {
			delta(d, false)
		}
		fs = append(fs, frame{data: event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})})
		index++
	}
	if len(a.Thinking) > 0 {
		var sig []map[string]any
		if a.Signature != "" {
			sig = append(sig, map[string]any{"type": "signature_delta", "signature": a.Signature})
		}
		block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, deltas(a.Thinking, "thinking_delta", "thinking"), sig...)
	}
	for _, data := range a.Redacted {
		block(map[string]any{"type": "redacted_thinking", "data": data}, nil)
	}
	if len(a.Text) > 0 {
		block(map[string]any{"type": "text", "text": ""}, deltas(a.Text, "text_delta", "text"))
	}
	for _, t := range a.Tools {
		block(map[string]any{"type": "tool_use", "id": t.ID, "name": t.Name, "input": map[string]any{}}, deltas(t.Args, "input_json_delta", "partial_json"))
	}
	return append(fs,
		frame{tail: true, data: event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": a.anthropicStop(), "stop_sequence": orNil(a.StopSequence)},
			"usage": map[string]any{"output_tokens": u.Output}})},
		frame{tail: true, end: true, data: event("message_stop", map[string]any{"type": "message_stop"})},
	)
}

// anthropicStop is the stop_reason that ends a: Limit's max_tokens, Stop,
// stop_sequence with a StopSequence, tool_use with Tools, or end_turn.
func (a Answer) anthropicStop() string {
	switch {
	case a.Limit:
		return "max_tokens"
	case a.Stop != "":
		return a.Stop
	case a.StopSequence != "":
		return "stop_sequence"
	case len(a.Tools) > 0:
		return "tool_use"
	}
	return "end_turn"
}

// deltas are the content_block_delta payloads of pieces.
func deltas(pieces []string, typ, field string) []map[string]any {
	out := make([]map[string]any, len(pieces))
	for i, p := range pieces {
		out[i] = map[string]any{"type": typ, field: p}
	}
	return out
}

// refuse answers a final assistant message whose text ends in whitespace as
// the API does: 400 "final assistant content cannot end with trailing
// whitespace".
func (anthropicWire) refuse(body []byte) *APIError {
	if e := foreignThinking(body); e != nil {
		return e
	}
	text, ok := finalAssistant(body)
	if !ok || text == "" || strings.TrimRightFunc(text, unicode.IsSpace) == text {
		return nil
	}
	return &APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
		Message: "messages: final assistant content cannot end with trailing whitespace"}
}

// signedPrefix starts the signatures SignatureFor makes.
const signedPrefix = "sig-for:"

// SignatureFor is a thinking block's signature as the fault server checks
// it: made by model, valid for model only. A request that sends a thinking
// block signed so for another model is refused as the API refuses a
// signature it cannot verify (400 invalid_request_error); signatures of
// any other form are not checked.
func SignatureFor(model string) string { return signedPrefix + model }

// foreignThinking refuses a request that sends a thinking block
// SignatureFor signed for a model other than the request's.
func foreignThinking(body []byte) *APIError {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Content []struct {
				Type      string `json:"type"`
				Signature string `json:"signature"`
			} `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	for i, m := range req.Messages {
		for j, b := range m.Content {
			signer, ok := strings.CutPrefix(b.Signature, signedPrefix)
			if b.Type == "thinking" && ok && signer != req.Model {
				return &APIError{Status: 400, Type: "invalid_request_error", Header: noRetry,
					Message: fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)}
			}
		}
	}
	return nil
}

// answer is a: the API continues a final assistant message (a prefill).
func (anthropicWire) answer(a Answer, _ []byte) Answer { return a }
