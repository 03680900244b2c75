package recovery

import (
	"fmt"
	"slices"
)

// Prior is what a completion had done when the replica that ran it was
// lost, as another replica rebuilds it from the completion's event log: the
// numbering to continue, the answer kept so far, and the attempt that was
// streaming, if one was. The driver folds the log's events into it with a
// PriorFold; the machine decides what follows (see Takeover).
type Prior struct {
	// Attempt is the last attempt number handed out (0 before the first
	// call); the next call is Attempt+1.
	Attempt int
	// Turn is the turn in progress (1-based; 0 is taken as 1).
	Turn int
	// Route names the route of the last call, or the route a transition
	// moved to since; "" or an unknown name is Config.Routes[0].
	Route string
	// MaxTokens is the max_tokens of the last transition or call; 0 keeps
	// the configured one.
	MaxTokens int
	// Kept are the earlier attempts whose text is part of the answer so far
	// (kept by STREAM_RESUME), in order. They are the partial answer a
	// prefill continues.
	Kept []Kept
	// InFlight says that attempt Attempt was streaming when its replica was
	// lost: no transition settled it. Streamed is the text it had streamed
	// (what reached the log); it is continued or voided like the text of a
	// broken stream.
	InFlight bool
	Streamed string
	// Attempts are the attempts made so far, as the log reports them, the
	// attempt in flight excluded (the takeover records it as failed).
	Attempts []AttemptRecord
	// Usage is the tokens the log reports so far.
	Usage Usage
	// Incomplete says that the log no longer holds the answer's beginning
	// (its oldest events were dropped): Kept and Streamed are not the whole
	// partial answer, so it cannot be continued; the takeover restarts the
	// step cleanly on any route, voiding every attempt made so far.
	Incomplete bool
	// Base is the last checkpoint the lost replica saved (Step.Checkpoint),
	// or nil: the machine returns to it first, and the fields above then
	// report only what the log shows after it (attempts numbered above
	// Base.Attempt).
	Base *Snapshot
}

// Kept is the text of one attempt that is part of the answer.
type Kept struct {
	Attempt      int
	Text         string
	OutputTokens int64
}

// Takeover returns a machine that continues a completion whose replica was
// lost, from what its event log kept. Its Start decides the takeover as a
// failure of kind FailReplicaLost of the attempt in flight: on a route that
// accepts a prefill the partial answer (Prior.Kept then Prior.Streamed)
// continues, STREAM_RESUME, with no token repeated; otherwise the step
// restarts cleanly, RETRY, voiding every attempt of the partial answer
// (Transition.DiscardAttempts), exactly as after a broken stream. The next
// call goes out at once: no upstream failed. The takeover counts as a retry
// of the step, so a completion whose replicas keep dying ends like one whose
// upstream keeps failing (a fallback, then MODEL_ERROR, retryable).
//
// With Prior.Base (the last checkpoint the lost replica saved) the machine
// first returns to that state, and Prior holds only what the log shows
// after it. A machine lost while it awaited its caller (tool results, a
// stop hook's verdict) awaits it again: Start returns the same
// ActAwaitTools or ActAwaitStopHook, and no transition, for nothing was
// lost. Later turns of a Session are taken over this way: the conversation
// they need is the base's.
func Takeover(cfg Config, p Prior) *Machine {
	m := New(cfg)
	m.prior = &p
	return m
}

// takeover is the Start of a machine built by Takeover.
func (m *Machine) takeover() Action {
	p := m.prior
	base := 0 // attempts up to base are settled by the checkpoint
	if b := p.Base; b != nil {
		m.restore(b)
		base = m.attempt
		if b.Phase != SnapshotNext {
			if p.Attempt > base {
				return m.protocol("the log has attempts after the checkpoint that awaited the caller")
			}
			return m.awaitAgain(b.Phase)
		}
	}
	m.attempt, m.turn = max(p.Attempt, base), max(p.Turn, m.turn)
	if i := m.routeIndex(p.Route); i >= 0 {
		m.route = i
	}
	if p.MaxTokens > 0 {
		m.maxTokens = p.MaxTokens
	}
	m.records, m.usage = append(m.records, p.Attempts...), m.usage.Add(p.Usage)
	for a := base + 1; a <= m.attempt; a++ {
		// What the lost replica voided is void already; the kept attempts
		// and the one in flight are decided below.
		m.decided[a] = !(p.InFlight && a == m.attempt) && !slices.ContainsFunc(p.Kept, func(k Kept) bool { return k.Attempt == a })
	}
	if p.Incomplete {
		// Whatever of the answer since the checkpoint the callers saw is
		// voided: attempts the lost replica voided already may be named
		// again, which changes nothing for a caller.
		for a := base + 1; a <= m.attempt; a++ {
			m.decided[a] = false
			m.void(a)
		}
		p.Kept, p.Streamed = nil, ""
	}
	for _, k := range p.Kept {
		m.parts = append(m.parts, part{attempt: k.Attempt, text: k.Text, tokens: k.OutputTokens, cut: true})
	}
	m.inflight = Call{Attempt: m.attempt, Route: m.cur(), MaxTokens: m.callMax()}
	f := &Failure{Kind: FailReplicaLost, Message: "the replica running the completion was lost"}
	ev := Event{Kind: EvAttemptFailed, Failure: f}
	if p.InFlight && m.attempt > base {
		m.ended = m.attempt
		ev.Text = p.Streamed
		m.record(OutcomeFailed, Usage{}) // its usage never reached the log
	}
	m.step.retries++
	if budget, _ := m.p.Retry.Budget(m.canFallback()); m.step.retries > budget {
		return m.giveUp(f, ev, 0, true, fmt.Sprintf("no retries left on %s (%d allowed)", m.cur().Name, budget))
	}
	return m.retry(f, ev, m.step.retries, 0)
}

// awaitAgain returns to awaiting the caller, as the lost replica did.
func (m *Machine) awaitAgain(p SnapshotPhase) Action {
	if p == SnapshotAwaitTools {
		m.phase = phaseTools
		return Action{Kind: ActAwaitTools, ToolCalls: slices.Clone(m.tools)}
	}
	m.phase = phaseHook
	return Action{Kind: ActAwaitStopHook, Answer: AssistantText(m.text(m.answerStart))}
}
