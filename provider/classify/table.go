package classify

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/completiond/completiond/recovery"
)

// rule is one row of the classification table. Every condition it sets must
// hold; the first row that matches gives the kind.
type rule struct {
	// kind is the class the row gives.
	kind recovery.FailureKind
	// status, when set, must accept the status (see classifyBody).
	status func(int) bool
	// ids, when set, must hold the error's type or its code.
	ids []string
	// text, when set, must match the error's message.
	text *regexp.Regexp
	// fill reads the numbers out of the match; it may refine the kind.
	fill func(f *recovery.Failure, m []string, e *errorBody)
}

// table is the classification, in order. Wordings are the upstreams' own,
// as they appear in real responses.
var table = []rule{
	// Context overflow. First, because every one of these is a plain 400.
	// Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
	{kind: recovery.FailPromptTooLong, text: re(`prompt is too long: (\d+) tokens > (\d+) maximum`), fill: prompt(1, 2)},
	// Anthropic: "input length and `max_tokens` exceed context limit: 190000 + 64000 > 200000, decrease input length or `max_tokens` and try again".
	{kind: recovery.FailContextLimit, text: re("input length and `?max_tokens`? exceed context limit: (\\d+) \\+ (\\d+) > (\\d+)"), fill: limit(1, 2, 3)},
	// vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778)".
	{kind: recovery.FailContextLimit, text: re(`is too large: (\d+)\. This model's maximum context length is (\d+) tokens and your request has (\d+) input tokens`), fill: limit(3, 1, 2)},
	// vLLM: "This model's maximum context length is 131072 tokens. However, you requested 1024 output tokens and your prompt contains at least 130049 input tokens, …".
	{kind: recovery.FailContextLimit, text: re(`maximum context length is (\d+) tokens\. However, you requested (\d+) output tokens and your prompt contains at least (\d+) input tokens`), fill: limit(3, 2, 1)},
	// OpenAI, older vLLM: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). …".
	{kind: recovery.FailContextLimit, text: re(`maximum context length is (\d+) tokens\. However, you requested (\d+) tokens \((\d+) in the messages, (\d+) in the completion\)`), fill: limit(3, 4, 1)},
	// OpenAI: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. …".
	{kind: recovery.FailPromptTooLong, text: re(`maximum context length is (\d+) tokens\. However, your messages resulted in (\d+) tokens`), fill: prompt(2, 1)},
	// vLLM: "This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens. Please reduce the length of the input messages.".
	{kind: recovery.FailPromptTooLong, text: re(`maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens`), fill: prompt(2, 1)},
	// OpenAI (newer models): "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300000 tokens. …".
	{kind: recovery.FailPromptTooLong, text: re(`exceed the configured limit of (\d+) tokens\. Your messages resulted in (\d+) tokens`), fill: prompt(2, 1)},
	// llama.cpp: "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it".
	{kind: recovery.FailPromptTooLong, text: re(`request \((\d+) tokens\) exceeds (?:the available )?context size \((\d+) tokens\)`), fill: prompt(1, 2)},
	// llama.cpp: type exceed_context_size_error with n_prompt_tokens and n_ctx beside
	// "the request exceeds the available context size, try increasing it".
	{kind: recovery.FailPromptTooLong, ids: []string{"exceed_context_size_error"}, fill: llamaCounts},
	{kind: recovery.FailPromptTooLong, text: re(`exceeds the available context size`), fill: llamaCounts},
	{kind: recovery.FailPromptTooLong, ids: []string{"context_length_exceeded", "model_context_window_exceeded"}},

	// A refused assistant prefill (Anthropic 400; also relayed by proxies in front of Claude).
	// Attempt turns it into FailInvalidRequest when the request carried no prefill.
	{kind: recovery.FailPrefillRejected, text: re(`does not support assistant message prefill|final assistant content cannot end with trailing whitespace`)},

	// Rejected images: Anthropic "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: …",
	// "Could not process image", "… image dimensions exceed max allowed size …"; OpenAI "You uploaded an
	// unsupported image. …" (invalid_image_format), "The image data you provided does not represent a valid image. …",
	// "Invalid image." (invalid_image), and an image URL it could not fetch: "Timeout while downloading
	// https://…/a.png." or "Error while downloading …" (invalid_image_url).
	// Rejected documents: Anthropic names the document's source, "messages.1.content.3.document.source.base64.data:
	// The PDF specified was not valid.", as it does an image's.
	{kind: recovery.FailMedia, text: re(`image exceeds .*maximum|could not process image|image dimensions exceed|does not represent a valid image|unsupported image|\.(?:image|document|pdf)\.source`)},
	{kind: recovery.FailMedia, ids: []string{"invalid_image_format", "image_parse_error", "invalid_image", "image_too_large", "invalid_image_url"}},

	// Out of money: OpenAI insufficient_quota (a 429 that is not a rate limit), Anthropic
	// billing_error and "Your credit balance is too low to access the Anthropic API. …", 402.
	{kind: recovery.FailQuota, ids: []string{"insufficient_quota", "billing_error"}},
	{kind: recovery.FailQuota, text: re(`credit balance is too low`)},
	{kind: recovery.FailQuota, status: is(402)},

	// Content policy: OpenAI content_policy_violation and invalid_prompt, Azure content_filter,
	// Anthropic "Output blocked by content filtering policy".
	{kind: recovery.FailContentFilter, ids: []string{"content_filter", "content_policy_violation", "invalid_prompt"}},
	{kind: recovery.FailContentFilter, text: re(`content filtering policy|content management policy`)},

	// Overload: Anthropic 529 overloaded_error (also inside a 200 stream); a 503 or an
	// in-stream error that says so (OpenAI "The server is overloaded or not ready yet.").
	{kind: recovery.FailOverloaded, ids: []string{"overloaded_error"}},
	{kind: recovery.FailOverloaded, status: is(529)},
	{kind: recovery.FailOverloaded, status: either(is(503), between(200, 299)), text: re(`overloaded`)},

	// Rate limit: Anthropic rate_limit_error, OpenAI rate_limit_exceeded, any other 429.
	{kind: recovery.FailRateLimit, ids: []string{"rate_limit_error", "rate_limit_exceeded"}},
	{kind: recovery.FailRateLimit, status: is(429)},

	// Route-specific refusals: the key, the permission, the model.
	{kind: recovery.FailAuth, ids: []string{"authentication_error", "permission_error", "invalid_api_key"}},
	{kind: recovery.FailAuth, status: is(401, 403)},
	{kind: recovery.FailNotFound, ids: []string{"not_found_error", "model_not_found"}},
	{kind: recovery.FailNotFound, status: is(404)},

	// Transient server trouble, by type, then by status.
	{kind: recovery.FailServer, ids: []string{"api_error", "server_error", "timeout_error"}},
	{kind: recovery.FailServer, status: is(408, 409)},
	{kind: recovery.FailServer, status: between(500, 599)},
	// An error event inside a 200 stream that no row above recognised: the
	// server gave up on the answer, which is worth another try.
	{kind: recovery.FailServer, status: between(200, 299)},

	// Everything else the upstream refused: 400, 413, 422 and the other 4xx.
	{kind: recovery.FailInvalidRequest, status: between(400, 499)},
}

