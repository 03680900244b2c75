package providertest

import (
	"math"
	"strconv"
	"time"
)

// Condition is an upstream failure, which the server renders in the words,
// status and headers of the provider whose wire it speaks.
type Condition int

const (
	// RateLimit is a 429 rate limit (Anthropic rate_limit_error, OpenAI rate_limit_exceeded).
	RateLimit Condition = iota + 1
	// Quota is an exhausted quota (OpenAI 429 insufficient_quota; Anthropic's
	// 400 "Your credit balance is too low …").
	Quota
	// Overloaded is Anthropic's 529 overloaded_error, OpenAI's 503 "… overloaded …".
	Overloaded
	// ServerError is a 500.
	ServerError
	// Unavailable is a 503 that is not an overload (a proxy's, a model loading).
	Unavailable
	// ContextExceeded is a prompt over the context window.
	ContextExceeded
	// ContextLimit is input plus max_tokens over the context window.
	ContextLimit
	// ContentFilter is a content-policy refusal.
	ContentFilter
	// PrefillRefused is a model refusing an assistant prefill.
	PrefillRefused
	// BadKey is a 401.
	BadKey
	// ModelNotFound is a 404 for the model.
	ModelNotFound
	// ImageTooLarge is an image the upstream rejects.
	ImageTooLarge
)

// APIError is an error exactly as the server renders it in the provider's
// envelope.
type APIError struct {
	// Status is the HTTP status of an error response.
	Status int
	// Type, Code, Message and Param are the error object's fields (Anthropic
	// has no code or param).
	Type, Code, Message, Param string
	// Extra are more fields of the error object (llama.cpp's n_prompt_tokens, n_ctx).
	Extra map[string]any
	// Header holds headers that come with the error (x-should-retry).
	Header map[string]string
}

// Fault breaks a reply.
type Fault int

const (
	// NoFault answers normally.
	NoFault Fault = iota
	// ResetBeforeHeaders reads the request and resets the TCP connection.
	ResetBeforeHeaders
	// HangBeforeHeaders sends nothing until the client goes away.
	HangBeforeHeaders
	// Cut ends the body cleanly after Reply.After tokens, without a finish.
	Cut
	// ResetMidStream resets the TCP connection after Reply.After tokens.
	ResetMidStream
	// Stall goes silent after Reply.After tokens until the client goes away.
	Stall
	// Malformed sends a chunk that is not JSON after Reply.After tokens.
	Malformed
	// ErrorEvent sends an error event (Reply.Error or Reply.Cond) after
	// Reply.After tokens: Anthropic `event: error`, an OpenAI chunk holding "error".
	ErrorEvent
	// OmitEnd sends everything but the terminator (message_stop, [DONE])
	// and ends the body.
	OmitEnd
	// OmitEndHold sends everything but the terminator and keeps the
	// connection open until the client goes away.
	OmitEndHold
)

// Reply is what the server does with one request.
type Reply struct {
	// Status and Body, when Body is set, are sent as they are (content type
	// application/json); Status 0 means 200.
	Status int
	Body   string
	// SSE, when set, is sent as it is as a 200 event stream, which then
	// ends — or, with Fault Stall or OmitEndHold, stays open until the
	// client goes away.
	SSE string
	// Cond is an error rendered in the provider's words; Error one spelled
	// out. An error response unless Fault is ErrorEvent.
	Cond  Condition
	Error *APIError
	// Header adds response headers (retry-after, retry-after-ms, x-should-retry).
	Header map[string]string
	// Media, when set, rejects a request that has a media block it
	// picks, with the provider's 400 naming that block (see RejectMedia),
	// before anything else the reply says; a request without one gets the
	// rest of the reply.
	Media MediaRule
	// Answer is what a 200 streams.
	Answer Answer
	// Fault breaks the reply; After is the number of tokens it lets through.
	Fault Fault
	After int
	// HeadersDelay delays the response headers; FirstTokenDelay the first
	// token after them; TokenDelay every later token.
	HeadersDelay, FirstTokenDelay, TokenDelay time.Duration
	// TailDelay delays the terminator ([DONE], message_stop) and then the
	// body's end each by as much, as a real upstream's may come a moment
	// after the usage: a client that stops reading at the usage or the
	// terminator then closes the body before its end.
	TailDelay time.Duration
}

// Answer is a streamed answer in provider-neutral terms; each wire renders
// it as that provider would.
type Answer struct {
	// Model is the model the stream names ("test-model" when empty).
	Model string
	// Thinking, Text are the deltas, streamed in that order, one token each.
	Thinking []string
	Text     []string
	// Signature is the thinking block's signature: on Anthropic's wire a
	// signature_delta after the thinking deltas (the block's start carries
	// an empty one, as the API's does). OpenAI's wire has none.
	Signature string
	// Redacted are the data of redacted_thinking blocks, each streamed
	// whole after the thinking block (Anthropic's wire only).
	Redacted []string
	// Tools are tool calls, streamed after the text.
	Tools []ToolCall
	// Stop is the wire's own stop or finish reason; empty means the normal
	// end (end_turn, stop), or the tool one when there are Tools.
	Stop string
	// Limit ends the answer on the output limit, in the wire's words:
	// Anthropic stop_reason max_tokens, OpenAI finish_reason length. It
	// overrides Stop.
	Limit bool
	// StopSequence, when not empty, is the stop sequence that ended the
	// answer. Anthropic's wire: message_delta's stop_sequence, with
	// stop_reason stop_sequence unless Stop or Limit says otherwise.
	// OpenAI's wire names none: its answer ends as a normal one (stop).
	StopSequence string
	// Usage is what the stream reports.
	Usage Usage
}

