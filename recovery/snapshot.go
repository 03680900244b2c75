package recovery

import (
	"slices"
	"time"
)

// Snapshot is the state of a machine at a checkpoint (Step.Checkpoint): a
// point where nothing is in flight and the machine holds what its events do
// not show — the conversation with the caller's tool results or a stop
// hook's message in it, a summary, the tool calls the caller runs. Another
// replica that takes the completion over (Takeover with Prior.Base)
// continues from it; the events logged after it are folded into the Prior
// as for a completion without one.
//
// Its fields are exported so that a driver can encode it (encoding/json
// round-trips it); they mean nothing outside this package.
type Snapshot struct {
	// Phase is what the machine waits for: SnapshotAwaitTools,
	// SnapshotAwaitStopHook, or SnapshotNext (nothing: the next call or
	// summary is still to be issued).
	Phase SnapshotPhase
	// Messages is the conversation the next request sends.
	Messages []Message
	// Route names the current route.
	Route string
	// NoPrefill names the routes that refused a prefill.
	NoPrefill []string
	// MaxTokens, Ceiling, Attempt and Turn are the machine's counters of
	// the same names (see Machine).
	MaxTokens, Ceiling, Attempt, Turn int
	// Tools are the calls the caller runs, and Thinking the thinking
	// blocks of the answer that made them (SnapshotAwaitTools).
	Tools    []ToolCall
	Thinking []Block
	// Stop is the stop reason of the answer awaiting the caller, and
	// StopSequence the stop sequence that ended it, if one did.
	Stop         StopReason
	StopSequence string
	// Unreported is the output counted against the completion's output
	// bound beyond what broken attempts reported.
	Unreported int64
	// Parts are the kept outputs, in order; SegStart and AnswerStart index
	// them as Machine does.
	Parts                 []SnapshotPart
	SegStart, AnswerStart int
	// Undecided are the attempts whose output is neither final nor void
	// yet (an answer the stop hook judges, a partial answer a compaction
	// keeps): a driver that holds output (settled delivery) must hand
	// theirs over with the snapshot.
	Undecided []int
	// Records and Usage report the attempts made so far.
	Records []AttemptRecord
	Usage   Usage
	// The per-step, per-turn and per-completion counters.
	Retries, Overloads                 int
	Waited                             time.Duration
	Collapsed                          bool
	Continuations, ReactiveCompactions int
	Escalated                          bool
	MediaRecoveries, HookBlocks        int
	SummarizedSinceGrowth              bool
	BudgetNudges                       int
	BudgetLastCheck, BudgetLastDelta   int64
	BudgetNote                         string
}

// SnapshotPart is one kept output of a Snapshot.
type SnapshotPart struct {
	Attempt int
	Text    string
	Calls   []ToolCall
	Thought []Block `json:",omitempty"`
	Tokens  int64
	Cut     bool
}

// SnapshotPhase says what a Snapshot's machine waits for.
type SnapshotPhase int

const (
	// SnapshotNext: nothing; a takeover issues the next call.
	SnapshotNext SnapshotPhase = iota + 1
	// SnapshotAwaitTools: the caller's tool results (ActAwaitTools).
	SnapshotAwaitTools
	// SnapshotAwaitStopHook: the stop hook's verdict (ActAwaitStopHook).
	SnapshotAwaitStopHook
)

// String returns "next", "await-tools" or "await-stop-hook".
func (p SnapshotPhase) String() string {
	switch p {
	case SnapshotNext:
		return "next"
	case SnapshotAwaitTools:
		return "await-tools"
	case SnapshotAwaitStopHook:
		return "await-stop-hook"
	}
	return "unknown"
}

// checkpoint records, when Config.Checkpoints asks for them, the state
// the next step hands the driver as Step.Checkpoint.
func (m *Machine) checkpoint(p SnapshotPhase) {
	if !m.cfg.Checkpoints {
		return
	}
	s := m.snapshot(p)
	m.ckpt = &s
}

