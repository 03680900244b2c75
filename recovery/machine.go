package recovery

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// phase is what the machine is waiting for.
type phase int

const (
	phaseNew         phase = iota // Start has not run
	phaseCalling                  // an ActCall is in flight
	phaseSummarizing              // an ActSummarize is in flight
	phaseWaiting                  // an ActWait is running
	phaseTools                    // ActAwaitTools: the caller runs the tools
	phaseHook                     // ActAwaitStopHook: the stop hook judges the answer
	phaseDone                     // ActFinish was returned
)

var phaseNames = [...]string{"not started", "calling", "summarizing", "waiting", "awaiting tools",
	"awaiting the stop hook", "done"}

func (p phase) String() string { return phaseNames[p] }

// part is the kept output of one attempt.
type part struct {
	attempt int
	text    string
	calls   []ToolCall // the tool calls of an answer that stopped with tool_use
	thought []Block    // the attempt's thinking blocks, signed by the model it called
	tokens  int64
	cut     bool // the attempt did not finish its answer: a limit or a failure cut it
}

// compaction is a summarising call in flight.
type compaction struct {
	reactive bool     // REACTIVE_COMPACT_RETRY; AUTO_COMPACT otherwise
	cause    *Failure // the prompt-too-long failure of a reactive compaction
	split    Split
}

// Machine is the recovery state machine for one completion. Not safe for
// concurrent use.
//
// The machine owns the conversation: it copies Config.Messages and builds
// every Call.Messages itself. It also owns the answer: the text of the
// attempts it kept, in order, which is what Result.Text returns. Every
// transition that voids text lists the attempts it voids in DiscardAttempts,
// so a caller that drops the deltas of those attempts is left with exactly
// Result.Text.
type Machine struct {
	cfg  Config
	p    Policy
	open map[string]bool // routes whose circuit is open, as of the last event

	phase phase
	prior *Prior    // set by Takeover: Start continues from it
	ckpt  *Snapshot // Step.Checkpoint of the step being built
	now   time.Time
	trs   []Transition // transitions of the step being built
	voids []int        // attempts voided since the last transition was emitted
	final Step         // the finish step, repeated after the end

	// Delivery: the fate of each attempt's output (see Step).
	ended   int          // the attempt whose end the current event reports, or 0
	decided map[int]bool // attempts already named in a Deliver or a Void
	deliver []Delivery   // Step.Deliver of the step being built
	discard []int        // Step.Void of the step being built

	// The conversation.
	msgs        []Message // what the next request sends, without its prefill
	route       int       // index into cfg.Routes
	maxTokens   int       // the max_tokens wanted, before the route's own cap
	ceiling     int       // the max_tokens CONTEXT_LIMIT_ADJUST found to fit this route, or 0
	noPrefill   []bool    // routes that refused a prefill
	attempt     int       // the last attempt number handed out
	turn        int
	inflight    Call        // the call or summary being run
	summarizing *compaction // the compaction whose summary is being made (or waited for), or nil
	tools       []ToolCall  // the calls the caller is running
	thinking    []Block     // the thinking blocks of the answer that made them
	stop        StopReason  // the stop reason of the answer under review
	stopSeq     string      // the stop sequence that ended the last answer, if one did
	unreported  int64       // output tokens of broken attempts beyond what they reported (see spend)

	// The answer.
	parts       []part
	segStart    int // parts[segStart:] is what a prefill continues
	answerStart int // parts[answerStart:] is this turn's answer
	records     []AttemptRecord
	usage       Usage

	// Per step and per turn (see stepState and turnState).
	step     stepState
	thisTurn turnState

	// Per completion.
	escalated             bool
	mediaRecoveries       int
	hookBlocks            int
	summarizedSinceGrowth bool // a compaction ran since the conversation last grew
	budget                budgetTracker
}

// stepState is what the step in progress has spent on one route: its
// retries and waits. A new step begins, and m.step = stepState{} with it,
// when an attempt finishes (the step succeeded), when a fallback changes
// the route, when a summarising call starts (it has a budget of its own)
// or ends, and when a new answer starts (a new turn, or the retry of an
// answer the stop hook blocked).
type stepState struct {
	retries   int
	overloads int           // consecutive overloads
	waited    time.Duration // backoff waited on this step and route
}

