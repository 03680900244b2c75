// Package providertest runs loopback fault servers that speak the exact wire
// of the real upstreams, for the tests of the providers built on them and of
// whatever drives those providers.
//
// NewAnthropic serves POST /v1/messages as server-sent events — event:
// message_start, content_block_start (text, thinking, redacted_thinking,
// tool_use), content_block_delta (text_delta, thinking_delta,
// signature_delta, input_json_delta), content_block_stop, ping,
// message_delta, message_stop and error — and errors as {"type":"error","error":{…},
// "request_id":…} with a request-id header. NewOpenAI serves POST
// /v1/chat/completions as data: {chat.completion.chunk} lines ending in data:
// [DONE], and errors as {"error":{"message","type","param","code"}} with an
// x-request-id header.
//
// Both servers look at the conversation as the real ones do: Anthropic's
// refuses a final assistant message whose text ends in whitespace (400
// "final assistant content cannot end with trailing whitespace"), whatever
// the script says; OpenAI's answers a final assistant message afresh — the
// streamed answer starts by saying that message's text again — unless the
// body carries continue_final_message: true (vLLM's way to continue it).
//
// What the server does is scripted per request number (Seq, Always) or by
// time (DownFor): a streamed Answer, an error in the provider's own words
// (Fail with a Condition, or an APIError), or a Fault — a TCP reset before
// the headers, no response at all, a slow first token, a stream cut, stalled,
// reset or corrupted after N tokens, an error event mid-stream, a missing
// terminator — or, before any of it, a media block rejected (RejectMedia:
// an image over a size, one whose data or URL holds a marker, the block at
// a path) with the provider's 400 naming it. The server records every
// request (time, headers, body) and whether the client went away while it
// was being answered.
//
// Both model their provider's prompt cache (see PromptBlock and Usage.
// CountPrompt): Anthropic's explicit one, read and written at the
// request's cache_control breakpoints with its 20-block lookback and its
// 1 024-token minimum, in the order tools, system, messages; OpenAI's
// automatic one, in 128-token increments of the longest prefix seen. A
// reply that counts its prompt reports the usage the API would —
// input_tokens, cache_creation_input_tokens and cache_read_input_tokens;
// prompt_tokens and cached_tokens — from a four-bytes-a-token estimate.
//
// Beside the servers, it runs a provider's shared checks over them:
// FuzzStream (arbitrary bodies), StreamFraming (every framing the
// event-stream standard allows, and an event over the limit) and
// BenchStream (the cost per streamed chunk, from a rendering Server.Body
// replays).
//
// A server stops itself when its test ends; every wait it makes ends when
// the client leaves, when the test ends, or after a bounded time, so it never
// hangs a test.
package providertest
