// Package mock is the load benchmark's upstream: an HTTP server that streams
// answers on OpenAI's Chat Completions wire (POST /v1/chat/completions) and
// Anthropic's Messages wire (POST /v1/messages), framed byte for byte as
// provider/providertest frames them, but built for load: every frame of an
// answer is rendered once and written as it is, nothing is recorded per
// request, and a held stream stays open as long as its client wants.
//
// What a request gets is chosen by its model name, a Spec written as a URL
// query: "tokens=50&ttft=10ms&delay=5ms" streams 50 one-word tokens, the
// first 10 ms after the headers and each later one 5 ms after the previous;
// "hold=1" sends the headers and then nothing until the client goes away
// (an idle open stream). The model name carries the spec so that the same
// server serves every phase of a run, whoever calls it: the benchmark
// configures it as the model of a completiond route or of the bare relay.
//
// GET /stats answers Stats as JSON: requests answered, streams held now,
// connections accepted.
//
// providertest remains the fault server of the tests; its servers are tied
// to a testing.TB, keep every request they see, render every frame per
// request and bound every hold, which is what a test wants and a load run
// cannot afford. This package's tests prove that both frame an answer
// alike, and that the repository's provider adapters read it.
package mock
