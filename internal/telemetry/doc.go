// Package telemetry records what completions do: an OpenTelemetry span per
// completion and per upstream attempt (GenAI conventions), the metrics
// (transitions, attempts, tokens, time to first token, circuits), and the
// one log line per RPC, which also carries the summary of the completion
// the RPC ran.
//
// The server holds one Observer; each completion gets a Trail from
// Observer.Start, built from a plain Info value. telemetry never decides,
// retries or blocks a completion, and imports nothing of completiond's but
// config, provider and recovery.
package telemetry