// ToolCall is a streamed tool call.
type ToolCall struct {
	// ID and Name identify the call.
	ID, Name string
	// Args are the pieces of its JSON arguments, one token each.
	Args []string
}

// Usage is the token counts a stream reports.
type Usage struct {
	// Input, Output, CacheRead and CacheWrite are the counts.
	Input, Output, CacheRead, CacheWrite int
	// CountPrompt has the server count the request's prompt itself and
	// report, in place of Input, CacheRead and CacheWrite, what the API
	// would of the prompt as its model of the provider's prompt cache
	// sees it (see PromptBlock and CacheStats): Anthropic's input_tokens
	// (after the last breakpoint), cache_creation_input_tokens and
	// cache_read_input_tokens; OpenAI's prompt_tokens and cached_tokens.
	// Without it the counts are the script's, and the request leaves the
	// cache as it was: only the requests whose replies count their prompt
	// are looked up and written (the others cost the server no decoding
	// of their bodies).
	CountPrompt bool
}

// Script chooses the reply to the nth request (1-based); since is the time
// since the first request.
type Script func(n int, since time.Duration) Reply

// Seq answers the nth request with replies[n-1], and every request after the
// last with the last.
func Seq(replies ...Reply) Script {
	return func(n int, _ time.Duration) Reply {
		if len(replies) == 0 {
			return Reply{}
		}
		return replies[min(n, len(replies))-1]
	}
}

// Always answers every request with r.
func Always(r Reply) Script { return Seq(r) }

// DownFor answers with down until d has passed since the first request, and
// with up after: an upstream down for a while, then healthy.
func DownFor(d time.Duration, down, up Reply) Script {
	return func(_ int, since time.Duration) Reply {
		if since < d {
			return down
		}
		return up
	}
}

// OK streams a.
func OK(a Answer) Reply { return Reply{Answer: a} }

// Text is an answer made of text deltas.
func Text(deltas ...string) Answer { return Answer{Text: deltas} }

// Fail answers with the provider's error for c.
func Fail(c Condition) Reply { return Reply{Cond: c} }

// RateLimited is a 429; retryAfter, when not empty, is its Retry-After
// header (seconds or an HTTP date).
func RateLimited(retryAfter string) Reply {
	r := Fail(RateLimit)
	if retryAfter != "" {
		r = r.With("retry-after", retryAfter)
	}
	return r
}

// RateLimitedMS is a 429 with a retry-after-ms header.
func RateLimitedMS(ms int) Reply { return Fail(RateLimit).With("retry-after-ms", strconv.Itoa(ms)) }

// Reset resets the connection before the response headers.
func Reset() Reply { return Reply{Fault: ResetBeforeHeaders} }

// Hang sends nothing until the client goes away.
func Hang() Reply { return Reply{Fault: HangBeforeHeaders} }

// SlowFirstToken streams a with its first token d after the headers.
func SlowFirstToken(d time.Duration, a Answer) Reply { return Reply{Answer: a, FirstTokenDelay: d} }

// CutAfter streams the first n tokens of a and ends the body.
func CutAfter(n int, a Answer) Reply { return Reply{Answer: a, Fault: Cut, After: n} }

// ResetAfter streams the first n tokens of a and resets the connection.
func ResetAfter(n int, a Answer) Reply { return Reply{Answer: a, Fault: ResetMidStream, After: n} }

// ResetBeforeFinish streams every token of a — its text and its tool calls
// whole — and resets the TCP connection before the finish: on Anthropic's
// wire after the last content_block_stop, before message_delta; on OpenAI's
// after the last tool-call delta, before the finish_reason chunk.
func ResetBeforeFinish(a Answer) Reply {
	return Reply{Answer: a, Fault: ResetMidStream, After: math.MaxInt}
}

// ToolCutByLimit streams a as a message the output limit stopped in the
// middle of a tool call: a's text, then its tool calls, the last of which
// should have Args that stop short of valid JSON, then the limit's stop
// (a.Limit is set). Anthropic's wire: the text block, a tool_use block with
// the partial input_json_delta pieces, content_block_stop, message_delta
// with stop_reason max_tokens, message_stop. OpenAI's: the tool call's
// deltas with the cut arguments, finish_reason length, the usage chunk,
// [DONE].
func ToolCutByLimit(a Answer) Reply {
	a.Limit = true
	return OK(a)
}

// StallAfter streams the first n tokens of a and goes silent.
func StallAfter(n int, a Answer) Reply { return Reply{Answer: a, Fault: Stall, After: n} }

// MalformedAfter streams the first n tokens of a and a chunk that is not JSON.
func MalformedAfter(n int, a Answer) Reply { return Reply{Answer: a, Fault: Malformed, After: n} }

// ErrorAfter streams the first n tokens of a and an error event for c.
func ErrorAfter(n int, c Condition, a Answer) Reply {
	return Reply{Answer: a, Fault: ErrorEvent, After: n, Cond: c}
}

// NoEnd streams a without its terminator and ends the body.
func NoEnd(a Answer) Reply { return Reply{Answer: a, Fault: OmitEnd} }

// NoEndHold streams a without its terminator and holds the connection open.
func NoEndHold(a Answer) Reply { return Reply{Answer: a, Fault: OmitEndHold} }

// With returns r with one more response header.
func (r Reply) With(key, value string) Reply {
	h := make(map[string]string, len(r.Header)+1)
	for k, v := range r.Header {
		h[k] = v
	}
	h[key] = value
	r.Header = h
	return r
}
