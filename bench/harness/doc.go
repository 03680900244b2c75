// Package harness runs the load benchmark: completiond against a bare gRPC
// relay (package relay) and a direct openai-go call, all on the mock
// upstream (package mock), and renders what it measured as a markdown table.
//
// Every server runs as a process of its own, started afresh for each
// measurement, so that /proc/<pid>/stat and /proc/<pid>/status give its CPU
// time and resident set alone; the load generator and the direct calls run
// in the harness's process. The mock and the relay are the harness's own
// binary started in a role (RunRole); completiond is built from the module
// with a file added by go build -overlay that starts package debugserver,
// which serves goroutine counts, heap and stack sizes and pprof profiles.
//
// At each level of concurrent streams and in each repetition, after waiting
// for a quiet machine, it measures three phases, the relay and completiond
// interleaved and swapped every repetition:
//
//   - stream: answers paced so that all streams together carry a fixed
//     number of tokens per second; time to first token against the direct
//     calls at the same level, and server CPU per 1 000 tokens;
//   - short: 1-token answers back to back on every stream; answers per
//     second, server CPU and upstream dials per answer;
//   - idle: every stream held open by a silent upstream; RSS, heap, stacks
//     and goroutines per stream.
//
// Each value is also given as a ratio to the relay's in the same
// repetition, which cancels most of what the machine's load does to both.
//
// RunFleet runs the fleet benchmark instead, in the streaming phase only:
// one completiond process without Redis against a fleet of completiond
// replicas (Fleet.Replicas) sharing a redis-server started afresh for each
// measurement, the client with a channel to each replica and the streams
// spread evenly over them. Beside the time to first token and the
// servers' CPU it reads Redis's INFO cpu and commandstats around each
// measurement: Redis's CPU and commands per 1 000 tokens, those the
// replicas sent told from those their scripts ran by an unmeasured pass
// with Redis's MONITOR on at each level.
package harness
