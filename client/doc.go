// Package client is the Go client library of completiond.
//
// It wraps the generated stubs (gen/completion/v1) with what every caller
// would otherwise write again:
//
//   - [Fold] folds a completion's events into its answer exactly as the
//     stream contract says: deltas belong to their attempt and turn, a
//     transition's discarded_attempts voids every delta of those attempts
//     (already received or still to come), tool calls are final when they
//     arrive, and an event seen twice (after a reconnect) is ignored.
//   - [Error] is a failed status made typed: the terminal transition reason
//     from errdetails.ErrorInfo, whether the same request may succeed later
//     (RetryInfo) and after how long, the field violations of a refused
//     request, and the result when the stream carried one.
//   - [Client.Stream] streams a completion as typed events and keeps a Fold;
//     a request with resume_grace survives a dropped connection: the stream
//     attaches again after its last seq (Attach), so the application sees one
//     uninterrupted stream.
//   - [Client.RunSession] runs a Session tool loop with callbacks for tool
//     calls and stop hooks.
//
// The Python (clients/python) and TypeScript (clients/node) libraries have the
// same parts, and all three are tested on the same golden transcripts
// recorded from the real server (clients/testdata).
package client
