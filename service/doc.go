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
//     and the server's assembly with health, reflection, logging, panic
//     recovery and the drain (grpc_server.go).
//   - config*.go, fileconfig.go — configuration: routes, limits, the policy a
//     request may only tighten (config_policy.go), the YAML file.
//   - telemetry*.go — logs, spans and metrics of every completion and attempt.
//   - eventlog.go — the log of every completion's events, which Attach
//     reads: an interface a shared store can implement, in memory by default.
//   - breaker.go — the circuit breaker of every route, shared by completions.
//   - auth.go, tls.go, limits.go — who may call (API keys with allowed
//     routes, mTLS), TLS with certificate reload, and the limits that keep
//     one caller from hurting the others.
//
// The gRPC layer is thin: validate the request, run the driver, map the end
// to a status.
package service
