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
// route), its reasoning effort (reasoning_effort, as the route resolved
// it), its stop sequences (stop, always a list), its output schema
// (response_format, below), its tool choice (tool_choice "auto",
// "required", "none" or the named function) and parallel_tool_calls false
// when parallel tool calls are disabled; unset fields are not sent, leaving
// the server's defaults.
//
// The output limit goes as max_completion_tokens, the field reasoning
// models (o-series, gpt-5) require — they refuse max_tokens — and vLLM and
// recent llama-server take too; Config.LegacyMaxTokens sends max_tokens
// instead, for servers that know only it (Ollama among them). A reasoning
// effort does not change the field: Ollama takes reasoning_effort but not
// max_completion_tokens, so the configuration's choice stands, and a route
// to OpenAI's reasoning models must not set LegacyMaxTokens.
// Request.Reasoning.Interleaved and Request.ThinkingBudget are Anthropic's
// and send nothing here.
//
// Structured output: with Request.OutputSchema and StructuredNative, the
// schema goes as response_format {"type": "json_schema", "json_schema":
// {"name": "output", "strict": …, "schema": …}}, the schema as it came (its
// keys in their order, which the answer's keys follow; it must be a JSON
// object, or the request is refused before any call). strict is true only
// for a schema that meets OpenAI's strict-mode rules (strictSchema: a root
// object, every object closed with additionalProperties false and all its
// properties required, supported keywords and formats only, the documented
// limits); otherwise false, and the model gets the schema as guidance — a
// strict schema OpenAI cannot take would fail the request. The driver's
// stop hook checks the answer against the schema either way. With
// StructuredHook (and StructuredTool, an Anthropic route's), nothing is sent.
//
// Images go as image_url parts: by their URL, which the server fetches, or
// their data inlined as a data: URL. Documents (PDF) have no part that the
// compatible servers share, and the request validation keeps them off
// openai routes: a request holding one is refused before any call
// (FailInvalidRequest), never sent without it. Cache marks
// (Request.CacheSystem, Block.CacheBreakpoint, Tool.CacheBreakpoint) send
// nothing: OpenAI caches prompts of 1024 tokens or more by itself, and
// reports what it read from the cache (see Usage).
//
// Usage is the chunk stream_options.include_usage asks for, after the
// finish_reason, in completiond's (Anthropic's) terms: prompt_tokens counts
// the cached tokens, which are split out, so that InputTokens are the
// prompt's uncached tokens, CacheReadInputTokens are
// prompt_tokens_details.cached_tokens and CacheCreationInputTokens a
// server's cache_write_tokens (OpenAI reports none): the three add up to
// prompt_tokens.
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
// Thinking: Request.ThinkingBudget is ignored: a token budget is an
// Anthropic route's knob; this wire's is reasoning_effort (above).
// Reasoning text that a server streams is emitted as ChunkThinking; there
// are no thinking blocks to send back (no ChunkThinkingBlock), and
// recovery.BlockThinking blocks in the conversation — an Anthropic
// route's, before a fallback — are left out of the request.
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
//
// A rejected image (FailMedia: invalid_image, invalid_image_url, …) is
// located for the recovery machine, which strips what Failure.MediaBlocks
// names, or every image when it names none. The error names an image by a
// path into the body in its param ("messages.[1].content.[0].image_url",
// "messages[1].content[0]"); else by the image's URL, or the URL's file
// name alone, in its message ("Timeout while downloading
// https://example.com/a.png."); else by a path in its message ("Invalid
// 'messages[1]'. …"). A path counts the body's messages, which the system
// prompt, the tool messages a user message's results become and the
// messages left out shift from the request's (wireLayout maps them back).
// A path to a message names its images; a path to a part that is not an
// image, or nothing recognisable, names none.
package openai
