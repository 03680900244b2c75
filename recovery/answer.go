package recovery

import (
	"fmt"
	"slices"
)

// attemptDone handles an attempt that finished with a stop reason: its
// output is kept, then the stop reason decides what comes next.
func (m *Machine) attemptDone(ev Event) Action {
	m.record(OutcomeAnswered, ev.Usage)
	s := ev.StopReason
	if s == StopToolUse && len(ev.ToolCalls) == 0 {
		// A tool-use stop without one complete call has nothing for the
		// caller to run: the text is the answer.
		s = StopEndTurn
	}
	p := part{attempt: m.attempt, text: ev.Text, tokens: ev.Usage.OutputTokens, cut: s.Truncating() || s == StopPauseTurn,
		thought: m.signed(ev.Thinking)}
	if s == StopToolUse {
		// Only an answer that stopped to call tools makes calls; those an
		// attempt cut by a limit streamed are void with it.
		p.calls = slices.Clone(ev.ToolCalls)
	}
	m.parts = append(m.parts, p)
	// The step succeeded: its retry counters start over, and so does the
	// overflow ladder (the next overflow may collapse again).
	m.step = stepState{}
	m.thisTurn.collapsed = false
	if s == StopSequence {
		m.stopSeq = ev.StopSequence
	}
	switch {
	case s.Truncating():
		return m.truncated(s)
	case s == StopPauseTurn:
		return m.paused()
	case s == StopToolUse:
		return m.toolUse(ev.ToolCalls, ev.Thinking)
	case s == StopRefusal || s == StopContentFilter:
		return m.complete(s, nil, "the model stopped: "+s.String())
	case s == StopSequence:
		return m.settle(s)
	}
	// end_turn, and a stop reason the provider did not give.
	return m.settle(StopEndTurn)
}

// signed is a copy of an attempt's thinking blocks, each tagged with the
// model just called, which signed it.
func (m *Machine) signed(thinking []Block) []Block {
	out := slices.Clone(thinking)
	for i := range out {
		out[i].Model = m.inflight.Route.Model
	}
	return out
}

// truncated handles an answer cut by a token limit: escalate once, then
// continue up to MaxContinuations times, then end flagged truncated.
func (m *Machine) truncated(s StopReason) Action {
	if m.outputSpent() {
		return m.complete(s, nil, fmt.Sprintf("answer cut (%s); the completion's output reached max_total_output_tokens %d", s, m.cfg.MaxTotalOutputTokens))
	}
	if esc := m.escalatedMax(); m.p.Truncation.Escalation && !m.escalated && esc > m.callMax() {
		// Same request with room to finish: the cut answer is worth less
		// than a whole one, so it is discarded.
		m.escalated = true
		old := m.callMax()
		m.dropParts(m.segStart)
		m.maxTokens = esc
		m.emit(m.transition(MaxOutputTokensEscalate, nil,
			fmt.Sprintf("answer cut (%s) at %d tokens: same request with max_tokens %d; the cut output is discarded", s, old, esc)))
		return m.call()
	}
	if m.thisTurn.continuations < m.p.Truncation.MaxContinuations {
		m.thisTurn.continuations++
		m.extend(nil, TextBlock(ContinuationPrompt))
		m.emit(m.transition(MaxOutputTokensRecovery, nil,
			fmt.Sprintf("%s: partial answer kept, continuation %d of %d", s, m.thisTurn.continuations, m.p.Truncation.MaxContinuations)))
		return m.callChecked()
	}
	return m.complete(s, nil, fmt.Sprintf("still %s after %d continuation(s): the answer is truncated", s, m.thisTurn.continuations))
}

