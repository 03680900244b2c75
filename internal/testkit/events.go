package testkit

import (
	"errors"
	"io"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Seqs are the seq numbers of evs, in order: what a test of the event
// logs compares (with slices.Equal).
func Seqs(evs []*completionv1.CompletionEvent) []uint64 {
	out := make([]uint64, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.GetSeq())
	}
	return out
}

// Drain receives from st until it ends: the events, and the status the
// stream ended with (nil for an OK end).
func Drain[T any](st interface{ Recv() (*T, error) }) ([]*T, error) {
	var out []*T
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}
