package recovery

import "time"

// Reason is why the machine did what it did. The values follow the order of
// completion.v1.TransitionReason; String returns the same names.
type Reason int

// The reasons. Terminal ones end the completion.
const (
	ReasonUnspecified Reason = iota
	Completed
	Retry
	ModelFallback
	StreamResume
	MaxOutputTokensEscalate
	MaxOutputTokensRecovery
	ContextLimitAdjust
	CollapseDrainRetry
	ReactiveCompactRetry
	AutoCompact
	PromptTooLong
	BlockingLimit
	ImageError
	TokenBudgetContinuation
	NextTurn
	MaxTurns
	AbortedTools
	AbortedStreaming
	StopHookBlocking
	StopHookPrevented
	HookStopped
	ModelError
	BudgetExceeded
)

var reasonNames = [...]string{"UNSPECIFIED", "COMPLETED", "RETRY", "MODEL_FALLBACK", "STREAM_RESUME",
	"MAX_OUTPUT_TOKENS_ESCALATE", "MAX_OUTPUT_TOKENS_RECOVERY", "CONTEXT_LIMIT_ADJUST",
	"COLLAPSE_DRAIN_RETRY", "REACTIVE_COMPACT_RETRY", "AUTO_COMPACT", "PROMPT_TOO_LONG",
	"BLOCKING_LIMIT", "IMAGE_ERROR", "TOKEN_BUDGET_CONTINUATION", "NEXT_TURN", "MAX_TURNS",
	"ABORTED_TOOLS", "ABORTED_STREAMING", "STOP_HOOK_BLOCKING", "STOP_HOOK_PREVENTED",
	"HOOK_STOPPED", "MODEL_ERROR", "BUDGET_EXCEEDED"}

// String returns the reason's wire name without the enum prefix, e.g. "RETRY".
func (r Reason) String() string {
	if int(r) >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "UNKNOWN"
}

// Terminal reports whether r ends a completion.
func (r Reason) Terminal() bool {
	switch r {
	case Completed, PromptTooLong, BlockingLimit, ImageError, MaxTurns, AbortedTools,
		AbortedStreaming, StopHookPrevented, HookStopped, ModelError, BudgetExceeded:
		return true
	}
	return false
}

// AllReasons lists every reason but ReasonUnspecified.
func AllReasons() []Reason {
	rs := make([]Reason, 0, len(reasonNames)-1)
	for r := Completed; int(r) < len(reasonNames); r++ {
		rs = append(rs, r)
	}
	return rs
}

// Transition is one decision of the machine, to be published to the caller.
type Transition struct {
	// Reason is what the machine decided.
	Reason Reason
	// Attempt is the attempt the transition follows (0 before the first).
	Attempt int
	// Turn is the conversation turn (1-based).
	Turn int
	// Terminal is true for the one transition that ends the completion.
	Terminal bool
	// DiscardOutput voids the text the Attempt streamed.
	DiscardOutput bool
	// DiscardAttempts lists, in ascending order, every attempt whose text
	// this transition voids; DiscardOutput is set exactly when it holds
	// Attempt. It names more than Attempt when a step built on several
	// attempts is voided: a clean restart after stream resumes (the prefill
	// was refused, or the next route cannot take one), an escalation of a
	// resumed answer, an answer blocked by the stop hook. It may also name
	// only an earlier attempt: a prompt-too-long failure that streamed text
	// is voided by the compaction transition that follows its summarising
	// call. Dropping the deltas of every attempt named by some transition
	// leaves exactly Result.Text.
	DiscardAttempts []int
	// Backoff is the wait before the next attempt.
	Backoff time.Duration
	// Retry is the retry number on the current step for Retry (1-based).
	Retry int
	// From is the route before the transition.
	From Route
	// To is the route of the next attempt; zero for terminal transitions.
	To Route
	// MaxTokens is the max_tokens of the next attempt.
	MaxTokens int
	// Failure is the upstream failure that caused the transition, if any.
	Failure *Failure
	// Message explains the decision for people.
	Message string
	// Stripped names the media blocks the transition replaced by a
	// placeholder after an upstream rejected them, as indexes into the
	// conversation of the rejected call.
	Stripped []BlockRef
}

// EventKind says what happened.
type EventKind int