// escalatedMax is the max_tokens MAX_OUTPUT_TOKENS_ESCALATE would ask for on
// the current route: never above the route's limit, nor above a max_tokens
// CONTEXT_LIMIT_ADJUST lowered to fit the window, nor above what is left
// of the output bound — and never above the caller's own max_tokens, a
// ceiling (escalation raises the policy's default cap only).
func (m *Machine) escalatedMax() int {
	esc := m.p.Truncation.EscalatedMaxOutputTokens
	if m.cfg.MaxTokens > 0 {
		esc = min(esc, m.cfg.MaxTokens)
	}
	return m.capped(esc)
}

// paused handles pause_turn: the provider stopped a long turn and expects it
// sent back to continue, which is a prefill continuation (STREAM_RESUME). It
// shares the continuation bound with truncation, so a provider that keeps
// pausing cannot loop; without prefill the answer ends flagged truncated.
func (m *Machine) paused() Action {
	switch {
	case !m.prefillOK(m.route):
		return m.complete(StopPauseTurn, nil, "the provider paused the turn and "+m.cur().Name+" cannot continue it by prefill")
	case m.thisTurn.continuations >= m.p.Truncation.MaxContinuations:
		return m.complete(StopPauseTurn, nil, fmt.Sprintf("paused again after %d continuation(s): the answer is cut", m.thisTurn.continuations))
	}
	m.thisTurn.continuations++
	m.emit(m.transition(StreamResume, nil,
		fmt.Sprintf("pause_turn: continuing the paused turn by prefill (%d of %d)", m.thisTurn.continuations, m.p.Truncation.MaxContinuations)))
	return m.call()
}

// toolUse ends a plain completion with the tool calls, or hands them to a
// Session caller; the answer's thinking is kept for the assistant message
// of the turn.
func (m *Machine) toolUse(calls []ToolCall, thinking []Block) Action {
	if !m.cfg.Session {
		return m.complete(StopToolUse, calls, fmt.Sprintf("the model called %d tool(s)", len(calls)))
	}
	m.tools, m.stop, m.phase = calls, StopToolUse, phaseTools
	m.thinking = m.signed(thinking)
	return Action{Kind: ActAwaitTools, ToolCalls: slices.Clone(calls)}
}

// toolResults starts the next turn with the caller's tool results.
func (m *Machine) toolResults(ev Event) Action {
	for _, b := range ev.Results {
		if b.Halt {
			res := &Result{StopReason: StopToolUse, ToolCalls: m.tools}
			return m.finishWith(HookStopped, nil, fmt.Sprintf("the result of tool call %s asked to halt", b.ToolUseID), res)
		}
	}
	if limit := m.maxTurns(); limit > 0 && m.turn >= limit {
		res := &Result{StopReason: StopToolUse, ToolCalls: m.tools}
		return m.finishWith(MaxTurns, nil, fmt.Sprintf("turn %d of %d: turn limit reached", m.turn, limit), res)
	}
	uses := make([]Block, len(m.tools))
	for i, c := range m.tools {
		uses[i] = Block{Kind: BlockToolUse, ToolUseID: c.ID, ToolName: c.Name, ToolInput: c.Input}
	}
	m.extend(uses, ev.Results...)
	m.turn++
	m.newAnswer()
	m.thisTurn = turnState{}
	m.tools = nil
	// Emitted after the increment: NEXT_TURN carries the turn it starts.
	m.emit(m.transition(NextTurn, nil, fmt.Sprintf("turn %d with %d tool result(s)", m.turn, len(ev.Results))))
	m.checkpoint(SnapshotNext)
	return m.callChecked()
}

func (m *Machine) maxTurns() int {
	if m.cfg.MaxTurns > 0 {
		return m.cfg.MaxTurns
	}
	return m.p.Turns.MaxTurns
}

