package driver

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// Checkpoints (recovery.Step.Checkpoint) of completions another replica may
// take over: the machine's state where it holds what the events do not
// show — a Session's conversation after its caller's answers, the calls
// its caller runs, a summary. The driver saves the last one of a leased
// completion in its log, with the seq of the last event before it; a
// takeover continues from it and the events after it.

// Checkpoint is what the driver saves: the machine's snapshot, with what
// the driver alone knows at that point.
type Checkpoint struct {
	// Machine is the machine's snapshot.
	Machine recovery.Snapshot `json:"machine"`
	// Held are the encoded events of the snapshot's undecided attempts
	// that settled delivery holds: output no caller has seen, which the
	// log does not have.
	Held [][]byte `json:"held,omitempty"`
	// Hooks is how many stop-hook requests the Session has sent.
	Hooks int `json:"hooks,omitempty"`
}

// saveCheckpoint saves the checkpoint snap of c's machine, if c may be
// taken over and still holds its lease.
func (c *Completion) saveCheckpoint(snap *recovery.Snapshot) {
	c.out.await() // the checkpoint is taken after the last event written
	if c.out.log == nil || c.out.stopped() {
		return
	}
	ck := Checkpoint{Machine: *snap}
	for _, a := range snap.Undecided {
		for _, ev := range c.out.unsettled[a] {
			b, err := proto.Marshal(ev)
			if err != nil {
				return // cannot happen: the service builds every event
			}
			ck.Held = append(ck.Held, b)
		}
	}
	ck.Hooks = c.out.hooks
	data, err := json.Marshal(ck)
	if err != nil {
		return // cannot happen: a snapshot is plain data
	}
	c.out.log.SaveCheckpoint(c.spec.ID, c.out.seq, data)
}

// DecodeCheckpoint reads what the driver saved.
func DecodeCheckpoint(data []byte) (Checkpoint, error) {
	var ck Checkpoint
	if err := json.Unmarshal(data, &ck); err != nil {
		return ck, fmt.Errorf("decode the checkpoint: %w", err)
	}
	return ck, nil
}

// HeldEvents decodes the held events of ck, by attempt: a takeover's
// Spec.Held.
func (ck Checkpoint) HeldEvents() (map[int][]*completionv1.CompletionEvent, error) {
	out := map[int][]*completionv1.CompletionEvent{}
	for _, b := range ck.Held {
		ev := &completionv1.CompletionEvent{}
		if err := proto.Unmarshal(b, ev); err != nil {
			return nil, fmt.Errorf("decode a held event: %w", err)
		}
		out[int(ev.GetAttempt())] = append(out[int(ev.GetAttempt())], ev)
	}
	return out, nil
}
