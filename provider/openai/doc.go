// Package openai is the provider for the Chat Completions API, on the
// official SDK (github.com/openai/openai-go/v3) with its retries turned off:
// the recovery machine is the only retry loop. It serves OpenAI and the
// servers that speak the same wire through Config.BaseURL: vLLM, llama.cpp's
// llama-server, Ollama and the gateways in front of them.
//
// One Stream call is one streamed POST {BaseURL}/chat/completions with
// stream_options.include_usage. Text deltas (content, and refusal) and
// reasoning deltas (reasoning_content, reasoning: the compatible servers'
// field for thinking) are emitted as they come; tool calls are accumulated
// from their deltas and emitted whole when the finish_reason arrives. The
// attempt completes at the first of: the usage chunk after the finish_reason,
// data: [DONE], the end of the body after the finish_reason, or a limit that
// passes after it — a server that sends everything but [DONE] and keeps the
// connection open does not hang the attempt. A stream that ends without a
// finish_reason is a FailStreamBroken.
//
// The request is the SDK's own — options, auth, base URL, the attempt's
// middleware, the error of an error status — but for its body, which is
// encoded here (option.WithRequestBody) without the SDK's reflection, the
// JSON the SDK would encode for the same request (the parity tests hold it
// to that), and the 200's body, which is taken raw from it
// (option.WithResponseBodyInto) and decoded here: framed by package sse and
// read by chunk.decode, which takes only the fields the reader uses, with
// the SDK's conversions, in one pass without reflection: the SDK's stream
// decoding was about a third of the service's CPU per streamed token.
//
// The body carries, besides the conversation, the tools and the output
// limit, the request's sampling (temperature, top_p, seed; top_k has no
// field on this wire, and the request validation refuses it for an openai
// route), its stop sequences (stop, always a list), its tool choice
// (tool_choice "auto", "required", "none" or the named function) and
// parallel_tool_calls false when parallel tool calls are disabled; unset
// fields are not sent, leaving the server's defaults.
//
// Stop sequences: OpenAI's API ends with finish_reason "stop" both at a
// stop sequence and at a natural end, and does not say which: both are
// StopEndTurn. vLLM adds stop_reason to the finishing choice; when it is a
// string equal to one of the request's stop sequences the answer ended
// there (StopSequence, with Finish.StopSequence the request's sequence);
// a stop token's id, null, or any other string is StopEndTurn.
//
// finish_reason length drops every tool call of the answer: the limit may
// have cut any of them mid-arguments, and a partial call is never emitted.
// The attempt ends normally with StopMaxTokens and the text it streamed.
//
// Thinking: Request.ThinkingBudget is ignored. OpenAI's reasoning_effort
// (o-series models) is a different knob, not a token budget, and
// compatible servers have no common one; extended thinking is an
// Anthropic route's feature for now. Reasoning text that a server streams
// anyway is emitted as ChunkThinking; there are no thinking blocks to send
// back (no ChunkThinkingBlock), and recovery.BlockThinking blocks in the
// conversation — an Anthropic route's, before a fallback — are left out of
// the request.
//
// Prefill: Chat Completions has no true prefill. A Request.Prefill is sent as
// a final assistant message holding the text, with Config.PrefillBody's
// fields set in the request body, and what the server streams is taken as
// its continuation. For a compatible server the body defaults to vLLM's
// continue_final_message=true and add_generation_prompt=false
// (DefaultPrefillBody): without them vLLM answers afresh and the answer
// repeats the prefill. llama-server continues a final assistant message by
// default (unless started with --no-prefill-assistant), and recent versions
// take the vLLM pair as an alias. OpenAI itself has no way to continue a
// message and answers afresh: a route to it must not use prefill (the
// service's configuration refuses prefill on an openai provider without a
// base_url). Whether a route uses prefill is the route config's decision.
//
// Failures are classified by package classify from the wire: status, the
// error body {"error":{"message","type","code","param"}} and its variants
// (vLLM, llama.cpp, Ollama), the x-request-id, retry-after(-ms) and
// x-should-retry headers, and a chunk holding "error" inside a 200 stream.
package openai