const (
	// EvAttemptDone: the upstream finished the attempt (of an ActCall or an
	// ActSummarize) with a stop reason.
	EvAttemptDone EventKind = iota + 1
	// EvAttemptFailed: the attempt failed with Failure, after streaming Text
	// and ToolCalls.
	EvAttemptFailed
	// EvWaitElapsed: the wait of an ActWait is over.
	EvWaitElapsed
	// EvToolResults: the caller answered the tool calls with Results.
	EvToolResults
	// EvStopHookVerdict: the stop hook answered with Verdict and VerdictMessage.
	EvStopHookVerdict
	// EvCancelled: the caller cancelled or went away.
	EvCancelled
	// EvBudgetExceeded: the caller's key spent its budget, so the call of
	// the ActCall or ActSummarize was not made (the driver checks the
	// budget before each call: a retry, a continuation, a fallback, a next
	// turn, a summary). It is always NotSent; RetryAfter says when the
	// budget renews and Reason explains it, for people. The machine ends
	// with BUDGET_EXCEEDED and the answer so far.
	EvBudgetExceeded
)

// Verdict is a stop hook's decision.
type Verdict int

const (
	// VerdictAllow lets the answer stand.
	VerdictAllow Verdict = iota + 1
	// VerdictBlock sends VerdictMessage to the model, which answers again.
	VerdictBlock
	// VerdictPrevent ends the completion.
	VerdictPrevent
)

// Event is what the driver observed. Now is required in every event; Rand is
// a uniform number in [0, 1) the machine may use for jitter.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Now is the current time.
	Now time.Time
	// Rand is uniform in [0, 1), drawn by the driver.
	Rand float64
	// StopReason is why the model stopped (EvAttemptDone).
	StopReason StopReason
	// StopSequence is the request's stop sequence that ended the attempt,
	// with StopSequence, when the upstream named it.
	StopSequence string
	// Text is the answer text the attempt streamed (EvAttemptDone, and the
	// part streamed before an EvAttemptFailed or EvCancelled). For an
	// ActSummarize it is the summary.
	Text string
	// ToolCalls are the complete tool calls the attempt streamed (a partial
	// call is never one). They count only when the attempt stops with
	// StopToolUse; an attempt that failed after making some cannot be
	// continued by prefill, since a prefill carries text only.
	ToolCalls []ToolCall
	// Thinking are the attempt's complete thinking blocks (BlockThinking),
	// in order (EvAttemptDone). When the attempt called tools in a Session,
	// they lead the assistant message of that turn, ahead of its text and
	// tool uses, as Anthropic requires; otherwise they are dropped: thinking
	// is never part of the answer.
	Thinking []Block
	// Usage is the attempt's tokens, as far as known.
	Usage Usage
	// Failure is the classified failure (EvAttemptFailed).
	Failure *Failure
	// NotSent says that the call of the ActCall or ActSummarize never left
	// (EvAttemptFailed with a FailCircuitOpen failure: the breaker refused
	// it; EvCancelled: the caller was gone before it started). Such a call
	// is no attempt: it is not recorded, and its number is handed out again.
	NotSent bool
	// Results are the tool results, one BlockToolResult each (EvToolResults).
	Results []Block
	// Verdict is the stop hook's decision (EvStopHookVerdict).
	Verdict Verdict
	// VerdictMessage is the stop hook's message (EvStopHookVerdict).
	VerdictMessage string
	// Reason is the cancel reason, for people (EvCancelled), or why the
	// budget refused the call (EvBudgetExceeded).
	Reason string
	// RetryAfter is how long until the key's budget renews
	// (EvBudgetExceeded).
	RetryAfter time.Duration
	// OpenRoutes names the routes whose circuit breaker is open as the
	// driver sees it now (every event replaces the previous set). The machine
	// does not retry on an open route, and skips open routes when it falls
	// back, while a closed one remains.
	OpenRoutes []string
}

// ActionKind says what the driver must do next.
type ActionKind int

const (
	// ActCall: call Action.Call's route, then report EvAttemptDone or EvAttemptFailed.
	ActCall ActionKind = iota + 1
	// ActWait: wait Action.Delay, then report EvWaitElapsed.
	ActWait
	// ActSummarize: make the summarising call Action.Call exactly like an
	// ActCall (same breaker, span and timeouts; no tools, no thinking, no
	// caller metadata), but show none of its output to the caller; then
	// report EvAttemptDone with the summary as Text, or EvAttemptFailed. It
	// is an attempt like any other: recorded in Result.Attempts
	// (OutcomeDiscarded, or OutcomeFailed) and its tokens count in
	// Result.Usage. A transient failure is retried as a new attempt.
	ActSummarize
	// ActAwaitTools: hand Action.ToolCalls to the caller, then report
	// EvToolResults or EvCancelled.
	ActAwaitTools
	// ActAwaitStopHook: ask the stop hook about Action.Answer, then report
	// EvStopHookVerdict or EvCancelled.
	ActAwaitStopHook
	// ActFinish: the completion is over; Action.Result is final.
	ActFinish
)

