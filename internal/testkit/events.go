package testkit

import completionv1 "github.com/completiond/completiond/gen/completion/v1"

// Seqs are the seq numbers of evs, in order: what a test of the event
// logs compares (with slices.Equal).
func Seqs(evs []*completionv1.CompletionEvent) []uint64 {
	out := make([]uint64, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.GetSeq())
	}
	return out
}
