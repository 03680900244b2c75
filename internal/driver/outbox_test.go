package driver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
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

func (r refusingLog) End(id string, before []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent, status []byte) error {
	if first := append(slices.Clip(before), ev)[0]; first.GetSeq() >= r.from {
		return fleet.ErrFenced
	}
	return r.MemLog.End(id, before, ev, status)
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

// sharedLog is a MemLog that answers Fenced as a shared (Redis) log does,
// and holds the write of seq 1 until its gate opens.
type sharedLog struct {
	*fleet.MemLog
	gate    chan struct{}
	refuse1 bool
	mu      sync.Mutex
	order   []uint64 // seqs, as Append and End took them
}

func (s *sharedLog) Fenced() bool { return true }

func (s *sharedLog) Append(id string, ev *completionv1.CompletionEvent) error {
	if ev.GetSeq() == 1 {
		<-s.gate
		if s.refuse1 {
			return fleet.ErrFenced
		}
	}
	s.mu.Lock()
	s.order = append(s.order, ev.GetSeq())
	s.mu.Unlock()
	return s.MemLog.Append(id, ev)
}

func (s *sharedLog) End(id string, before []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent, status []byte) error {
	s.mu.Lock()
	for _, b := range before {
		s.order = append(s.order, b.GetSeq())
	}
	s.order = append(s.order, ev.GetSeq())
	s.mu.Unlock()
	return s.MemLog.End(id, before, ev, status)
}

// gatedScript is a provider that says when it is called, then answers one
// word.
type gatedScript struct{ called chan struct{} }

func (g *gatedScript) Kind() string { return "script" }

func (g *gatedScript) Stream(_ context.Context, _ *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	close(g.called)
	if err := emit(provider.Chunk{Kind: provider.ChunkText, Text: "hello"}); err != nil {
		return provider.Finish{}, err
	}
	return provider.Finish{StopReason: recovery.StopEndTurn, Model: "scripted-1"}, nil
}

// recorder is a Send that keeps every event it is given.
type recorder struct {
	mu   sync.Mutex
	sent []*completionv1.CompletionEvent
}

func (r *recorder) send(ev *completionv1.CompletionEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, ev)
	return nil
}

func (r *recorder) events() []*completionv1.CompletionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

// runUntilCalled runs the completion of sp on a goroutine of its own,
// sending to a recorder, until its upstream up is called, which must not
// wait for holding (what holds the first event back); nothing may have
// been sent by then. done receives Run's error.
func runUntilCalled(t *testing.T, sp Spec, up *gatedScript, holding string) (c *Completion, rec *recorder, done <-chan error) {
	t.Helper()
	rec = &recorder{}
	sp.Send = rec.send
	c = New(sp)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background())
		errs <- err
	}()
	select {
	case <-up.called:
	case <-time.After(10 * time.Second):
		t.Fatalf("the upstream call waited for %s", holding)
	}
	if n := len(rec.events()); n != 0 {
		t.Errorf("%d events sent before %s was done", n, holding)
	}
	return c, rec, errs
}

// TestStartedIsWrittenAheadOfTheCall: on a shared log, the upstream call
// starts while the started event's write is still in flight (one round
// trip fewer before the first token), yet nothing is logged or sent out
// of seq order, and no event before the log holds it. A started event the
// log refuses reaches no caller, nor does anything after it.
func TestStartedIsWrittenAheadOfTheCall(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%t", refuse), func(t *testing.T) {
			testkit.NoLeaks(t)
			mem := fleet.NewMemLog(config.EventLogLimits{}, time.Now)
			if err := mem.Open("cmpl_test", fleet.Meta{}); err != nil {
				t.Fatal(err)
			}
			log := &sharedLog{MemLog: mem, gate: make(chan struct{}), refuse1: refuse}
			up := &gatedScript{called: make(chan struct{})}
			sp := spec(up, nil)
			sp.Log = log
			c, rec, done := runUntilCalled(t, sp, up, "the started event's write")
			close(log.gate)
			if err := <-done; err != nil && !refuse {
				t.Fatal(err)
			}
			sent := rec.events()
			got := testkit.Seqs(sent)
			switch {
			case refuse && len(got) != 0:
				t.Errorf("sent seqs %v after the log refused the started event, want none", got)
			case !refuse && (len(got) < 3 || sent[0].GetStarted() == nil || sent[1].GetDelta().GetText() != "hello"):
				t.Errorf("sent %v, want started, the word, … the result", sent)
			case !refuse:
				for i, seq := range got {
					if seq != uint64(i+1) {
						t.Fatalf("sent seqs %v, want 1, 2, 3 …", got)
					}
				}
				if !slices.Equal(log.order, got) {
					t.Errorf("logged seqs %v, sent %v: want the same, in order", log.order, got)
				}
			}
			if refuse != c.Fenced() {
				t.Errorf("fenced %t, want %t", c.Fenced(), refuse)
			}
		})
	}
}