// turnState is what the turn in progress has spent on getting its answer:
// m.thisTurn = turnState{} when a turn starts (NEXT_TURN). Two of its
// fields start over more often, each where it is reset: continuations
// with a new answer (the retry of a blocked answer), collapsed when an
// attempt finishes.
type turnState struct {
	continuations       int  // MAX_OUTPUT_TOKENS_RECOVERY and pause_turn continuations of the answer
	reactiveCompactions int  // REACTIVE_COMPACT_RETRY summaries tried
	collapsed           bool // the last overflow stage was a collapse: the next one is not
}

// budgetTracker follows TOKEN_BUDGET_CONTINUATION.
type budgetTracker struct {
	nudges    int
	lastCheck int64  // kept output tokens at the last check
	lastDelta int64  // tokens added between the two last checks
	note      string // why the last check did not nudge, for the COMPLETED message
}

// New returns a machine for one completion. Call Start, then Step with each
// event until the action is ActFinish.
func New(cfg Config) *Machine {
	return &Machine{
		cfg:       cfg,
		p:         cfg.Policy,
		msgs:      slices.Clone(cfg.Messages),
		maxTokens: cfg.StartMaxTokens(),
		noPrefill: make([]bool, len(cfg.Routes)),
		turn:      1,
		decided:   map[int]bool{},
	}
}

// Start returns the first step: normally an ActCall on Routes[0], or an
// ActSummarize (AUTO_COMPACT) or a BLOCKING_LIMIT finish when the prompt
// leaves no room for the answer. Calling Start again returns the finish step
// once the machine has finished, and a protocol error otherwise.
func (m *Machine) Start(now time.Time) Step {
	m.now = now
	if m.phase == phaseDone {
		return m.final
	}
	if m.phase != phaseNew {
		if m.phase == phaseCalling || m.phase == phaseSummarizing {
			m.record(OutcomeFailed, Usage{}) // the call in flight is abandoned with the completion
		}
		return m.out(m.protocol("Start called twice"))
	}
	if len(m.cfg.Routes) == 0 {
		return m.out(m.finish(ModelError, &Failure{Kind: FailInvalidRequest, Message: "no route configured"},
			"no route to call"))
	}
	m.setOpen(m.cfg.OpenRoutes)
	if m.prior != nil {
		return m.out(m.takeover())
	}
	if j := m.closedFrom(0); j > 0 && m.p.Retry.Fallback {
		// The first route's circuit is open: go where a call can succeed,
		// and say why, rather than spend an attempt on a skipped route.
		return m.out(m.fallback(j, m.circuitOpen(m.cur()), Event{}, "the circuit of "+m.cur().Name+" is open"))
	}
	return m.out(m.callChecked())
}

// setOpen records which routes have an open circuit.
func (m *Machine) setOpen(names []string) {
	m.open = make(map[string]bool, len(names))
	for _, n := range names {
		m.open[n] = true
	}
}

// closedFrom returns the first route at or after i whose circuit is not
// open, or i when every one of them is open (the call then reports the open
// circuit, and the completion ends typed).
func (m *Machine) closedFrom(i int) int {
	for j := i; j < len(m.cfg.Routes); j++ {
		if !m.open[m.cfg.Routes[j].Name] {
			return j
		}
	}
	return i
}

// circuitOpen is the failure that explains a move away from an open route.
func (m *Machine) circuitOpen(r Route) *Failure {
	return &Failure{Kind: FailCircuitOpen, Provider: r.Provider, Message: "circuit open for route " + r.Name}
}