// Call is one upstream request.
type Call struct {
	// Attempt numbers the call (1-based, per completion).
	Attempt int
	// Route is the route to call.
	Route Route
	// MaxTokens is the request's max_tokens.
	MaxTokens int
	// System is the system prompt.
	System string
	// Messages is the conversation to send.
	Messages []Message
	// Prefill, when not empty, is sent as the start of the assistant's answer:
	// the model continues after it, and the attempt's output is only what
	// follows it.
	Prefill string
	// Continues is the answer kept so far that the call's output goes on
	// from — by prefill (its end is Prefill), or after a continuation or a
	// budget nudge — and "" when the output starts an answer. A driver
	// matching stop sequences across the cut reads its end (an upstream
	// matches only in its own output).
	Continues string
}

// Action is what the driver must do next. Which fields are meaningful depends on Kind.
type Action struct {
	// Kind says what to do.
	Kind ActionKind
	// Attempt and Turn number every event the driver sends while it runs
	// the action: the call's attempt for an ActCall or ActSummarize, the last
	// attempt otherwise. The driver never numbers events itself.
	Attempt, Turn int
	// Call is the request of ActCall and ActSummarize.
	Call Call
	// Delay is the wait of ActWait.
	Delay time.Duration
	// ToolCalls are the calls of ActAwaitTools.
	ToolCalls []ToolCall
	// Answer is the final answer under review in ActAwaitStopHook.
	Answer Message
	// Result is the outcome of ActFinish.
	Result *Result
}

// Step is the machine's output for one event, like raft's Ready: everything
// the driver must do, in order. It is a read-only value.
//
//  1. Drop the held output of the attempts in Void; for each Delivery, send
//     the held output of its attempt (in the order it streamed), then its
//     tool calls.
//  2. Publish Transitions, in order.
//  3. Run Action.
//
// An attempt's output is its text and thinking deltas; a driver streaming
// live sends them as they arrive, a driver in settled delivery holds them.
// Tool calls are never sent as they arrive: the machine hands over the
// answer's calls in Deliver, so a tool call is actionable when it arrives
// (its attempt is settled), and settled delivery never sends output that a
// transition later voids.
//
// Every attempt is named exactly once, in Deliver or in Void, by the step
// that finishes the completion; an attempt in Deliver is never voided later.
// An attempt's output is final once no later decision can void it: when the
// completion ends, when the caller must run the answer's tool calls, or when
// the answer moved past it (a continuation prompt or a budget nudge closed
// its segment) and no stop hook may still reject the whole answer.
type Step struct {
	// Action is what to do next.
	Action Action
	// Transitions are the decisions taken, in order; at most one is terminal,
	// and it comes last, with an ActFinish action.
	Transitions []Transition
	// Deliver lists, in ascending order of attempts, the attempts whose
	// output is now final: part of the answer for good.
	Deliver []Delivery
	// Void lists, in ascending order, the attempts whose output is now
	// known never to be part of the answer (failed and not continued,
	// discarded, summarising calls, cancelled). A live driver learns what it
	// already sent of them from the transitions' DiscardAttempts.
	Void []int
	// Checkpoint, when Config.Checkpoints asks for them, is the machine's
	// state as of this step's decisions, before its action runs, when it
	// holds what the events do not show: the step awaits the caller
	// (ActAwaitTools, ActAwaitStopHook), or it took the caller's answer or
	// a summary into the conversation. A driver that may be taken over
	// saves it, with the seq of the last event before this step's, before
	// it publishes the step: a takeover continues from the last one saved
	// (Prior.Base) and the events after it. Nil otherwise; read-only.
	Checkpoint *Snapshot
}

// Delivery is the final output of one attempt.
type Delivery struct {
	// Attempt is the attempt whose held text and thinking are now final.
	Attempt int
	// ToolCalls are the attempt's tool calls that are part of the answer,
	// to be sent after its text.
	ToolCalls []ToolCall
}

