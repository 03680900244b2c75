// Package guard keeps upstreams and callers from hurting each other: the
// circuit breaker of every route (Breakers; local, or shared by a fleet's
// replicas through Redis, local again while Redis does not answer) and the
// concurrency and rate limits of every authenticated key (KeyLimits, local
// or shared the same way).
//
// A limit says no with a typed *Refusal (reason, key, when to retry); it
// never builds a gRPC status — the service maps a Refusal to one in one
// place. guard imports nothing of completiond's but config and recovery.
package guard