// Step feeds one event and returns the next step. After ActFinish, further
// events return the same finish step. An event the current action cannot
// produce (say EvWaitElapsed while a call is in flight) is a driver bug: the
// machine ends the completion with MODEL_ERROR rather than guess.
func (m *Machine) Step(ev Event) Step {
	if m.phase == phaseDone {
		return m.final
	}
	if !ev.Now.IsZero() {
		m.now = ev.Now
	}
	m.setOpen(ev.OpenRoutes)
	inCall := m.phase == phaseCalling || m.phase == phaseSummarizing
	if inCall && ev.Kind == EvBudgetExceeded {
		ev.NotSent = true // a call the budget refused never leaves
	}
	if inCall && ev.NotSent && (ev.Kind == EvCancelled || ev.Kind == EvAttemptFailed || ev.Kind == EvBudgetExceeded) {
		m.attempt-- // the call never left: no attempt, and its number is handed out again
	} else if inCall {
		m.ended = m.attempt
	}
	if inCall && !ev.NotSent {
		m.spend(ev)
	}
	if ev.Kind == EvCancelled {
		return m.out(m.cancelled(ev))
	}
	if ev.Kind == EvBudgetExceeded && inCall {
		return m.out(m.overBudget(ev))
	}
	if !m.expects(ev.Kind) {
		if inCall { // the call in flight is abandoned with the completion
			m.record(OutcomeFailed, Usage{})
		}
		return m.out(m.protocol(fmt.Sprintf("event %s while %s", ev.Kind, m.phase)))
	}
	var a Action
	switch {
	case m.phase == phaseSummarizing && ev.Kind == EvAttemptDone:
		a = m.summarized(ev)
	case m.phase == phaseSummarizing:
		a = m.summaryFailed(ev)
	case ev.Kind == EvAttemptDone:
		a = m.attemptDone(ev)
	case ev.Kind == EvAttemptFailed:
		a = m.attemptFailed(ev)
	case ev.Kind == EvWaitElapsed && m.summarizing != nil:
		a = m.summaryCall()
	case ev.Kind == EvWaitElapsed:
		a = m.call()
	case ev.Kind == EvToolResults:
		a = m.toolResults(ev)
	case ev.Kind == EvStopHookVerdict:
		a = m.verdict(ev)
	}
	return m.out(a)
}

// expects reports whether the current action can produce an event of kind
// k (EvCancelled, always welcome, is handled before).
func (m *Machine) expects(k EventKind) bool {
	switch k {
	case EvAttemptDone, EvAttemptFailed:
		return m.phase == phaseCalling || m.phase == phaseSummarizing
	case EvWaitElapsed:
		return m.phase == phaseWaiting
	case EvToolResults:
		return m.phase == phaseTools
	case EvStopHookVerdict:
		return m.phase == phaseHook
	}
	return false
}

// out wraps the action with the transitions gathered while deciding it, the
// numbers of its events, and the fate of the attempts' output.
func (m *Machine) out(a Action) Step {
	a.Attempt, a.Turn = m.attempt, m.turn
	m.decideFates(a.Kind)
	switch a.Kind {
	case ActAwaitTools:
		m.checkpoint(SnapshotAwaitTools)
	case ActAwaitStopHook:
		m.checkpoint(SnapshotAwaitStopHook)
	case ActFinish:
		m.ckpt = nil // nothing follows to take over
	}
	st := Step{Action: a, Transitions: m.trs, Deliver: m.deliver, Void: m.discard, Checkpoint: m.ckpt}
	m.trs, m.deliver, m.discard, m.ended, m.ckpt = nil, nil, nil, 0, nil
	if a.Kind == ActFinish {
		m.final = st
	}
	return st
}

// decideFates names the attempts whose output became final or void with
// this step. An attempt that ended without being kept is void at once; a
// kept one is final once it is settled (see Step), void if it was dropped.
func (m *Machine) decideFates(next ActionKind) {
	if a := m.ended; a > 0 && !m.decided[a] && !m.kept(a) {
		m.voidOutput(a)
	}
	settled := m.segStart
	switch {
	case next == ActFinish || next == ActAwaitTools:
		settled = len(m.parts)
	case m.cfg.StopHook:
		settled = m.answerStart
	}
	for _, p := range m.parts[:settled] {
		if !m.decided[p.attempt] {
			m.decided[p.attempt] = true
			m.deliver = append(m.deliver, Delivery{Attempt: p.attempt, ToolCalls: slices.Clone(p.calls)})
		}
	}
	if next == ActFinish { // whatever is left undecided had no output to keep
		for a := 1; a <= m.attempt; a++ {
			if !m.decided[a] {
				m.voidOutput(a)
			}
		}
	}
	slices.Sort(m.discard)
}