// settle handles a normal stop: the token budget may ask for more, then the
// stop hook judges the answer, then the completion ends. The budget goes
// first so that the hook judges the answer that would be returned.
func (m *Machine) settle(s StopReason) Action {
	if s == StopEndTurn && m.cfg.TokenBudget > 0 {
		if a, ok := m.nudge(); ok {
			return a
		}
	}
	if m.cfg.StopHook {
		m.stop, m.phase = s, phaseHook
		return Action{Kind: ActAwaitStopHook, Answer: AssistantText(m.text(m.answerStart))}
	}
	return m.complete(s, nil, "the model finished: "+s.String()+m.budget.note)
}

// nudge asks the model to keep working when it stopped under the token
// budget, unless the last nudges stopped paying off.
func (m *Machine) nudge() (Action, bool) {
	b, p, n := &m.budget, m.p, m.cfg.TokenBudget
	kept := m.keptTokens()
	if m.outputSpent() {
		b.note = fmt.Sprintf("; token budget: the completion's output reached max_total_output_tokens %d", m.cfg.MaxTotalOutputTokens)
		return Action{}, false
	}
	delta := kept - b.lastCheck
	diminishing := b.nudges >= p.Budget.DiminishingAfter &&
		delta < int64(p.Budget.DiminishingTokens) && b.lastDelta < int64(p.Budget.DiminishingTokens)
	prev := b.lastDelta
	b.lastCheck, b.lastDelta = kept, delta
	switch {
	case diminishing:
		b.note = fmt.Sprintf("; token budget: diminishing returns after %d nudges (+%d, +%d tokens)", b.nudges, prev, delta)
		return Action{}, false
	case float64(kept) >= p.Budget.Ratio*float64(n):
		b.note = fmt.Sprintf("; token budget: %d of %d tokens", kept, n)
		return Action{}, false
	}
	b.nudges++
	m.extend(nil, TextBlock(TokenBudgetPrompt(int(kept), n)))
	m.emit(m.transition(TokenBudgetContinuation, nil,
		fmt.Sprintf("%d of %d budget tokens (under %.0f%%): nudge %d", kept, n, p.Budget.Ratio*100, b.nudges)))
	return m.callChecked(), true
}

// verdict acts on the stop hook's decision.
func (m *Machine) verdict(ev Event) Action {
	switch ev.Verdict {
	case VerdictAllow:
		return m.complete(m.stop, nil, "the stop hook allowed the answer"+m.budget.note)
	case VerdictPrevent:
		return m.finishWith(StopHookPrevented, nil, "the stop hook prevented continuation: "+ev.VerdictMessage,
			&Result{StopReason: m.stop})
	case VerdictBlock:
		return m.blocked(ev.VerdictMessage)
	}
	return m.protocol(fmt.Sprintf("unknown stop hook verdict %d", ev.Verdict))
}

// blocked sends the stop hook's message to the model, which answers again.
// The blocked answer is discarded: a hook (such as the JSON-Schema check)
// rejects an answer to have it replaced, and a Result holding both the
// rejected and the corrected answer would satisfy nobody. The model still
// sees its rejected answer in the conversation.
func (m *Machine) blocked(msg string) Action {
	m.hookBlocks++
	if m.hookBlocks > m.p.Turns.MaxStopHookBlocks {
		return m.finishWith(StopHookPrevented, nil,
			fmt.Sprintf("the stop hook blocked %d times, over the limit of %d", m.hookBlocks, m.p.Turns.MaxStopHookBlocks),
			&Result{StopReason: m.stop})
	}
	if msg == "" {
		msg = DefaultHookMessage
	}
	m.extend(nil, TextBlock(msg))
	m.dropParts(m.answerStart)
	m.newAnswer()
	// The new answer has continuations of its own, but the rest of the
	// turn's state is kept: a blocked answer must not reopen compaction.
	m.thisTurn.continuations = 0
	m.emit(m.transition(StopHookBlocking, nil,
		fmt.Sprintf("the stop hook blocked the answer (%d of %d): %s", m.hookBlocks, m.p.Turns.MaxStopHookBlocks, msg)))
	m.checkpoint(SnapshotNext)
	return m.callChecked()
}
