package driver

import (
	"slices"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/testkit"
)

// refusingLog refuses every write from seq from on, as a fenced log does
// once another replica owns the completion.
type refusingLog struct {
	*fleet.MemLog
	from uint64
}

func (r refusingLog) Append(id string, ev *completionv1.CompletionEvent) error {
	if ev.GetSeq() >= r.from {
		return fleet.ErrFenced
	}
	return r.MemLog.Append(id, ev)
}

func (r refusingLog) End(id string, ev *completionv1.CompletionEvent, status []byte) error {
	if ev.GetSeq() >= r.from {
		return fleet.ErrFenced
	}
	return r.MemLog.End(id, ev, status)
}

// TestOutboxSendsNothingTheLogRefused: an event the log refuses (a
// replica paused past its lease wakes to find another owner) reaches no
// caller, nor does any after it, and the outbox is fenced: the caller
// attaches to the new owner after the last event it received.
func TestOutboxSendsNothingTheLogRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		from uint64
		want []uint64
	}{
		{"a delta refused", 3, []uint64{1, 2}},
		{"the result refused", 4, []uint64{1, 2, 3}},
		{"nothing refused", 9, []uint64{1, 2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := fleet.NewMemLog(config.EventLogLimits{}, time.Now)
			if err := mem.Open("c", fleet.Meta{}); err != nil {
				t.Fatal(err)
			}
			var sent []*completionv1.CompletionEvent
			o := &outbox{id: "c", log: refusingLog{mem, tc.from}, send: func(ev *completionv1.CompletionEvent) error {
				sent = append(sent, ev)
				return nil
			}}
			for range 3 {
				if err := o.output(1, 0, completionv1.DeltaKind_DELTA_KIND_TEXT, "w"); err != nil && tc.from > 3 {
					t.Fatalf("output: %v", err)
				}
			}
			o.end(1, 0, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{}}, nil)
			if got := testkit.Seqs(sent); !slices.Equal(got, tc.want) {
				t.Errorf("sent %v, want %v", got, tc.want)
			}
			if fenced := tc.from <= 4; o.fenced != fenced || o.callerGone() != fenced {
				t.Errorf("fenced %t, caller gone %t; want %t", o.fenced, o.callerGone(), fenced)
			}
		})
	}
}