// voidOutput names attempt a in Step.Void.
func (m *Machine) voidOutput(a int) {
	if !m.decided[a] {
		m.decided[a] = true
		m.discard = append(m.discard, a)
	}
}

// kept reports whether attempt a's output is part of the answer so far.
func (m *Machine) kept(a int) bool {
	return slices.ContainsFunc(m.parts, func(p part) bool { return p.attempt == a })
}

// protocol ends the completion because the driver broke the protocol.
func (m *Machine) protocol(what string) Action {
	f := &Failure{Kind: FailUnknown, Message: "protocol error: " + what}
	return m.finish(ModelError, f, "the driver broke the protocol: "+what)
}

// cur returns the current route.
func (m *Machine) cur() Route { return m.cfg.Routes[m.route] }

// callMax returns the max_tokens of the next call: the wanted value capped
// by the route's own limit, by what CONTEXT_LIMIT_ADJUST found to fit and
// by what is left of the completion's output bound.
func (m *Machine) callMax() int {
	return m.capped(m.maxTokens)
}

// capped caps n by the current route's output limit, the adjusted ceiling
// and what is left of Config.MaxTotalOutputTokens.
func (m *Machine) capped(n int) int {
	if r := m.cur(); r.MaxOutputTokens > 0 {
		n = min(n, r.MaxOutputTokens)
	}
	if m.ceiling > 0 {
		n = min(n, m.ceiling)
	}
	if left, bounded := m.outputLeft(); bounded {
		n = min(n, int(left))
	}
	return n
}

// spend counts the output of the attempt ev ends against the completion's
// output bound: what it reported, or, for an attempt that broke or was
// cancelled before its upstream said, its text's estimate when that is
// more (a broken stream's usage stops at its last report).
func (m *Machine) spend(ev Event) {
	if ev.Kind == EvAttemptDone {
		return
	}
	if est := int64(EstimateTokens(ev.Text, nil)); est > ev.Usage.OutputTokens {
		m.unreported += est - ev.Usage.OutputTokens
	}
}

// outputLeft is what is left of Config.MaxTotalOutputTokens (never
// negative); bounded is false without one.
func (m *Machine) outputLeft() (left int64, bounded bool) {
	if m.cfg.MaxTotalOutputTokens <= 0 {
		return 0, false
	}
	return max(int64(m.cfg.MaxTotalOutputTokens)-m.usage.OutputTokens-m.unreported, 0), true
}

// outputSpent reports whether the completion's output bound is spent.
func (m *Machine) outputSpent() bool {
	left, bounded := m.outputLeft()
	return bounded && left == 0
}

// spentOut ends the completion whose output bound is spent, with the
// answer kept so far, flagged truncated; streamed is the text of the
// attempt that just failed, void (it was not continued).
func (m *Machine) spentOut(streamed, why string) Action {
	if streamed != "" {
		m.void(m.attempt)
	}
	res := &Result{StopReason: StopMaxTokens, Truncated: true}
	return m.finishWith(Completed, nil, fmt.Sprintf("%s: the completion's output reached max_total_output_tokens %d", why, m.cfg.MaxTotalOutputTokens), res)
}

// prefillOK reports whether route i can continue a partial answer: it
// accepts a prefill, has not refused one, and does not think (Anthropic
// refuses a prefill together with thinking).
func (m *Machine) prefillOK(i int) bool {
	r := m.cfg.Routes[i]
	return r.Prefill && !r.Thinking && !m.noPrefill[i]
}

// callChecked issues the next call unless the prompt would leave too little
// room for the answer; then it compacts (AUTO_COMPACT) or gives up
// (BLOCKING_LIMIT) without calling. It runs whenever the conversation grew or
// the route changed.
func (m *Machine) callChecked() Action {
	r := m.cur()
	if r.ContextWindow <= 0 {
		return m.call()
	}
	est := EstimateTokens(m.cfg.System, m.msgs) + EstimateTokens(m.segmentText(), nil)
	limit := m.p.Overflow.BlockingLimit(r.ContextWindow, m.callMax())
	if est < limit {
		return m.call()
	}
	why := fmt.Sprintf("estimated input %d tokens ≥ limit %d (window %d − reserve %d − margin %d)",
		est, limit, r.ContextWindow, min(m.callMax(), m.p.Overflow.OutputReserveCap), m.p.Overflow.BlockingMargin)
	if m.p.Overflow.Compaction && !m.summarizedSinceGrowth {
		if s, ok := SplitForCompaction(m.msgs, m.p.Overflow.KeepRecentMessages); ok {
			return m.summarize(compaction{split: s})
		}
	}
	switch {
	case !m.p.Overflow.Compaction:
		why += "; compaction is off"
	case m.summarizedSinceGrowth:
		why += " even after compaction"
	default:
		why += "; nothing to compact between the first message and the recent window"
	}
	return m.finish(BlockingLimit, nil, why)
}

