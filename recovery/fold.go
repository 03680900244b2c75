package recovery

import "strings"

// PriorFold rebuilds the Prior of a takeover from the event log of the
// replica that was lost: the driver feeds it the logged events in log
// order, one call per event, and then asks for the Prior. It reads those
// events as what the machine had decided — which attempts it kept and
// which it voided, the route and max_tokens its transitions chose, what
// the attempt in flight had streamed — so that no driver interprets the
// machine's decisions a second time.
//
// With a checkpoint (Prior.Base), the log given is what follows it, and
// base is the last attempt the checkpoint settled: the events of attempts
// up to base, transitions apart, are the checkpoint's and count for
// nothing here. The Prior's Base and Incomplete are the driver's to set.
//
// The zero PriorFold folds a log without a checkpoint. Not safe for
// concurrent use.
type PriorFold struct {
	base      int                      // the last attempt the checkpoint settled, or 0
	attempt   int                      // the last attempt number handed out, as far as the log shows
	turn      int                      // the last turn reached
	route     string                   // the route the completion started on or a transition moved to last
	maxTokens int                      // the max_tokens of the last transition that set one, or 0
	settled   int                      // the attempt of the last transition: up to it, nothing is in flight
	calledOn  map[int]string           // the route each attempt after base was called on
	text      map[int]*strings.Builder // the answer text each attempt streamed, if it streamed any
	usage     map[int]Usage            // the usage each attempt reported
	voided    map[int]bool             // the attempts a transition voided
}

// NewPriorFold returns a fold of the events logged after a checkpoint that
// settled the attempts up to base (0: no checkpoint, the whole log).
func NewPriorFold(base int) *PriorFold {
	return &PriorFold{base: base}
}

// see takes the numbers of an event of attempt a in turn: the turn is
// reached, the attempt number handed out, and the attempt, if new, was
// called on the current route. It reports whether the event counts: one
// of an attempt the checkpoint settled counts only if it is a transition.
func (f *PriorFold) see(a, turn int, transition bool) bool {
	if f.calledOn == nil {
		f.calledOn, f.text, f.usage, f.voided = map[int]string{}, map[int]*strings.Builder{}, map[int]Usage{}, map[int]bool{}
	}
	f.turn = max(f.turn, turn)
	if f.base > 0 && a <= f.base && !transition {
		return false
	}
	f.attempt = max(f.attempt, a)
	if a > f.base && f.calledOn[a] == "" {
		f.calledOn[a] = f.route
	}
	return true
}

// Started folds the event that opened the completion (Started): the
// machine's first call went to route. attempt and turn are the event's
// numbers, as for every event.
func (f *PriorFold) Started(attempt, turn int, route string) {
	if f.see(attempt, turn, false) {
		f.route = route
	}
}

// Text folds a piece of answer text that attempt streamed (a text delta;
// thinking is not part of the answer: fold it with Other). Whether the
// answer keeps it is decided by the transitions that follow: kept unless
// one voids the attempt, continued or voided by the takeover if none
// settled the attempt.
func (f *PriorFold) Text(attempt, turn int, text string) {
	if !f.see(attempt, turn, false) {
		return
	}
	b := f.text[attempt]
	if b == nil {
		b = &strings.Builder{}
		f.text[attempt] = b
	}
	b.WriteString(text)
}

// Usage folds the tokens attempt reported when it ended; a later report of
// the same attempt replaces an earlier one.
func (f *PriorFold) Usage(attempt, turn int, u Usage) {
	if f.see(attempt, turn, false) {
		f.usage[attempt] = u
	}
}

// Transition folds a transition the machine decided after attempt (the
// attempt the transition carries): the output of the attempts in
// discarded is void (Transition.DiscardAttempts), the next call goes to
// toRoute ("": the route does not change) with maxTokens (0: unchanged),
// and no attempt up to attempt is in flight any more. Transitions count
// even for attempts the checkpoint settled.
func (f *PriorFold) Transition(attempt, turn int, discarded []int, toRoute string, maxTokens int) {
	f.see(attempt, turn, true)
	for _, d := range discarded {
		f.voided[d] = true
	}
	if toRoute != "" {
		f.route = toRoute
	}
	if maxTokens > 0 {
		f.maxTokens = maxTokens
	}
	f.settled = attempt
}

// Other folds any other event (a thinking delta, a tool call, a stop hook
// request, the result): only its numbers count, the attempt handed out and
// the turn reached.
func (f *PriorFold) Other(attempt, turn int) {
	f.see(attempt, turn, false)
}

// Prior returns what the events folded so far say the machine had done:
// the last attempt handed out and the turn; the route and max_tokens the
// next call would have used; the attempt in flight (one after the last
// transition and the checkpoint) with the text it streamed; the text of
// every other attempt no transition voided, as the answer kept so far; and
// every attempt settled since the checkpoint, reported failed with its
// usage, on the route it was called on. route looks a route up by name: a
// name it does not know is reported as a Route with that name only. The
// fold can go on after Prior.
func (f *PriorFold) Prior(route func(name string) (Route, bool)) Prior {
	p := Prior{Attempt: f.attempt, Turn: f.turn, Route: f.route, MaxTokens: f.maxTokens}
	p.InFlight = f.attempt > max(f.settled, f.base)
	for a := f.base + 1; a <= f.attempt; a++ {
		text := f.text[a]
		if p.InFlight && a == f.attempt {
			if text != nil {
				p.Streamed = text.String()
			}
			break
		}
		if text != nil && !f.voided[a] {
			p.Kept = append(p.Kept, Kept{Attempt: a, Text: text.String(), OutputTokens: f.usage[a].OutputTokens})
		}
		r, ok := route(f.calledOn[a])
		if !ok {
			r = Route{Name: f.calledOn[a]}
		}
		p.Attempts = append(p.Attempts, AttemptRecord{Attempt: a, Route: r, Outcome: OutcomeFailed, Usage: f.usage[a]})
		p.Usage = p.Usage.Add(f.usage[a])
	}
	return p
}