// Outcome is how one attempt ended.
type Outcome int

const (
	// OutcomeAnswered: the attempt's output is part of the answer.
	OutcomeAnswered Outcome = iota + 1
	// OutcomeDiscarded: the attempt finished but its output was voided.
	OutcomeDiscarded
	// OutcomeFailed: the attempt failed.
	OutcomeFailed
)

// AttemptRecord reports one attempt in the Result.
type AttemptRecord struct {
	// Attempt is the attempt number.
	Attempt int
	// Route is the route called.
	Route Route
	// Outcome is how the attempt ended.
	Outcome Outcome
	// Usage is the attempt's tokens.
	Usage Usage
}

// Result is the outcome of a completion.
type Result struct {
	// Reason is the terminal transition's reason.
	Reason Reason
	// StopReason is why the model stopped; StopNone without an answer.
	StopReason StopReason
	// StopSequence is the stop sequence that ended the answer, with
	// StopSequence, when the upstream named it.
	StopSequence string
	// Truncated is true when the answer is cut short.
	Truncated bool
	// Text is the final answer: the concatenated text of the kept attempts.
	Text string
	// ToolCalls are the tool calls of a StopToolUse answer.
	ToolCalls []ToolCall
	// Thinking are the thinking blocks (BlockThinking) of the kept
	// attempts, in order, each with the model that signed it.
	Thinking []Block
	// Route is the route that produced the answer (or was last tried).
	Route Route
	// Usage is the total over all attempts.
	Usage Usage
	// Attempts reports each attempt in order.
	Attempts []AttemptRecord
	// Failure is the failure that ended the completion, if one did.
	Failure *Failure
	// Transcript is the conversation as the machine last built it, ending
	// with the final answer, for Session completions (nil otherwise): the
	// caller's messages after any compaction, every turn's answer and tool
	// results, and — after ABORTED_TOOLS — an error result for each call that
	// was still pending, so the conversation can be resumed as it stands.
	Transcript []Message
	// Retryable is true when the same request may succeed later (the service
	// then attaches RetryInfo with RetryAfter).
	Retryable bool
	// RetryAfter is the suggested wait before retrying the request.
	RetryAfter time.Duration
}

// Config is everything the machine needs to know about one completion.
type Config struct {
	// Policy is the (already tightened) policy.
	Policy Policy
	// Routes are the primary route, then its fallbacks in order.
	Routes []Route
	// System is the system prompt.
	System string
	// Messages is the conversation; it is not modified.
	Messages []Message
	// MaxTokens is the requested max_tokens; 0 uses
	// Policy.Truncation.MaxOutputTokens (see StartMaxTokens). A caller's
	// own value is a ceiling: MAX_OUTPUT_TOKENS_ESCALATE never asks for
	// more (escalation is for the policy's default cap).
	MaxTokens int
	// MaxTotalOutputTokens, when positive, bounds the output tokens of the
	// whole completion: every attempt's, failed and discarded ones and
	// summarising calls included (an attempt that broke counts what it
	// reported, or its text's estimate when that is more). No call asks
	// for more than what is left; once nothing is, the completion ends
	// COMPLETED with the answer kept so far, flagged truncated, instead of
	// continuing, nudging or retrying.
	MaxTotalOutputTokens int
	// TokenBudget asks for about this many output tokens in total; 0 disables it.
	TokenBudget int
	// Deadline is the caller's deadline; zero means none.
	Deadline time.Time
	// Session makes a tool-use stop wait for the caller's results (ActAwaitTools)
	// instead of finishing with StopToolUse.
	Session bool
	// MaxTurns bounds the turns of a Session; 0 uses Policy.MaxTurns.
	MaxTurns int
	// StopHook sends every final answer through ActAwaitStopHook.
	StopHook bool
	// OpenRoutes names the routes whose circuit is open when the completion
	// starts; see Event.OpenRoutes.
	OpenRoutes []string
	// Checkpoints asks for Step.Checkpoint: the driver saves them so that
	// another replica can take the completion over (Takeover, Prior.Base).
	Checkpoints bool
}

// StartMaxTokens is the max_tokens the completion starts with, before a
// route's own limit caps it: MaxTokens, or Policy.Truncation.MaxOutputTokens
// when MaxTokens is not positive.
func (c Config) StartMaxTokens() int {
	if c.MaxTokens > 0 {
		return c.MaxTokens
	}
	return c.Policy.Truncation.MaxOutputTokens
}
