package recovery

import (
	"slices"
	"strings"
	"testing"
)

// wire replays a completion as callers see it on the wire, in both delivery
// modes at once, from the machine's steps alone — the way a driver that
// forwards and never infers would send it:
//
//   - live: every attempt's text as it streams; tool calls when delivered;
//   - settled: an attempt's text and tool calls only when delivered.
//
// Both callers drop the text of the attempts the transitions void. It
// checks the promises of the stream contract (docs/api.md) on every step, so the transcripts and
// the property test exercise them on every decision.
type wire struct {
	streamed  map[int]string     // the text each attempt streamed
	voided    map[int]bool       // attempts named by a transition's DiscardAttempts
	fate      map[int]string     // "deliver" or "void", from the steps
	settled   []string           // settled mode: the text sent, in order, per delivered attempt
	order     []int              // settled mode: the delivered attempts, in order
	calls     []ToolCall         // the tool calls sent, both modes
	turnCalls []ToolCall         // the tool calls sent since the last await-tools
	awaited   []ToolCall         // the calls of the last await-tools
	ids       map[string]bool    // tool call ids sent, to catch a call sent twice
	byAttempt map[int][]ToolCall // calls each attempt streamed
	attempt   int                // the last attempt handed out
	inflight  int                // the attempt whose event comes next, or 0
	summary   bool               // the attempt in flight is a summary: it streams nothing
	turn      int                // the last turn seen
	steps     int
	terminals int
	final     *Step
}

func (w *wire) init() {
	if w.streamed == nil {
		w.streamed, w.voided, w.fate = map[int]string{}, map[int]bool{}, map[int]string{}
		w.ids, w.byAttempt = map[string]bool{}, map[int][]ToolCall{}
	}
}

// feed records what the in-flight attempt streamed before ev reported it.
func (w *wire) feed(t testing.TB, ev Event) {
	t.Helper()
	w.init()
	if w.final != nil || w.inflight == 0 {
		return
	}
	switch ev.Kind {
	case EvAttemptDone, EvAttemptFailed, EvCancelled:
		if ev.NotSent {
			w.attempt-- // the number is handed out again
		} else if !w.summary {
			w.streamed[w.inflight] = ev.Text
			w.byAttempt[w.inflight] = ev.ToolCalls
		}
		w.inflight = 0
	case EvBudgetExceeded: // in place of the call: never sent
		w.attempt--
		w.inflight = 0
	}
}

// check verifies one step against the promises.
func (w *wire) check(t testing.TB, st Step) {
	t.Helper()
	w.init()
	w.steps++
	if w.final != nil {
		if st.Action.Result != w.final.Action.Result || len(st.Transitions) != len(w.final.Transitions) {
			t.Fatalf("after the finish, a different step: %+v", st)
		}
		return
	}
	w.checkNumbers(t, st)
	if st.Action.Kind == ActFinish {
		w.inflight = 0 // a driver that broke the protocol had a call in flight: it ends with the completion
	}
	w.checkFates(t, st)
	for i, tr := range st.Transitions {
		w.checkTransition(t, tr, i == len(st.Transitions)-1, st.Action.Kind)
	}
	switch a := st.Action; a.Kind {
	case ActCall, ActSummarize:
		if a.Call.Attempt != w.attempt+1 {
			t.Fatalf("attempt %d follows attempt %d", a.Call.Attempt, w.attempt)
		}
		w.attempt, w.inflight, w.summary = a.Call.Attempt, a.Call.Attempt, a.Kind == ActSummarize
		if a.Kind == ActCall && a.Call.Prefill != "" && !strings.HasSuffix(w.kept(), a.Call.Prefill) {
			t.Fatalf("prefill %q is not the end of the kept answer %q", a.Call.Prefill, w.kept())
		}
	case ActAwaitTools:
		if !sameCalls(w.turnCalls, a.ToolCalls) {
			t.Fatalf("await-tools %v, but the calls delivered for it are %v", a.ToolCalls, w.turnCalls)
		}
		w.awaited, w.turnCalls = a.ToolCalls, nil
	case ActFinish:
		w.checkResult(t, st)
	case ActWait:
		if a.Delay <= 0 {
			t.Fatalf("wait of %s", a.Delay)
		}
	}
}

// checkNumbers: attempt and turn numbers come from the machine, and never
// go backwards.
func (w *wire) checkNumbers(t testing.TB, st Step) {
	t.Helper()
	for _, tr := range st.Transitions {
		if tr.Turn < w.turn {
			t.Fatalf("%s at turn %d after turn %d", tr.Reason, tr.Turn, w.turn)
		}
		w.turn = tr.Turn
	}
	if st.Action.Turn < w.turn {
		t.Fatalf("action at turn %d after turn %d", st.Action.Turn, w.turn)
	}
	w.turn = st.Action.Turn
	want := w.attempt
	if k := st.Action.Kind; k == ActCall || k == ActSummarize {
		want = st.Action.Call.Attempt
	}
	if st.Action.Attempt != want {
		t.Fatalf("action numbered attempt %d, want %d", st.Action.Attempt, want)
	}
}

