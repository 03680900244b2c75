// Package relay is the load benchmark's yardstick: a bare gRPC relay that
// serves the same completion.v1 Stream RPC as completiond by calling the
// upstream once with openai-go and forwarding each delta, with no
// validation, no recovery, no logging and no telemetry.
//
// Its events are the ones a caller of completiond sees for a clean answer —
// started, the token deltas, usage, a terminal COMPLETED transition and the
// result with the answer — so that the benchmark's client reads both
// servers the same way. Its HTTP client is the one completiond's openai
// provider uses by default (a plain http.Client on the default transport),
// so that both pay the same for the upstream connection.
//
// It serves Stream only; the other RPCs answer UNIMPLEMENTED.
package relay