// classifyBody sets f.Kind (and the numbers) from the first matching row.
// status is the response's status, or for an error event inside a 200 stream
// the numeric code the event carries, if any.
func classifyBody(f *recovery.Failure, e *errorBody, status int) {
	for _, r := range table {
		m, ok := r.match(e, status)
		if !ok {
			continue
		}
		f.Kind = r.kind
		if r.fill != nil {
			r.fill(f, m, e)
		}
		return
	}
	f.Kind = recovery.FailUnknown
}

// match reports whether every condition of r holds, with the text submatches.
func (r *rule) match(e *errorBody, status int) ([]string, bool) {
	if r.status != nil && !r.status(status) {
		return nil, false
	}
	if r.ids != nil && !slices.ContainsFunc(r.ids, func(id string) bool {
		return strings.EqualFold(id, e.Type) || strings.EqualFold(id, e.Code)
	}) {
		return nil, false
	}
	if r.text == nil {
		return nil, true
	}
	m := r.text.FindStringSubmatch(e.Message)
	return m, m != nil
}

// re compiles a case-insensitive pattern.
func re(pattern string) *regexp.Regexp { return regexp.MustCompile(`(?i)` + pattern) }

// is accepts any of codes.
func is(codes ...int) func(int) bool {
	return func(s int) bool { return slices.Contains(codes, s) }
}

// between accepts lo..hi inclusive.
func between(lo, hi int) func(int) bool {
	return func(s int) bool { return s >= lo && s <= hi }
}

// either accepts what a or b accepts.
func either(a, b func(int) bool) func(int) bool {
	return func(s int) bool { return a(s) || b(s) }
}

// prompt fills PromptTokens and ContextWindow from submatches n and w.
func prompt(n, w int) func(*recovery.Failure, []string, *errorBody) {
	return func(f *recovery.Failure, m []string, _ *errorBody) {
		f.PromptTokens, f.ContextWindow = atoi(m[n]), atoi(m[w])
	}
}

// limit fills InputTokens, MaxTokens and ContextWindow (X + Y > Z) from
// submatches x, y and z. When the input alone does not fit, no max_tokens can
// help, and the failure is a prompt too long.
func limit(x, y, z int) func(*recovery.Failure, []string, *errorBody) {
	return func(f *recovery.Failure, m []string, _ *errorBody) {
		f.InputTokens, f.MaxTokens, f.ContextWindow = atoi(m[x]), atoi(m[y]), atoi(m[z])
		if f.InputTokens >= f.ContextWindow {
			f.Kind, f.PromptTokens = recovery.FailPromptTooLong, f.InputTokens
		}
	}
}

// llamaCounts fills the numbers llama.cpp puts beside its message.
func llamaCounts(f *recovery.Failure, _ []string, e *errorBody) {
	f.PromptTokens, f.ContextWindow = e.PromptTokens, e.ContextSize
}

// atoi reads a count the patterns matched as digits.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