// checkFates: each attempt is delivered or voided once, never both, never
// before it ended; a delivered attempt is never voided afterwards.
func (w *wire) checkFates(t testing.TB, st Step) {
	t.Helper()
	for _, a := range st.Void {
		w.decide(t, a, "void")
	}
	last := 0
	for _, d := range st.Deliver {
		if d.Attempt <= last {
			t.Fatalf("deliveries out of order: %+v", st.Deliver)
		}
		last = d.Attempt
		w.decide(t, d.Attempt, "deliver")
		w.order = append(w.order, d.Attempt)
		w.settled = append(w.settled, w.streamed[d.Attempt])
		for _, c := range d.ToolCalls {
			if w.ids[c.ID] {
				t.Fatalf("tool call %s delivered twice", c.ID)
			}
			if !slices.ContainsFunc(w.byAttempt[d.Attempt], func(x ToolCall) bool { return x.ID == c.ID }) {
				t.Fatalf("tool call %s delivered for attempt %d, which did not make it", c.ID, d.Attempt)
			}
			w.ids[c.ID] = true
		}
		w.calls = append(w.calls, d.ToolCalls...)
		w.turnCalls = append(w.turnCalls, d.ToolCalls...)
	}
}

func (w *wire) decide(t testing.TB, a int, fate string) {
	t.Helper()
	switch {
	case a < 1 || a > w.attempt:
		t.Fatalf("%s of attempt %d, the last is %d", fate, a, w.attempt)
	case a == w.inflight:
		t.Fatalf("%s of attempt %d while it is in flight", fate, a)
	case w.fate[a] != "":
		t.Fatalf("%s of attempt %d, already %s", fate, a, w.fate[a])
	}
	w.fate[a] = fate
}

func (w *wire) checkTransition(t testing.TB, tr Transition, last bool, act ActionKind) {
	t.Helper()
	if tr.Terminal != tr.Reason.Terminal() {
		t.Fatalf("%s: terminal=%t", tr.Reason, tr.Terminal)
	}
	if tr.Terminal {
		w.terminals++
		if !last || act != ActFinish {
			t.Fatalf("terminal %s is not last before the finish", tr.Reason)
		}
	}
	if tr.Attempt != w.attempt {
		t.Fatalf("%s follows attempt %d, the last was %d", tr.Reason, tr.Attempt, w.attempt)
	}
	if tr.DiscardOutput != slices.Contains(tr.DiscardAttempts, tr.Attempt) || !slices.IsSorted(tr.DiscardAttempts) {
		t.Fatalf("%s: discard_output=%t discard=%v", tr.Reason, tr.DiscardOutput, tr.DiscardAttempts)
	}
	for _, a := range tr.DiscardAttempts {
		if a < 1 || a > w.attempt || w.voided[a] {
			t.Fatalf("%s voids attempt %d (last %d, voided %v)", tr.Reason, a, w.attempt, w.voided)
		}
		if w.fate[a] == "deliver" {
			t.Fatalf("%s voids attempt %d, which was delivered: settled delivery sent discarded output", tr.Reason, a)
		}
		w.voided[a] = true
	}
}

func (w *wire) checkResult(t testing.TB, st Step) {
	t.Helper()
	r := st.Action.Result
	n := len(st.Transitions)
	if n == 0 || !st.Transitions[n-1].Terminal || w.terminals != 1 {
		t.Fatalf("finish after %d terminal transition(s)", w.terminals)
	}
	if r.Reason != st.Transitions[n-1].Reason {
		t.Fatalf("result %s after transition %s", r.Reason, st.Transitions[n-1].Reason)
	}
	if got := w.kept(); r.Text != got {
		t.Fatalf("live: result text %q, but the kept deltas concatenate to %q", r.Text, got)
	}
	if got := strings.Join(w.settled, ""); r.Text != got {
		t.Fatalf("settled: result text %q, but the delivered attempts %v sent %q", r.Text, w.order, got)
	}
	for a := 1; a <= w.attempt; a++ {
		if w.fate[a] == "" {
			t.Fatalf("attempt %d was never delivered nor voided", a)
		}
	}
	if want := w.turnCalls; r.StopReason == StopToolUse {
		if len(want) == 0 {
			want = w.awaited // a Session that ended while the caller ran them
		}
		if !sameCalls(want, r.ToolCalls) {
			t.Fatalf("result calls %v, delivered %v", r.ToolCalls, want)
		}
	}
	if r.StopReason != StopToolUse && len(w.turnCalls) > 0 {
		t.Fatalf("calls %v delivered, but the answer stopped with %s", w.turnCalls, r.StopReason)
	}
	var total Usage
	for i, a := range r.Attempts {
		if a.Attempt != i+1 {
			t.Fatalf("attempt records %v", r.Attempts)
		}
		if a.Outcome == OutcomeAnswered && (w.voided[a.Attempt] || w.fate[a.Attempt] != "deliver") {
			t.Fatalf("attempt %d answered but voided", a.Attempt)
		}
		if a.Outcome == OutcomeDiscarded && w.streamed[a.Attempt] != "" && !w.voided[a.Attempt] {
			t.Fatalf("attempt %d discarded but never voided", a.Attempt)
		}
		total = total.Add(a.Usage)
	}
	if len(r.Attempts) != w.attempt {
		t.Fatalf("%d attempt records, %d attempts", len(r.Attempts), w.attempt)
	}
	if total != r.Usage {
		t.Fatalf("usage %+v, attempts add up to %+v", r.Usage, total)
	}
	w.final = &st
}

func sameCalls(a, b []ToolCall) bool {
	return slices.EqualFunc(a, b, func(x, y ToolCall) bool { return x.ID == y.ID && x.Name == y.Name })
}

// kept is the answer a live caller assembles: the deltas of every attempt
// that no transition voided, in order.
func (w *wire) kept() string {
	var sb strings.Builder
	for a := 1; a <= w.attempt; a++ {
		if !w.voided[a] {
			sb.WriteString(w.streamed[a])
		}
	}
	return sb.String()
}