// call issues the next attempt on the current route. A kept partial answer
// of the current segment goes along as the prefill.
func (m *Machine) call() Action {
	if m.outputSpent() {
		return m.spentOut("", "no output left for attempt "+fmt.Sprint(m.attempt+1))
	}
	m.attempt++
	m.inflight = Call{
		Attempt:   m.attempt,
		Route:     m.cur(),
		MaxTokens: m.callMax(),
		System:    m.cfg.System,
		Messages:  withoutForeignThinking(m.msgs, m.cur().Model),
		Prefill:   m.segmentText(),
		Continues: m.text(m.answerStart),
	}
	m.phase = phaseCalling
	return Action{Kind: ActCall, Call: m.inflight}
}

// withoutForeignThinking is a copy of msgs to send to model: without the
// thinking blocks another model signed, which no other model may be sent
// (their signature is that model's). The machine's assistant messages
// always keep a text block beside their thinking, so none is left empty.
func withoutForeignThinking(msgs []Message, model string) []Message {
	foreign := func(b Block) bool { return b.Kind == BlockThinking && b.Model != "" && b.Model != model }
	out := slices.Clone(msgs)
	for i, msg := range out {
		if slices.ContainsFunc(msg.Blocks, foreign) {
			out[i].Blocks = slices.DeleteFunc(slices.Clone(msg.Blocks), foreign)
		}
	}
	return out
}

// wait runs an ActWait of d, then calls; no wait at all when d is zero.
func (m *Machine) wait(d time.Duration) Action {
	if d <= 0 {
		return m.call()
	}
	m.phase = phaseWaiting
	return Action{Kind: ActWait, Delay: d}
}

// summarize starts the compaction c: its summarising call is a phase of
// the machine, with retries of its own on the current route.
func (m *Machine) summarize(c compaction) Action {
	m.summarizing = &c
	m.step = stepState{} // collapsed stays: the summary does not undo a collapse
	return m.summaryCall()
}

// summaryCall issues (or re-issues) the summarising call of the compaction
// in progress. It is an attempt like any other (it costs tokens), but its
// output never reaches the answer.
func (m *Machine) summaryCall() Action {
	if m.outputSpent() {
		return m.spentOut("", "no output left for the summarising call")
	}
	m.attempt++
	m.inflight = Call{
		Attempt:   m.attempt,
		Route:     m.cur(),
		MaxTokens: min(SummaryMaxTokens, m.callMax()),
		System:    SummarySystemPrompt,
		Messages:  []Message{UserText(RenderTranscript(m.summarizing.split.Middle))},
	}
	m.phase = phaseSummarizing
	return Action{Kind: ActSummarize, Call: m.inflight}
}

// record reports the attempt in flight.
func (m *Machine) record(o Outcome, u Usage) {
	m.records = append(m.records, AttemptRecord{Attempt: m.inflight.Attempt, Route: m.inflight.Route, Outcome: o, Usage: u})
	m.usage = m.usage.Add(u)
}

// transition returns a transition of the current attempt, turn and route,
// for the caller to complete and emit.
func (m *Machine) transition(r Reason, f *Failure, msg string) Transition {
	t := Transition{Reason: r, Attempt: m.attempt, Turn: m.turn, Failure: f, Message: msg}
	if len(m.cfg.Routes) > 0 {
		t.From = m.cur()
	}
	if !r.Terminal() {
		t.To, t.MaxTokens = t.From, m.callMax()
	}
	return t
}

