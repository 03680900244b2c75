package recovery

import (
	"fmt"
	"strconv"
	"time"
)

// FailureKind is the class of an upstream failure. Providers classify what
// they saw on the wire into one of these; the machine decides what to do.
type FailureKind int

const (
	// FailUnknown is an unclassified failure; it is treated as permanent.
	FailUnknown FailureKind = iota
	// FailConnection is a refused or reset connection before a response.
	FailConnection
	// FailTimeout is a timeout; Failure.Timeout says which phase.
	FailTimeout
	// FailRateLimit is a 429 rate limit (not a quota).
	FailRateLimit
	// FailOverloaded is 529, overloaded_error, or 503 overloaded.
	FailOverloaded
	// FailServer is another transient server failure: 408, 409, 500, 502, 503, 504.
	FailServer
	// FailStreamBroken is a stream that ended or broke before its finish:
	// EOF, reset mid-stream, a malformed chunk.
	FailStreamBroken
	// FailInvalidRequest is a request the upstream refused: 400, 413, 422.
	FailInvalidRequest
	// FailAuth is a bad key or missing permission: 401, 403. Route-specific.
	FailAuth
	// FailNotFound is an unknown model: 404. Route-specific.
	FailNotFound
	// FailQuota is an exhausted quota (insufficient_quota). Route-specific.
	FailQuota
	// FailContentFilter is a content-policy refusal.
	FailContentFilter
	// FailPromptTooLong is a prompt over the context window; PromptTokens and
	// ContextWindow carry the numbers when the provider gave them.
	FailPromptTooLong
	// FailContextLimit is "input length and max_tokens exceed context limit:
	// X + Y > Z"; InputTokens, MaxTokens and ContextWindow carry X, Y, Z.
	FailContextLimit
	// FailMedia is a rejected image or document; MediaBlocks says which,
	// when the upstream named them.
	FailMedia
	// FailPrefillRejected is a refused assistant prefill.
	FailPrefillRejected
	// FailCircuitOpen means the driver did not call the route because its
	// circuit breaker is open.
	FailCircuitOpen
	// FailReplicaLost: the replica that ran the attempt died (its ownership
	// lease lapsed) and another replica took the completion over from its
	// event log (see Takeover). No upstream failed: it is transient, and
	// the takeover continues at once, without a backoff.
	FailReplicaLost
)

var failureKindNames = [...]string{"unknown", "connection", "timeout", "rate_limit", "overloaded",
	"server", "stream_broken", "invalid_request", "auth", "not_found", "quota", "content_filter",
	"prompt_too_long", "context_limit", "media", "prefill_rejected", "circuit_open", "replica_lost"}

// String returns the snake_case name used in transcripts.
func (k FailureKind) String() string {
	if int(k) >= 0 && int(k) < len(failureKindNames) {
		return failureKindNames[k]
	}
	return "unknown"
}

// TimeoutPhase says which per-attempt limit a FailTimeout hit.
type TimeoutPhase int

const (
	// TimeoutNone is not a timeout.
	TimeoutNone TimeoutPhase = iota
	// TimeoutHeaders: no response headers in time.
	TimeoutHeaders
	// TimeoutFirstToken: headers came, the first token did not.
	TimeoutFirstToken
	// TimeoutIdle: the stream went silent between chunks.
	TimeoutIdle
	// TimeoutTotal: the attempt exceeded its total limit.
	TimeoutTotal
)

