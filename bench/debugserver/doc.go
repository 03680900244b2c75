// Package debugserver serves a process's goroutine count, where its memory
// is (heap and goroutine stacks) and its pprof profiles over HTTP, so that
// the load benchmark can read what /proc does not show and profile a server
// under load from outside it.
//
// The bare relay starts it from the environment (ListenFromEnv), the mock
// from a flag; completiond starts it only in the binary the load benchmark
// builds, through a file added with go build -overlay (see package
// harness), so that the server as shipped has no such listener.
package debugserver
