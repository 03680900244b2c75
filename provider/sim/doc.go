// Package sim is completiond's embedded provider: a deterministic model that
// needs no key and no network, with faults scripted per request so that every
// recovery transition can be shown from grpcurl and proven in tests.
//
// The answer is a fixed text derived from the first user message. Its length
// and pace come from Config or the request metadata. Assistant text already
// in the conversation, and any prefill, counts as produced: the sim goes on
// from there, so continuations and stream resumes finish the same answer.
//
// The request's stop sequences end the answer where its new output (never
// the prefill or what the conversation holds) first writes one, mid-token if
// need be, with recovery.StopSequence, unless a scripted cut or break comes
// first. Its tool choice is obeyed: "any" or "tool" makes a plain answer
// call a tool, "tool" makes every call the named tool's, and "none" makes a
// scripted tool step a plain answer. The sim is deterministic: temperature,
// top_p, top_k and seed are accepted and change nothing in its output.
//
// The sim reasons when the request asks it to (Request.ThinkingBudget or
// Request.Reasoning.Effort): before its output it streams a short
// deterministic reasoning about the prompt as ChunkThinking tokens — 4, 8,
// 16 or 32 (MaxThinkingWords) of them for a minimal, low, medium or high
// effort, a budget read as the API maps it to an effort — then the whole
// block as a ChunkThinkingBlock, signed for the request's model as the
// fault server signs one (providertest.SignatureFor). The tokens count in
// the attempt's output tokens but not against its max_tokens, so the
// answer is the same with or without reasoning. It does not reason on a
// prefill, nor after tool results unless Reasoning.Interleaved asks it to
// (a tool turn's thinking comes before its tool call).
//
// Images and documents, inline or by URL, are accepted and never fetched;
// the input tokens count them as the machine estimates them
// (recovery.MediaTokens). A "media=M.B" step rejects messages[M].content[B]
// as Anthropic rejects a bad image, naming it in Failure.MediaBlocks, only
// while that block is an image or a document: once recovery has replaced
// it with a placeholder, the same step answers.
//
// Faults are scripted with the request metadata key "sim.faults": a
// comma-separated list whose k-th step applies to attempt k (steps past the
// end of the list answer normally). See ParseScript for the step syntax.
//
// The sim is a demo and test upstream, not a load generator: the metadata
// may ask for at most MaxPace (1 s) between tokens and MaxWords (10 000)
// tokens, larger values are cut to those, and every attempt obeys its
// provider.Timeouts as a real upstream's would: Total cuts the attempt, and
// a pace longer than FirstToken (before the first token) or Idle (between
// tokens) ends it with that timeout; Headers bounds a "hang".
package sim
