package providertest

import (
	"encoding/json"
	"fmt"
)

// wire renders one provider's protocol.
type wire interface {
	// path is the endpoint the provider's SDK posts to.
	path() string
	// requestIDHeader names the request id header.
	requestIDHeader() string
	// condition is the provider's error for c.
	condition(c Condition) APIError
	// notFound is its answer to an unknown path.
	notFound(path string) APIError
	// errorBody renders an error response's body for request n.
	errorBody(e APIError, n int) []byte
	// errorEvent renders an error inside a stream.
	errorEvent(e APIError) string
	// frames renders a streamed answer for request n.
	frames(a Answer, n int) []frame
	// malformed is a stream event whose data is not JSON.
	malformed() string
	// refuse is the error the API answers a request body with whatever
	// the script says (a conversation it does not accept), or nil.
	refuse(body []byte) *APIError
	// answer is a as the model answers the request body: on OpenAI's wire
	// a final assistant message is answered afresh unless the body asks
	// that it be continued.
	answer(a Answer, body []byte) Answer
	// prompt is the body's prompt as the provider's prompt cache sees it.
	prompt(body []byte) []PromptBlock
	// countPrompt looks the body's prompt up in c and writes it there, as
	// the provider's cache would: the usage's Input, CacheRead and
	// CacheWrite.
	countPrompt(c *promptCache, body []byte) Usage
	// rejectMedia is the provider's error for the first media block of
	// the body rule picks, or nil.
	rejectMedia(body []byte, rule MediaRule) *APIError
}

// finalAssistant is the text of the request's last message when it is an
// assistant message (content as a string, or the text of its last part or
// block when that is text), and whether it is one.
func finalAssistant(body []byte) (string, bool) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		return "", false
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "assistant" {
		return "", false
	}
	var text string
	if json.Unmarshal(last.Content, &text) == nil {
		return text, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(last.Content, &parts) == nil && len(parts) > 0 && parts[len(parts)-1].Type == "text" {
		return parts[len(parts)-1].Text, true
	}
	return "", true
}

// frame is one server-sent event.
type frame struct {
	data  string // the event, framed
	token bool   // it carries a token
	tail  bool   // it comes after the tokens (stop reason, usage)
	end   bool   // it is the terminator (message_stop, [DONE])
}

// mustJSON renders v, which is always representable.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("providertest: %v", err))
	}
	return string(b)
}

// model is the answer's model name.
func (a Answer) model() string {
	if a.Model == "" {
		return "test-model"
	}
	return a.Model
}

// object is an error object with its extra fields.
func (e APIError) object(fields map[string]any) map[string]any {
	for k, v := range e.Extra {
		fields[k] = v
	}
	return fields
}

// orNil is s, or JSON null when s is empty.
func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}