// TestOpenGoesAheadWithTheStartedEvent: with Spec.Open, the log opens
// with the started event on the goroutine that writes it ahead: the
// upstream call starts while the open is in flight, nothing is sent or
// logged before it returns, the started event is not appended a second
// time, and what the open leaves to do runs beside the completion, done
// before the result is logged.
func TestOpenGoesAheadWithTheStartedEvent(t *testing.T) {
	testkit.NoLeaks(t)
	mem := fleet.NewMemLog(config.EventLogLimits{}, time.Now)
	log := &sharedLog{MemLog: mem, gate: make(chan struct{})}
	close(log.gate)
	up := &gatedScript{called: make(chan struct{})}
	opening, opened, joining := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var joined bool
	sp := spec(up, nil)
	sp.Log = log
	sp.Open = func(first *completionv1.CompletionEvent) func() {
		<-opening
		if err := mem.Open(sp.ID, fleet.Meta{}); err != nil {
			t.Error(err)
		}
		mem.Append(sp.ID, first)
		close(opened)
		return func() {
			<-joining
			joined = true
		}
	}
	_, rec, done := runUntilCalled(t, sp, up, "the log's open")
	close(opening)
	<-opened
	select {
	case err := <-done:
		t.Fatalf("Run ended (%v) before what the open left to do was done", err)
	case <-time.After(50 * time.Millisecond): // the result waits for it
	}
	close(joining)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !joined {
		t.Error("what the open left to do did not run")
	}
	sent := rec.events()
	got := testkit.Seqs(sent)
	if len(got) < 3 || sent[0].GetStarted() == nil || sent[len(sent)-1].GetResult() == nil {
		t.Errorf("sent %v, want started, the word … the result", sent)
	}
	for i, seq := range got {
		if seq != uint64(i+1) {
			t.Fatalf("sent seqs %v, want 1, 2, 3 …", got)
		}
	}
	if !slices.Equal(log.order, got[1:]) {
		t.Errorf("appended seqs %v, want %v: every event but the started one, which the open logged", log.order, got[1:])
	}
	page, err := mem.Read(sp.ID, 0)
	if err != nil || !slices.Equal(testkit.Seqs(page.Events), got) {
		t.Errorf("the log holds %v (%v), want %v", page.Events, err, got)
	}
}

// writesLog is a MemLog that records its writes: the seqs each Append and
// End took, End's in one.
type writesLog struct {
	*fleet.MemLog
	writes [][]uint64
	logged map[uint64]bool
}

func (w *writesLog) Append(id string, ev *completionv1.CompletionEvent) error {
	w.writes = append(w.writes, []uint64{ev.GetSeq()})
	w.logged[ev.GetSeq()] = true
	return w.MemLog.Append(id, ev)
}

func (w *writesLog) End(id string, before []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent, status []byte) error {
	seqs := append(testkit.Seqs(before), ev.GetSeq())
	w.writes = append(w.writes, seqs)
	for _, s := range seqs {
		w.logged[s] = true
	}
	return w.MemLog.End(id, before, ev, status)
}

// TestOutboxEndWritesTheFinishingStepWithTheResult: once the machine
// finishes (holdForEnd), the events numbered are held and go to the log
// in one write with the result, the last fleet.EndWith of them (earlier ones,
// a settled answer's thousands of deltas, are written as they come); each
// event is sent once the log holds it, in seq order.
func TestOutboxEndWritesTheFinishingStepWithTheResult(t *testing.T) {
	for _, held := range []int{0, 1, fleet.EndWith, fleet.EndWith + 3} {
		t.Run(fmt.Sprint(held, " held"), func(t *testing.T) {
			mem := fleet.NewMemLog(config.EventLogLimits{}, time.Now)
			if err := mem.Open("c", fleet.Meta{}); err != nil {
				t.Fatal(err)
			}
			log := &writesLog{MemLog: mem, logged: map[uint64]bool{}}
			var sent []uint64
			o := &outbox{id: "c", log: log, send: func(ev *completionv1.CompletionEvent) error {
				if !log.logged[ev.GetSeq()] {
					t.Errorf("seq %d sent before the log held it", ev.GetSeq())
				}
				sent = append(sent, ev.GetSeq())
				return nil
			}}
			for range 2 {
				if err := o.output(1, 1, completionv1.DeltaKind_DELTA_KIND_TEXT, "w"); err != nil {
					t.Fatal(err)
				}
			}
			o.holdForEnd()
			for range held {
				o.event(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{}}})
			}
			o.end(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{}}, nil)
			n := uint64(2 + held + 1)
			var want [][]uint64
			for s := uint64(1); s <= n-1-uint64(min(held, fleet.EndWith)); s++ {
				want = append(want, []uint64{s})
			}
			var last []uint64
			for s := n - uint64(min(held, fleet.EndWith)); s <= n; s++ {
				last = append(last, s)
			}
			want = append(want, last)
			if !slices.EqualFunc(log.writes, want, slices.Equal) {
				t.Errorf("writes %v, want %v", log.writes, want)
			}
			if len(sent) != int(n) || !slices.IsSorted(sent) || sent[0] != 1 {
				t.Errorf("sent %v, want 1 to %d", sent, n)
			}
		})
	}
}