// snapshot copies the machine's state into a Snapshot of phase p.
func (m *Machine) snapshot(p SnapshotPhase) Snapshot {
	s := Snapshot{
		Phase: p, Messages: slices.Clone(m.msgs), Route: m.cur().Name,
		MaxTokens: m.maxTokens, Ceiling: m.ceiling, Attempt: m.attempt, Turn: m.turn,
		Tools: slices.Clone(m.tools), Thinking: slices.Clone(m.thinking), Stop: m.stop,
		StopSequence: m.stopSeq, Unreported: m.unreported,
		SegStart: m.segStart, AnswerStart: m.answerStart,
		Records: slices.Clone(m.records), Usage: m.usage,
		Retries: m.step.retries, Overloads: m.step.overloads, Waited: m.step.waited, Collapsed: m.thisTurn.collapsed,
		Continuations: m.thisTurn.continuations, ReactiveCompactions: m.thisTurn.reactiveCompactions,
		Escalated: m.escalated, MediaRecoveries: m.mediaRecoveries, HookBlocks: m.hookBlocks,
		SummarizedSinceGrowth: m.summarizedSinceGrowth,
		BudgetNudges:          m.budget.nudges, BudgetLastCheck: m.budget.lastCheck,
		BudgetLastDelta: m.budget.lastDelta, BudgetNote: m.budget.note,
	}
	for i, refused := range m.noPrefill {
		if refused {
			s.NoPrefill = append(s.NoPrefill, m.cfg.Routes[i].Name)
		}
	}
	for a := 1; a <= m.attempt; a++ {
		if !m.decided[a] {
			s.Undecided = append(s.Undecided, a)
		}
	}
	for _, pt := range m.parts {
		s.Parts = append(s.Parts, SnapshotPart{Attempt: pt.attempt, Text: pt.text, Calls: pt.calls, Thought: pt.thought, Tokens: pt.tokens, Cut: pt.cut})
	}
	return s
}

// restore puts the machine in the state of s. Routes are found by name:
// one this configuration lacks leaves the machine on Routes[0].
func (m *Machine) restore(s *Snapshot) {
	m.msgs = slices.Clone(s.Messages)
	m.route = max(m.routeIndex(s.Route), 0)
	for _, name := range s.NoPrefill {
		if i := m.routeIndex(name); i >= 0 {
			m.noPrefill[i] = true
		}
	}
	m.maxTokens, m.ceiling, m.attempt, m.turn = s.MaxTokens, s.Ceiling, s.Attempt, max(s.Turn, 1)
	m.tools, m.thinking, m.stop = slices.Clone(s.Tools), slices.Clone(s.Thinking), s.Stop
	m.stopSeq, m.unreported = s.StopSequence, s.Unreported
	m.parts = m.parts[:0]
	for _, pt := range s.Parts {
		m.parts = append(m.parts, part{attempt: pt.Attempt, text: pt.Text, calls: pt.Calls, thought: pt.Thought, tokens: pt.Tokens, cut: pt.Cut})
	}
	m.segStart, m.answerStart = min(s.SegStart, len(m.parts)), min(s.AnswerStart, len(m.parts))
	m.records, m.usage = slices.Clone(s.Records), s.Usage
	m.step = stepState{retries: s.Retries, overloads: s.Overloads, waited: s.Waited}
	m.thisTurn = turnState{continuations: s.Continuations, reactiveCompactions: s.ReactiveCompactions, collapsed: s.Collapsed}
	m.escalated, m.mediaRecoveries, m.hookBlocks = s.Escalated, s.MediaRecoveries, s.HookBlocks
	m.summarizedSinceGrowth = s.SummarizedSinceGrowth
	m.budget = budgetTracker{nudges: s.BudgetNudges, lastCheck: s.BudgetLastCheck, lastDelta: s.BudgetLastDelta, note: s.BudgetNote}
	for a := 1; a <= m.attempt; a++ {
		m.decided[a] = !slices.Contains(s.Undecided, a)
	}
}

// routeIndex is the index of the route named name, or -1.
func (m *Machine) routeIndex(name string) int {
	return slices.IndexFunc(m.cfg.Routes, func(r Route) bool { return r.Name == name })
}