// emit publishes t, which voids whatever was voided since the last one.
func (m *Machine) emit(t Transition) {
	if len(m.voids) > 0 {
		t.DiscardAttempts = m.voids
		t.DiscardOutput = slices.Contains(m.voids, t.Attempt)
		m.voids = nil
	}
	m.trs = append(m.trs, t)
}

// void marks the output of attempt a as void: the next transition says so.
func (m *Machine) void(a int) {
	m.voidOutput(a)
	if !slices.Contains(m.voids, a) {
		m.voids = append(m.voids, a)
		slices.Sort(m.voids)
	}
	for i := range m.records {
		if m.records[i].Attempt == a && m.records[i].Outcome == OutcomeAnswered {
			m.records[i].Outcome = OutcomeDiscarded
		}
	}
}

// dropParts voids the kept output from parts[from:].
func (m *Machine) dropParts(from int) {
	for _, p := range m.parts[from:] {
		m.void(p.attempt)
	}
	m.parts = m.parts[:from]
	m.segStart = min(m.segStart, from)
	m.answerStart = min(m.answerStart, from)
}

// text returns the concatenated text of parts[from:].
func (m *Machine) text(from int) string {
	var sb strings.Builder
	for _, p := range m.parts[from:] {
		sb.WriteString(p.text)
	}
	return sb.String()
}

// segmentText is the partial answer a prefill continues.
func (m *Machine) segmentText() string { return m.text(m.segStart) }

// keptTokens is the output of the kept attempts.
func (m *Machine) keptTokens() int64 {
	var n int64
	for _, p := range m.parts {
		n += p.tokens
	}
	return n
}

// extend appends the current segment as an assistant message (plus extra
// blocks) and then the user's reply, and starts a new segment: the
// conversation grew, so the next call is checked against the window again.
// The thinking blocks of a tool turn lead its assistant message, as the
// model produced them.
func (m *Machine) extend(extra []Block, reply ...Block) {
	seg := slices.Concat(m.thinking, []Block{TextBlock(m.segmentText())}, extra)
	m.thinking = nil
	m.msgs = appendMessage(m.msgs, Message{Role: RoleAssistant, Blocks: seg})
	m.msgs = appendMessage(m.msgs, Message{Role: RoleUser, Blocks: reply})
	m.segStart = len(m.parts)
	m.summarizedSinceGrowth = false
}

// abortTools records the calls the caller was running as failed, so the
// transcript stays a valid conversation: every tool use has its result.
func (m *Machine) abortTools(why string) {
	uses := make([]Block, len(m.tools))
	results := make([]Block, len(m.tools))
	for i, c := range m.tools {
		uses[i] = Block{Kind: BlockToolUse, ToolUseID: c.ID, ToolName: c.Name, ToolInput: c.Input}
		results[i] = Block{Kind: BlockToolResult, ToolUseID: c.ID, IsError: true, Text: "aborted: " + why}
	}
	m.extend(uses, results...)
}

// transcript is the conversation so far plus the answer not yet in it: the
// thinking of a tool turn, the text of the current segment and the tool
// calls it made.
func (m *Machine) transcript(calls []ToolCall) []Message {
	out := slices.Clone(m.msgs)
	blocks := slices.Clone(m.thinking)
	if text := m.segmentText(); text != "" {
		blocks = append(blocks, TextBlock(text))
	}
	for _, c := range calls {
		if !hasToolUse(out, c.ID) {
			blocks = append(blocks, Block{Kind: BlockToolUse, ToolUseID: c.ID, ToolName: c.Name, ToolInput: c.Input})
		}
	}
	if len(blocks) > 0 {
		out = appendMessage(out, Message{Role: RoleAssistant, Blocks: blocks})
	}
	return out
}

func hasToolUse(msgs []Message, id string) bool {
	for _, m := range msgs {
		for _, b := range m.Blocks {
			if b.Kind == BlockToolUse && b.ToolUseID == id {
				return true
			}
		}
	}
	return false
}

// newAnswer starts a new answer: a new turn, or a retry of a blocked one.
// A new step begins with it; each caller resets what of the turn's state
// starts over (turnState).
func (m *Machine) newAnswer() {
	m.segStart, m.answerStart = len(m.parts), len(m.parts)
	m.step = stepState{}
}

