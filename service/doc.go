// Package service is everything in completiond that does I/O. Its files say
// which part they belong to:
//
//   - driver*.go — the driver: the run loop that performs the recovery
//     machine's actions and forwards its decisions (driver.go), delivery of
//     the events with seq numbering and held output (driver_delivery.go),
//     and the caller's side of tool calls and stop hooks (driver_caller.go).
//     The driver decides nothing: every Step of the machine says what to
//     run, what to publish, and which attempts' output is final or void.
//   - grpc_*.go — the gRPC surface: the handlers of Stream, Complete
//     (grpc_handlers.go), Session (grpc_session.go), Attach with the
//     resume grace of Stream (grpc_attach.go) and the resumable Sessions
//     that a Session resume takes control of (grpc_resume.go), request
//     validation (grpc_validate.go), the one mapping from a completion's end
//     to a status (grpc_status.go), the wire conversions (grpc_convert.go),
//     each Stream event encoded once for the event log and the wire
//     (grpc_wire.go), the server's assembly with health, reflection, panic
//     recovery and the drain (grpc_server.go), the one log line per
//     RPC, which also reports the completion the RPC ran (grpc_log.go), and
//     the first interceptor, which grows a completion's stack once while it
//     is shallow (grpc_presize.go).
//   - config*.go, fileconfig.go — configuration: routes, limits, the policy a
//     request may only tighten (config_policy.go), the YAML file.
//   - telemetry*.go — logs, spans and metrics of every completion and attempt;
//     a completion's summary goes on its RPC's line, or on a line of its own
//     when no RPC reports it (a takeover).
//   - eventlog.go — the log of every completion's events, which Attach
//     reads: an interface a shared store can implement, in memory by default;
//     eventlog_redis.go is that store in Redis Streams.
//   - breaker.go — the circuit breaker of every route, shared by completions.
//   - the fleet, with Config.Redis: redis.go (the connection, its URL and
//     health), fleet.go (each replica's log in memory and in Redis, degrading
//     to memory), lease.go and takeover.go (ownership leases with fencing,
//     and the takeover of a completion whose replica died), checkpoint.go
//     (the machine's checkpoints a takeover continues from, kept with the
//     log), shared.go,
//     breaker_shared.go and limits_shared.go (breakers and per-key limits
//     shared by the replicas, local while Redis is away).
//   - auth.go, tls.go, limits.go — who may call (API keys with allowed
//     routes, mTLS), TLS with certificate reload, and the limits that keep
//     one caller from hurting the others.
//
// The gRPC layer is thin: validate the request, run the driver, map the end
// to a status.
package service
