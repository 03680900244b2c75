package client

import (
	"slices"
	"strings"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Fold folds the events of one completion into its answer, event by event,
// as the stream contract defines it. The zero value is ready to use; it is
// not safe for concurrent use.
type Fold struct {
	completionID string
	lastSeq      uint64
	turn         int32
	reason       completionv1.TransitionReason
	transitions  []*completionv1.Transition
	discarded    map[int32]bool
	pieces       []piece
	calls        []turnCall
	result       *completionv1.Result
}

// piece is one delta, kept until the end because a later transition may
// void its attempt.
type piece struct {
	attempt, turn int32
	kind          completionv1.DeltaKind
	text          string
}

// turnCall is one tool_call event with its turn.
type turnCall struct {
	turn int32
	call *completionv1.ToolCall
}

// Turn is the kept output of one conversation turn.
type Turn struct {
	// Turn is the turn's number (1-based).
	Turn int32
	// Text is the turn's kept text deltas, in arrival order.
	Text string
	// Thinking is the turn's kept reasoning deltas, in arrival order.
	Thinking string
	// ToolCalls are the turn's tool calls, in arrival order.
	ToolCalls []*completionv1.ToolCall
}

// Add folds ev in. It reports false, and changes nothing, for an event
// whose seq is not above the last one folded: a stream that attached again
// may repeat events.
func (f *Fold) Add(ev *completionv1.CompletionEvent) bool {
	if ev.GetSeq() != 0 && ev.GetSeq() <= f.lastSeq {
		return false
	}
	f.lastSeq = ev.GetSeq()
	f.turn = max(f.turn, ev.GetTurn())
	switch e := ev.GetEvent().(type) {
	case *completionv1.CompletionEvent_Started:
		f.completionID = e.Started.GetCompletionId()
	case *completionv1.CompletionEvent_Delta:
		f.pieces = append(f.pieces, piece{ev.GetAttempt(), ev.GetTurn(), e.Delta.GetKind(), e.Delta.GetText()})
	case *completionv1.CompletionEvent_ToolCall:
		f.calls = append(f.calls, turnCall{ev.GetTurn(), e.ToolCall})
	case *completionv1.CompletionEvent_Transition:
		f.transition(e.Transition)
	case *completionv1.CompletionEvent_Result:
		f.result = e.Result
	}
	return true
}

func (f *Fold) transition(t *completionv1.Transition) {
	f.transitions = append(f.transitions, t)
	if t.GetTerminal() {
		f.reason = t.GetReason()
	}
	for _, a := range t.GetDiscardedAttempts() {
		if f.discarded == nil {
			f.discarded = map[int32]bool{}
		}
		f.discarded[a] = true
	}
}

// CompletionID is the completion's id, from its started event.
func (f *Fold) CompletionID() string { return f.completionID }

// LastSeq is the seq of the last event folded: the after_seq of an Attach
// that misses nothing.
func (f *Fold) LastSeq() uint64 { return f.lastSeq }

// Reason is the terminal transition's reason; UNSPECIFIED until it arrives.
func (f *Fold) Reason() completionv1.TransitionReason { return f.reason }

// Transitions are every transition folded, in order.
func (f *Fold) Transitions() []*completionv1.Transition { return f.transitions }

// Result is the completion's result; nil until it arrives.
func (f *Fold) Result() *completionv1.Result { return f.result }

// Done reports whether the result has arrived.
func (f *Fold) Done() bool { return f.result != nil }

// Discarded reports whether a transition voided attempt's output.
func (f *Fold) Discarded(attempt int32) bool { return f.discarded[attempt] }

// DiscardedAttempts are the attempts any transition discarded, ascending.
func (f *Fold) DiscardedAttempts() []int32 {
	out := make([]int32, 0, len(f.discarded))
	for a := range f.discarded {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Turns are the kept output of each turn that has some, ascending by turn.
func (f *Fold) Turns() []Turn {
	var turns []Turn
	at := func(n int32) *Turn {
		i, found := slices.BinarySearchFunc(turns, n, func(t Turn, n int32) int { return int(t.Turn - n) })
		if !found {
			turns = slices.Insert(turns, i, Turn{Turn: n})
		}
		return &turns[i]
	}
	text, thinking := map[int32]*strings.Builder{}, map[int32]*strings.Builder{}
	builder := func(m map[int32]*strings.Builder, n int32) *strings.Builder {
		if m[n] == nil {
			m[n] = &strings.Builder{}
		}
		return m[n]
	}
	for _, p := range f.pieces {
		if f.discarded[p.attempt] {
			continue
		}
		at(p.turn)
		if p.kind == completionv1.DeltaKind_DELTA_KIND_THINKING {
			builder(thinking, p.turn).WriteString(p.text)
		} else {
			builder(text, p.turn).WriteString(p.text)
		}
	}
	for _, c := range f.calls {
		t := at(c.turn)
		t.ToolCalls = append(t.ToolCalls, c.call)
	}
	for i := range turns {
		if b := text[turns[i].Turn]; b != nil {
			turns[i].Text = b.String()
		}
		if b := thinking[turns[i].Turn]; b != nil {
			turns[i].Thinking = b.String()
		}
	}
	return turns
}

// Turn is the turn of the latest event folded (0 before any).
func (f *Fold) Turn() int32 { return f.turn }

// Text is the answer so far: every kept text delta, in arrival order, of
// every turn. At the end it equals the text of the result's message (in a
// Session the result's message holds the text of all turns; Turns splits
// it).
func (f *Fold) Text() string { return f.kept(false) }

// Thinking is the model's reasoning so far: every kept thinking delta
// (DELTA_KIND_THINKING), in arrival order, of every turn; Turns splits it.
func (f *Fold) Thinking() string { return f.kept(true) }

// kept is the kept thinking deltas, or the kept text deltas, of every turn.
func (f *Fold) kept(thinking bool) string {
	var b strings.Builder
	for _, p := range f.pieces {
		if (p.kind == completionv1.DeltaKind_DELTA_KIND_THINKING) == thinking && !f.discarded[p.attempt] {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// StrippedBlocks are the media blocks the transitions replaced by a
// placeholder because an upstream rejected them: every transition's
// stripped_blocks ("messages[i].content[j]"), in order.
func (f *Fold) StrippedBlocks() []string {
	var out []string
	for _, t := range f.transitions {
		out = append(out, t.GetStrippedBlocks()...)
	}
	return out
}

// ToolCalls are the latest turn's tool calls.
func (f *Fold) ToolCalls() []*completionv1.ToolCall { return f.lastTurn().ToolCalls }

func (f *Fold) lastTurn() Turn {
	turns := f.Turns()
	if n := len(turns); n > 0 && turns[n-1].Turn == f.turn {
		return turns[n-1]
	}
	return Turn{Turn: f.turn}
}