// unfinished reports whether the answer in progress ends in cut text: a
// completion that stops now hands back a truncated answer.
func (m *Machine) unfinished() bool {
	n := len(m.parts)
	return n > m.answerStart && m.parts[n-1].cut
}

// finish ends the completion with a terminal transition of reason r.
func (m *Machine) finish(r Reason, f *Failure, msg string) Action {
	return m.finishWith(r, f, msg, &Result{Truncated: m.unfinished()})
}

// finishWith ends the completion with res, whose Reason, Text, Route, Usage,
// Attempts and Failure it fills in.
func (m *Machine) finishWith(r Reason, f *Failure, msg string, res *Result) Action {
	t := m.transition(r, f, msg)
	t.Terminal = true
	m.emit(t)
	res.Reason, res.Text, res.Usage, res.Failure = r, m.text(0), m.usage, f
	for _, p := range m.parts {
		res.Thinking = append(res.Thinking, p.thought...)
	}
	if res.StopReason == StopSequence {
		res.StopSequence = m.stopSeq
	}
	res.Attempts = slices.Clone(m.records)
	if m.cfg.Session {
		res.Transcript = m.transcript(res.ToolCalls)
	}
	if len(m.cfg.Routes) > 0 {
		res.Route = m.cur()
	}
	m.phase = phaseDone
	return Action{Kind: ActFinish, Result: res}
}

// fail ends the completion after a failure; the failed attempt's streamed
// text is void. A partial answer kept so far stays, flagged truncated.
func (m *Machine) fail(r Reason, f *Failure, streamed, msg string, retryAfter time.Duration, retryable bool) Action {
	if streamed != "" {
		m.void(m.attempt)
	}
	res := &Result{Truncated: m.unfinished(), Retryable: retryable}
	if retryable {
		res.RetryAfter = retryAfter
	}
	return m.finishWith(r, f, msg, res)
}

// complete ends the completion normally with the answer's stop reason.
func (m *Machine) complete(stop StopReason, calls []ToolCall, msg string) Action {
	res := &Result{StopReason: stop, ToolCalls: calls, Truncated: stop.Truncating() || stop == StopPauseTurn}
	return m.finishWith(Completed, nil, msg, res)
}

// overBudget ends the completion before the call of the current action,
// which the key's budget refused: the answer kept so far stays, flagged
// truncated if it was cut, and the caller may retry once the budget renews.
func (m *Machine) overBudget(ev Event) Action {
	why := "the key's budget is spent"
	if ev.Reason != "" {
		why = ev.Reason
	}
	return m.fail(BudgetExceeded, nil, "", why+": attempt "+fmt.Sprint(m.attempt+1)+" was not sent", ev.RetryAfter, true)
}

// cancelled ends the completion because the caller went away.
func (m *Machine) cancelled(ev Event) Action {
	why := "the caller cancelled"
	if ev.Reason != "" {
		why += ": " + ev.Reason
	}
	switch m.phase {
	case phaseNew:
		return m.finish(AbortedStreaming, nil, why+" before the first call")
	case phaseTools, phaseHook:
		// The model had finished; the caller's own work (tools or stop
		// hook) was interrupted.
		res := &Result{StopReason: m.stop, ToolCalls: m.tools}
		if m.phase == phaseTools {
			m.abortTools(why)
		}
		return m.finishWith(AbortedTools, nil, why+" while "+m.phase.String(), res)
	case phaseCalling, phaseSummarizing:
		if ev.NotSent {
			return m.fail(AbortedStreaming, nil, "", why+" before attempt "+fmt.Sprint(m.attempt+1)+" was sent", 0, false)
		}
		m.record(OutcomeFailed, ev.Usage)
		if m.phase == phaseSummarizing {
			// A summary is never shown, so there is no streamed text to void.
			return m.fail(AbortedStreaming, nil, "", why+" during the summarising call", 0, false)
		}
		return m.fail(AbortedStreaming, nil, ev.Text, why+" during attempt "+fmt.Sprint(m.attempt), 0, false)
	}
	return m.fail(AbortedStreaming, nil, "", why+" during the wait before the next attempt", 0, false)
}
