// Package service is completiond's gRPC surface: it validates a request,
// fills in the driver.Spec of its completion, runs it (package
// internal/driver) and maps the end to a status. Its files say which part
// they belong to:
//
//   - grpc_*.go — the gRPC surface: the handlers of Stream, Complete
//     (grpc_handlers.go), Session (grpc_session.go), Attach with the
//     resume grace of Stream (grpc_attach.go) and the resumable Sessions
//     that a Session resume takes control of (grpc_resume.go), request
//     validation (grpc_validate.go), the server's own codec, which marks a
//     request that does not decode and sends encoded events as they are
//     (grpc_codec.go), every status the service sends, with the one
//     mapping from a completion's end to a status (grpc_status.go),
//     each Stream event encoded once for the event log and the wire
//     (grpc_wire.go), the server's assembly with health, reflection, panic
//     recovery and the drain (grpc_server.go), and the first interceptor,
//     which grows a completion's stack once while it is shallow
//     (grpc_presize.go).
//   - server_config.go — the Server's Config: the values of package config
//     and the running parts (logger, clock, telemetry, the fleet's stores);
//     config_policy.go — the policy a request may only tighten.
//   - takeover.go — the takeover of a completion whose replica died: the
//     leases this replica holds, and the rebuild of a completion from its
//     log and checkpoint (the logs, leases and checkpoints themselves are
//     package internal/fleet's).
//   - door.go, auth.go, tls.go, limits.go — the door, which checks a
//     call's credentials on its headers before its body is read, caps
//     health calls and, as a listener, connections and handshakes; who may
//     call (API keys with allowed routes, mTLS); TLS with certificate
//     reload and the warnings and expiry of a certificate; and the limits
//     that keep one caller from hurting the others, whose refusals'
//     RetryInfo is spread over the callers refused alike.
//
// One completion's run loop, its provider calls, the delivery of its
// events and its checkpoints are package internal/driver's; the wire's
// conversions to the machine's values internal/convert's. Spans, metrics
// and the RPC log line are package internal/telemetry's;
// circuit breakers and per-key limits internal/guard's (limits.go keeps the
// in-flight cap and the transport limits at the door, and maps a guard
// Refusal to its status in grpc_status.go); the event logs, leases and
// checkpoints of a fleet internal/fleet's; configuration values config's.
//
// The service never calls a provider (the driver does), never builds a
// gRPC status outside grpc_status.go, and never lets anything a caller
// sends make the server load a file or URL (schemas, images).
package service
