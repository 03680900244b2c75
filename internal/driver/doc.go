// Package driver runs one completion: the recovery machine's loop, the
// provider calls it asks for, and the delivery of its events.
//
// The gRPC surface fills in a Spec — everything a completion needs, from
// the request and the route chain to where its events go — and New makes
// the Completion of it; Run drives the machine (package recovery) to its
// end. The driver decides nothing: each Step of the machine says what to
// run, what to publish, and which attempts' output is final or void.
//
// What the driver does with a step, in order:
//
//   - saves the step's checkpoint, when the completion may be taken over
//     by another replica (checkpoint.go);
//   - settles the held output and publishes the transitions (the outbox,
//     outbox.go: it numbers every event, logs it, then sends it; settled
//     delivery holds an attempt's output until the machine settles it);
//   - performs the action: an upstream call through the route's circuit
//     breaker with a span of its own, a backoff, or a question to the
//     Caller (tool results, stop-hook verdicts; the built-in schema check
//     comes first).
//
// The driver knows nothing of gRPC: how a result becomes a status is the
// Spec's Conclude, and a Caller is whatever answers tool calls and hooks.
// It never decides a recovery (the machine does), never sends an event it
// has not numbered and logged first, never writes once its lease is lost,
// and imports nothing of completiond's above it (service, cmd).
package driver