// Failure is a classified upstream failure. It never holds secrets: providers
// scrub messages before they build one.
type Failure struct {
	// Kind is the failure's class.
	Kind FailureKind
	// Provider is the provider kind that failed (sim, anthropic, openai).
	Provider string
	// HTTPStatus is the HTTP status, or 0.
	HTTPStatus int
	// Type is the provider's error type, e.g. "overloaded_error".
	Type string
	// Code is the provider's error code, e.g. "context_length_exceeded".
	Code string
	// Message is the provider's message, scrubbed of secrets.
	Message string
	// RequestID is the provider's request id.
	RequestID string
	// RetryAfter is the delay the provider asked for (retry-after-ms or
	// Retry-After); zero when it did not ask.
	RetryAfter time.Duration
	// ShouldRetry is the provider's x-should-retry header: 0 absent, +1 true, -1 false.
	ShouldRetry int
	// Timeout is the phase of a FailTimeout.
	Timeout TimeoutPhase
	// PromptTokens is N of "prompt is too long: N tokens > M maximum".
	PromptTokens int
	// InputTokens is X of "X + Y > Z".
	InputTokens int
	// MaxTokens is Y of "X + Y > Z".
	MaxTokens int
	// ContextWindow is M or Z of the messages above.
	ContextWindow int
	// Silence is how long the upstream had sent nothing — not a byte of a
	// response — when the attempt failed: set on a FailConnection, the
	// time from the call to the dropped or refused connection. A drop
	// after DeadRouteSilence or more marks a dead route (see DeadRoute).
	Silence time.Duration
	// MediaBlocks are the media blocks (images, documents) the upstream
	// named as the ones it rejected, a FailMedia's, as indexes into the
	// request's Messages; empty when it did not say which (then every
	// media block is stripped).
	MediaBlocks []BlockRef
}

// BlockRef points at one block of a conversation: Messages[Message].Blocks[Block].
type BlockRef struct {
	// Message is the message's index.
	Message int
	// Block is the block's index within the message.
	Block int
}

// String returns "messages[i].content[j]", the block's path in the API.
func (r BlockRef) String() string {
	return "messages[" + strconv.Itoa(r.Message) + "].content[" + strconv.Itoa(r.Block) + "]"
}

// DeadRouteSilence is the silence after which an upstream that drops a
// call without having sent a byte is taken for dead rather than briefly
// unreachable: a connection refused or reset at once is an ordinary
// connection failure, retried with backoff; one accepted and then held
// silent for seconds (a hung server, a black hole, a proxy whose upstream
// is gone) would hold every retry as long again, so where a fallback
// exists the machine falls back at once, as after a timeout.
const DeadRouteSilence = 5 * time.Second

// DeadRoute reports whether f says its route is dead: a timeout before
// the response headers came, or a connection dropped after
// DeadRouteSilence or more without a byte of a response.
func (f *Failure) DeadRoute() bool {
	switch f.Kind {
	case FailTimeout:
		return f.Timeout == TimeoutHeaders
	case FailConnection:
		return f.Silence >= DeadRouteSilence
	}
	return false
}

// Error returns a one-line description.
func (f *Failure) Error() string {
	s := f.Kind.String()
	if f.HTTPStatus != 0 {
		s = fmt.Sprintf("%s (HTTP %d)", s, f.HTTPStatus)
	}
	if f.Message != "" {
		s += ": " + f.Message
	}
	return s
}

// Transient reports whether the same request may succeed if tried again.
// x-should-retry, when present, overrides the class.
func (f *Failure) Transient() bool {
	if f.Kind == FailReplicaLost {
		return true // no upstream said anything: the request was never refused
	}
	switch f.ShouldRetry {
	case 1:
		return true
	case -1:
		return false
	}
	return f.Outage()
}

// RouteSpecific reports whether another route may succeed where this one
// failed permanently: a bad key, an unknown model, an exhausted quota.
func (f *Failure) RouteSpecific() bool {
	switch f.Kind {
	case FailAuth, FailNotFound, FailQuota, FailCircuitOpen:
		return true
	}
	return false
}

// Outage reports whether the failure's class says the upstream itself is
// failing (down, overloaded, silent, broken, throttling), whatever
// x-should-retry says: a route-level condition another route may not share.
func (f *Failure) Outage() bool {
	switch f.Kind {
	case FailConnection, FailTimeout, FailRateLimit, FailOverloaded, FailServer, FailStreamBroken:
		return true
	}
	return false
}
