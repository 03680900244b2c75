// Package anthropic is the provider for Anthropic's Messages API, on the
// official SDK (github.com/anthropics/anthropic-sdk-go) with its retries
// turned off: the recovery machine is the only retry loop.
//
// One Stream call is one streamed POST /v1/messages. Text and thinking deltas
// are emitted as they come; a tool_use block is emitted whole when it stops,
// its input being the concatenated input_json_delta pieces (but for the
// structured output tool's, below). Usage is the larger of what
// message_start and message_delta report (both are cumulative). The attempt succeeds at message_stop and nowhere else: a
// stream that ends before it is a FailStreamBroken, whatever came before.
//
// The request's body is encoded here (Provider.body), appending to one
// buffer, JSON-equal to what the SDK would encode from its params, its
// top-level keys in the SDK's order and its numbers in the SDK's bytes (the
// parity tests hold it to that): the SDK's encoder reflects over them on
// every request. The SDK sends it — options, auth, anthropic-version, base
// URL, the attempt's middleware, the error of an error status — through its
// generic Client.Post, and the 200's body is taken raw from it
// (option.WithResponseBodyInto) and decoded here: framed by package sse and
// read by event.decode, which takes only the fields the reader uses, with
// the SDK's conversions, in one pass without reflection. Events are skipped
// and ended as the SDK's stream did: no name, ping or no data is skipped;
// `event: error` ends the stream.
//
// A tool_use block whose input is not JSON when it stops was cut, and is
// never emitted; what that means is decided when the message ends. On
// stop_reason max_tokens (or model_context_window_exceeded) the output limit
// cut the call: it is dropped and the attempt ends normally, truncated, with
// its text. On any other stop reason the stream is a FailStreamBroken.
//
// A Request.Prefill becomes a final assistant message. Anthropic refuses one
// that ends in whitespace, so trailing whitespace is held back from the wire
// and the same amount of leading whitespace is dropped from the continuation:
// the caller, which already has the prefill, never receives a token twice.
// Models that refuse prefill altogether answer 400, classified as
// FailPrefillRejected.
//
// A conversation that ends with the caller's own assistant message (and no
// Request.Prefill) is a prefill too, the caller's, and goes the same way:
// the trailing whitespace of its final text is held off the wire and as much
// leading whitespace is dropped from the continuation; a final assistant
// message that is nothing but whitespace is left out, and the model answers
// the user's turn afresh. A refusal of the caller's final assistant message
// is the caller's request refused: FailInvalidRequest, not
// FailPrefillRejected, which is kept for the machine's prefill.
//
// Media: a recovery.BlockImage goes as an image block whose source is its
// URL (type url: the API fetches it, completiond never does) when Block.URL
// is set, its data in base64 with its media type otherwise; a
// recovery.BlockDocument as a document block, by URL likewise or by its data
// in base64 as application/pdf, whatever Block.MediaType says (the only
// document the SDK's params carry as data, and the only one the request
// validation takes), with "title" when Block.Title is set.
//
// Prompt cache breakpoints go as cache_control {type: ephemeral}: on the
// system prompt with Request.CacheSystem (the system, an array of one text
// block either way, has the mark on that block), or, without a system
// prompt, on the last tool, which ends the same prefix; on each tool whose
// Tool.CacheBreakpoint is set; on each block whose Block.CacheBreakpoint is
// set — text, image, document, tool_use, tool_result — but never on a
// thinking or redacted_thinking block, which cannot carry one: its mark is
// ignored, as is the mark of a block that is not sent (an empty text
// block). When the caller's final assistant message is trimmed (above),
// its marks stay on what is sent: the trimmed text keeps its own, and the
// mark of a block of whitespace dropped moves to the last block kept (none
// if nothing of the message is kept, or if that block is a thinking one).
// The API takes at most 4 marks: the driver sends no more, and should more
// come, the first ones in the prompt's order — tools, system, messages —
// are left out, a later breakpoint caching a longer prefix. The usage's
// cache_read_input_tokens and cache_creation_input_tokens, from
// message_start and message_delta, are Usage.CacheReadInputTokens and
// CacheCreationInputTokens.
//
// Extended thinking: a Request.ThinkingBudget sends thinking {type:
// enabled, budget_tokens}. The API wants 1024 ≤ budget_tokens < max_tokens,
// and max_tokens belongs to the recovery machine (escalation and
// CONTEXT_LIMIT_ADJUST reason about the value on the wire), so a budget that
// does not fit under max_tokens is cut to half of it (at least 1024), never
// max_tokens raised; with max_tokens ≤ 1024 the request goes without
// thinking. A temperature, a top_k or a forced tool choice, which thinking
// refuses, is the caller's, refused on a thinking route before any attempt
// (the capability table): the body carries what it is given.
// Thinking is also left off for a request with a Prefill — the API refuses
// both together, and dropping the prefill instead would break its promise
// that the stream continues it (the recovery machine never asks for both) —
// for one whose last assistant message calls tools without starting with a
// thinking block, which the API refuses with thinking on: a tool turn whose
// thinking was not kept, as a stateless caller's; and for one answered
// through the structured output tool (below), which the API refuses with
// thinking on.
//
// Interleaved thinking: with Request.Reasoning.Interleaved and thinking on
// (sent, by the rules above), the call carries the header anthropic-beta:
// interleaved-thinking-2025-05-14, and the model may think between its tool
// calls. The budget is then the whole turn's, which the API lets exceed
// max_tokens: it goes as asked (at least 1024), never cut to fit under
// max_tokens, and with max_tokens ≤ 1024 too. When thinking is off, the
// header is not sent.
//
// The caller's model parameters: Request.Sampling sends temperature, top_p
// and top_k when set (a pointer to 0 sends 0; Seed never, the API has
// none); Request.StopSequences sends stop_sequences; Request.ToolChoice
// sends tool_choice {type: auto, any, none or tool, the tool's name,
// disable_parallel_tool_use: true with DisableParallel} — ToolChoiceDefault
// sends nothing, or {type: auto, disable_parallel_tool_use: true} with
// DisableParallel, and none carries no disable_parallel_tool_use. A
// temperature or top_p that is NaN or infinite is refused
// (FailInvalidRequest), as the SDK's encoder refused it. When message_delta
// ends the answer with stop_reason stop_sequence, its stop_sequence is
// Finish.StopSequence if it is one of the request's stop sequences; another
// is not echoed, and the stop reason stands.
//
// Each thinking block's text streams as ChunkThinking pieces; at its
// content_block_stop the whole block, with the signature its signature_delta
// events carried, is emitted as a ChunkThinkingBlock, and so is each
// redacted_thinking block with its opaque data. A recovery.BlockThinking in
// an assistant message goes back as a thinking (or redacted_thinking) block
// exactly as it came, which the API requires on a tool-use turn.
//
// Structured output: a Request.OutputSchema goes as Request.StructuredOutput
// says. StructuredNative sends output_config {format: {type: json_schema,
// schema}} (generally available: no beta header); the schema must be a JSON
// object, its values decoded and encoded again as the SDK's params held
// them. StructuredTool declares one more tool, last (after the caller's, so
// that their cache marks keep their prefix), named StructuredToolName and
// described as recording the final answer, whose input_schema is the schema
// (mapped as any tool's), and forces it with tool_choice {type: tool, name,
// disable_parallel_tool_use: true} — one call, one answer — in place of the
// caller's choice, which the validation refuses in that mode; thinking is
// left off, as the API refuses it with a forced tool (the validation
// refuses the two together too), and a caller's tool of that name is
// refused. The reader makes the call the answer: its input_json_delta
// pieces stream as ChunkText (an empty input as {}), it is never a
// ChunkToolCall, and stop_reason tool_use is end_turn when it was the only
// call; max_tokens stays max_tokens: the JSON cut is a truncated answer, to
// be continued, not a cut call. Text the model writes beside the call (a
// forced call leaves none) goes as it comes. A prefill cannot continue an answer given as a tool's
// input: a Request.Prefill on a StructuredTool request is refused before
// any call as a FailPrefillRejected, on which the recovery machine restarts
// the answer without prefill (a route answered through the tool should
// have prefill off). StructuredHook sends nothing: the driver's stop hook
// alone holds the answer to the schema. A schema with a mode this code does
// not know is refused (FailInvalidRequest).
//
// Failures are classified by package classify from the wire: status, the
// error body {"type":"error","error":{"type":…,"message":…}}, the
// request-id, retry-after(-ms) and x-should-retry headers, and
// `event: error` inside a 200 stream. A FailMedia names the media blocks
// rejected (Failure.MediaBlocks) when the API's message does: it gives each
// by its path on the wire, "messages.0.content.1.image.source.base64: image
// exceeds 5 MB maximum: …", "messages.1.content.3.document.source.base64.data:
// …", and every such messages.N.content.M is mapped back to an index into
// Request.Messages — the wire leaves out empty text blocks and messages that
// say nothing, and the caller's final assistant message when it is all
// whitespace, and adds a prefill's message at the end — each block once, in
// the order named; a path that maps to no image or document of the request
// (the prefill's, a text block, one out of range) is dropped. A message that
// names no path leaves MediaBlocks empty.
package anthropic
