// Package debugserver serves a process's goroutine count and its pprof
// profiles over HTTP, so that the load benchmark can read what /proc does
// not show (goroutines) and profile a server under load from outside it.
//
// The bare relay and the mock upstream start it from a flag; completiond
// starts it only in the binary the load benchmark builds, through a file
// added with go build -overlay (see package harness), so that the shipped
// server has no such listener.
package debugserver
