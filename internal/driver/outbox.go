package driver

import (
	"errors"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/recovery"
)

// outbox is the delivery half of the driver: it numbers a completion's
// events (seq 1, 2, 3 …; attempt and turn as the machine gives them), holds
// an attempt's output until the machine settles it, and sends. It infers
// nothing: what is sent and what is dropped comes from recovery.Step.
//
// Live delivery sends text and thinking deltas as they stream; settled
// delivery holds them. Tool calls are never held here: the machine hands
// the answer's calls over in Step.Deliver.
type outbox struct {
	send        func(*completionv1.CompletionEvent) error
	settled     bool                                    // DELIVERY_MODE_SETTLED
	unsettled   map[int][]*completionv1.CompletionEvent // settled mode: output by attempt, in stream order
	seq         uint64
	unreachable bool      // a send failed: the caller can no longer be reached
	log         fleet.Log // every numbered event, for Attach; nil keeps none
	id          string    // the completion's id in log
	// observe, when set, sees every numbered event before it is logged or
	// sent: a resumable Session registers there the calls and hook requests
	// its caller may answer, before any caller can read them from the log.
	observe func(*completionv1.CompletionEvent)
	// fence, when set, says whether this replica still holds the
	// completion's lease (Config.Leases). Once it does not, nothing more is
	// numbered, logged or sent (fenced): another replica may own the
	// completion, and the caller attaches there.
	fence  func() bool
	fenced bool
	// hooks counts the stop-hook requests numbered (with a takeover's
	// before them): what a checkpoint records, so that the replica that
	// takes a Session over names its next hook request anew.
	hooks int
	// pending, while not nil, is the first event's log write and send
	// (ahead), which overlap with what the driver does next; every
	// operation that numbers, logs or reads the send's outcome awaits it.
	pending *aheadWrite
	// open, when set, opens the log with the first event (Spec.Open).
	open func(*completionv1.CompletionEvent) func()
	// finishing, once the write ahead is awaited, is closed when its
	// goroutine ends.
	finishing chan struct{}
	// holding: the machine finishes (holdForEnd); the events numbered
	// since are held, the last fleet.EndWith of them (its tool calls and
	// transitions, the terminal one last, ahead of which a settled answer
	// may come in thousands of deltas, written as they come), and written
	// with the result in one log write (end), so that no log holds the
	// terminal transition without the result.
	holding bool
	held    []*completionv1.CompletionEvent
}

// aheadWrite is an event written and sent on a goroutine of its own
// (ahead): done is closed once it is, refused and sendFailed say how it
// went; finished, once what the log's open left to do (Spec.Open's then)
// is done too, and the goroutine ends. The outbox's own fields are the
// driver goroutine's alone; await applies these to them.
type aheadWrite struct {
	done, finished      chan struct{}
	refused, sendFailed bool
}

// ahead numbers ev and writes it to a shared log (Fenced: Redis), then
// sends it, on a goroutine of its own, so that the log's round trip
// overlaps with the driver's next steps (the breaker's admission, the
// upstream call) instead of delaying the first token by one more. Only the
// started event goes ahead: nothing is numbered after it before the write
// ends (await), so the log and the caller still get every event in seq
// order, and none before the log holds it. With Spec.Open, the write
// opens the log (its open's round trip, too, beside the upstream call).
// The goroutine ends by itself (a log write is bounded); every way out of
// Run awaits it (end).
func (o *outbox) ahead(ev *completionv1.CompletionEvent) {
	if o.open == nil && (o.log == nil || !o.log.Fenced()) { // a log in memory: no round trip to overlap
		o.sendNumbered(ev)
		return
	}
	if o.stopped() {
		return
	}
	o.number(ev)
	w := &aheadWrite{done: make(chan struct{}), finished: make(chan struct{})}
	o.pending = w
	log, id, send, open := o.log, o.id, o.send, o.open
	go func() {
		defer close(w.finished)
		if then := w.write(log, id, send, open, ev); then != nil {
			then()
		}
	}()
}

// write logs ev (opening the log with it, with open) and sends it, then
// closes done; it returns what open left to do.
func (w *aheadWrite) write(log fleet.Log, id string, send func(*completionv1.CompletionEvent) error, open func(*completionv1.CompletionEvent) func(), ev *completionv1.CompletionEvent) (then func()) {
	defer close(w.done)
	if open != nil {
		then = open(ev)
	} else if err := log.Append(id, ev); errors.Is(err, fleet.ErrFenced) {
		w.refused = true
		return nil
	}
	w.sendFailed = send(ev) != nil
	return then
}

// await waits for the write ahead, if any, and takes in its outcome.
func (o *outbox) await() {
	w := o.pending
	if w == nil {
		return
	}
	<-w.done
	o.pending = nil
	o.finishing = w.finished
	if w.refused {
		o.fenced, o.unreachable = true, true
	}
	if w.sendFailed {
		o.unreachable = true
	}
}

// awaitAll is await, which also waits for the goroutine of the write
// ahead to end: what it did after the write is done before the log ends.
func (o *outbox) awaitAll() {
	o.await()
	if o.finishing != nil {
		<-o.finishing
		o.finishing = nil
	}
}

