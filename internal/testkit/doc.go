// Package testkit holds the helpers that the tests of several packages
// share: a log sink safe for concurrent writers, the JSON lines of a log,
// /dev/null for benchmarks, whether the race detector is on.
//
// It is imported by tests only, and imports nothing of completiond's.
package testkit