// output takes one delta of an attempt (its number and turn, as the
// action that runs it says): sent at once when live, held when settled. It
// returns ErrCallerGone once the caller is unreachable, which stops the
// upstream call. It takes the two numbers, not the action: the callback
// of every upstream call captures what it passes here, and so keeps it
// on the heap for as long as the attempt lasts.
func (o *outbox) output(attempt, turn int, kind completionv1.DeltaKind, text string) error {
	ev := &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Kind: kind, Text: text}}}
	if o.settled {
		ev.Attempt, ev.Turn = int32(attempt), int32(turn)
		o.unsettled[attempt] = append(o.unsettled[attempt], ev)
		return nil
	}
	o.event(attempt, turn, ev)
	if o.unreachable {
		return ErrCallerGone
	}
	return nil
}

// settle does what a step says of the output: drop the held output of the
// attempts in Void, send that of the attempts in Deliver, each followed by
// the tool calls the machine delivers with it.
func (o *outbox) settle(step recovery.Step) {
	for _, a := range step.Void {
		delete(o.unsettled, a)
	}
	for _, d := range step.Deliver {
		for _, ev := range o.unsettled[d.Attempt] {
			o.sendNumbered(ev)
		}
		delete(o.unsettled, d.Attempt)
		for _, tc := range d.ToolCalls {
			o.event(d.Attempt, step.Action.Turn, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_ToolCall{ToolCall: convert.FromToolCall(tc)}})
		}
	}
}

// event numbers ev with attempt and turn and sends it.
func (o *outbox) event(attempt, turn int, ev *completionv1.CompletionEvent) {
	ev.Attempt, ev.Turn = int32(attempt), int32(turn)
	o.sendNumbered(ev)
}

// hookRequest is event for a stop-hook request, which it counts when it
// is numbered: the per-token path does not look at every event for it.
func (o *outbox) hookRequest(attempt, turn int, ev *completionv1.CompletionEvent) {
	if !o.stopped() {
		o.hooks++
	}
	o.event(attempt, turn, ev)
}

// sendNumbered gives ev the next seq, appends it to the log and sends it,
// unless the caller is gone. The log keeps the events a caller that left
// did not receive, so that an attacher sees the completion to its end.
func (o *outbox) sendNumbered(ev *completionv1.CompletionEvent) {
	o.await()
	if o.stopped() {
		return
	}
	o.number(ev)
	if !o.holding {
		o.write(ev)
		return
	}
	o.held = append(o.held, ev)
	if len(o.held) > fleet.EndWith {
		first := o.held[0]
		copy(o.held, o.held[1:])
		o.held = o.held[:fleet.EndWith]
		o.write(first)
	}
}

// write appends ev, numbered, to the log and sends it, unless the log
// refuses it.
func (o *outbox) write(ev *completionv1.CompletionEvent) {
	if o.log != nil && o.refused(o.log.Append(o.id, ev)) {
		return
	}
	o.deliver(ev)
}

// holdForEnd holds the events numbered from now on for the result's
// write (end): the machine finishes, and its last step's events, the
// terminal transition among them, must reach the log with the result or
// not at all. A replica that died between the two would leave a log that
// looks live, and another replica would take the completion over and run
// it again.
func (o *outbox) holdForEnd() { o.holding = true }

// End numbers the result event, ends the log with the events held
// (holdForEnd), it and the encoded status the completion ends with, in one
// write, and sends them.
func (o *outbox) end(attempt, turn int, result *completionv1.CompletionEvent, status []byte) {
	result.Attempt, result.Turn = int32(attempt), int32(turn)
	o.awaitAll()
	held := o.held
	o.held, o.holding = nil, false
	if o.stopped() {
		return
	}
	o.number(result)
	if o.log != nil && o.refused(o.log.End(o.id, held, result, status)) {
		return
	}
	for _, ev := range held {
		o.deliver(ev)
	}
	o.deliver(result)
}

// refused reports whether the log refused an event (fleet.ErrFenced: a
// replica that was paused past its lease, whose completion another one
// took over): the event is in no log, so no caller may see it; the
// replica stops as when its lease is lost, and its caller attaches to
// the new owner after the last event it received.
func (o *outbox) refused(err error) bool {
	if errors.Is(err, fleet.ErrFenced) {
		o.fenced, o.unreachable = true, true
		return true
	}
	return false
}

// stopped reports whether the replica lost the completion's lease: it
// stops writing, and the caller can no longer be served from here.
func (o *outbox) stopped() bool {
	if !o.fenced && o.fence != nil && !o.fence() {
		o.fenced, o.unreachable = true, true
	}
	return o.fenced
}

func (o *outbox) number(ev *completionv1.CompletionEvent) {
	o.seq++
	ev.Seq = o.seq
	if o.observe != nil {
		o.observe(ev)
	}
}

// deliver sends ev, unless the caller is gone.
func (o *outbox) deliver(ev *completionv1.CompletionEvent) {
	if o.unreachable {
		return
	}
	if err := o.send(ev); err != nil {
		o.unreachable = true
	}
}

// callerGone reports whether a send failed (as far as is known: a write
// ahead's own send is known once awaited).
func (o *outbox) callerGone() bool { return o.unreachable }
