// Package recovery is the decision core of completiond: a pure state machine
// that decides what to do after every upstream attempt.
//
// It is modelled on etcd's raft. The driver (package service) feeds the
// Machine what happened — an Event carrying the current time and what the
// driver observed — and receives a Step: the next Action to run and the
// Transitions to publish. The machine performs no I/O, starts no goroutines,
// never reads the clock and never draws random numbers itself: time arrives
// in Event.Now and randomness as Event.Rand, so every decision can be
// replayed exactly in a test (see testdata/*.txt, whose header comment in
// machine_test.go describes the transcript language).
//
// The package owns its vocabulary — messages, failures, stop reasons,
// transition reasons — and imports nothing that does I/O. The service maps
// the vocabulary to the wire in one place.
//
// # Driving a machine
//
//	m := recovery.New(cfg)
//	step := m.Start(now)
//	for {
//		settle(step.Void, step.Deliver) // drop or send held output; send the delivered tool calls
//		publish(step.Transitions)      // numbered by the machine
//		if step.Action.Kind == recovery.ActFinish {
//			break // the terminal transition was the last one published
//		}
//		ev := perform(step.Action) // call, summarise, wait, ask the caller
//		ev.Now, ev.Rand = clock.Now(), rng.Float64()
//		step = m.Step(ev)
//	}
//
// The driver forwards; it never infers. Step says what to run, what to
// publish, which attempts' output is now final (Deliver, with the answer's
// tool calls) and which is void (Void); Action.Attempt and Action.Turn
// number every event the action produces.
//
// EvCancelled is accepted at any time. Any other event must answer the last
// action (EvAttemptDone or EvAttemptFailed for ActCall and ActSummarize,
// EvWaitElapsed for ActWait, and so on); an event that cannot is a driver bug
// and ends the completion with MODEL_ERROR. A call that never left (the
// breaker refused it, the caller was gone) is reported with Event.NotSent:
// it is no attempt, and its number is handed out again. EvBudgetExceeded
// answers an ActCall or ActSummarize in place of the call, when the
// driver found the caller's key's budget spent before making it: always
// not sent, it ends the completion with BUDGET_EXCEEDED and the answer so
// far. After the finish, Start and Step return the finish step again.
//
// # The answer and the wire promise
//
// The machine keeps the text of each attempt whose output is part of the
// answer; Result.Text is their concatenation. A transition that voids output
// lists every voided attempt in Transition.DiscardAttempts (DiscardOutput is
// set when that includes the transition's own attempt). A caller that drops
// the text deltas of every attempt so named is left with exactly Result.Text.
// Usually only the failed or cut attempt is voided; a clean restart after
// stream resumes (refused prefill, or a fallback to a route without prefill)
// and an escalation of a resumed answer void every attempt of the resumed
// chain, and a blocked stop-hook answer voids all the attempts of that
// answer. A summarising call (ActSummarize) is an attempt of its own, with
// retries of its own, but never streams answer text.
//
// Output is final once no later decision can void it, and only then does
// the machine name it in Step.Deliver: at the finish, when the caller must
// run the answer's tool calls, or when a continuation closed the segment it
// belongs to and no stop hook may still reject the whole answer. So a
// driver holding output until Deliver (settled delivery) never sends what
// is later discarded, and a tool call is actionable when it arrives. Only
// an answer that stopped with tool_use has tool calls: those an attempt
// made before a cut or a failure are void with it.
//
// # Decisions that are not obvious
//
//   - A route with a fallback gets a bounded retry budget per step
//     (RetryPolicy.FallbackRetries retries or FallbackWait of backoff), the
//     last route of the chain the full MaxRetries: a fallback is worth more
//     than a long wait. A Retry-After over RetryPolicy.RetryAfterCeiling is
//     never waited for: fall back, or end retryable after it.
//   - x-should-retry: false on an outage-class failure (a 529, a 500) means
//     never on this route again: fall back, or end.
//   - A tool call cut by max_tokens is a truncation like any other (the
//     provider drops the partial call); an attempt that failed after a
//     complete tool call restarts cleanly, since a prefill carries text only.
//   - Three consecutive overloads, a timeout, and a refused Retry-After that
//     would outlive the deadline move to the next route at once, without a
//     wait: the new upstream has not been hammered.
//   - A mid-stream break continues by prefill when the next target accepts
//     one: STREAM_RESUME (after the retry's backoff on the same route; after
//     MODEL_FALLBACK when the route changes). A refused prefill counts as a
//     retry, marks the route as refusing prefill and restarts cleanly.
//   - A permanent failure that ends the completion voids the failing
//     attempt's text but keeps what an earlier resume kept; the Result is
//     then flagged Truncated.
//   - CONTEXT_LIMIT_ADJUST must lower max_tokens and counts as a retry of
//     the step, so an upstream cannot make it loop.
//   - The compaction transitions (AUTO_COMPACT, REACTIVE_COMPACT_RETRY) are
//     published when the summary is in, together with the call that uses it.
//     A reactive compaction counts when tried, so a failed summary is not
//     repeated; a failed proactive one ends BLOCKING_LIMIT. After an
//     AUTO_COMPACT the prompt is checked again and still-blocked ends
//     BLOCKING_LIMIT without calling.
//   - Collapse never elides the first user message (the task) nor the recent
//     window.
//   - A rejected image or document is replaced by a placeholder and the
//     request retried as REACTIVE_COMPACT_RETRY, even with compaction off:
//     the blocks the upstream named (Failure.MediaBlocks) only, every
//     other one kept, or every image and document when it named none (or
//     nothing that is one); Transition.Stripped lists them. Each such
//     retry counts against Policy.Media.MaxRecoveries (once by default),
//     whichever blocks it strips: a rejection of another block after the
//     first strip is a rejection again, and past the bound ends
//     IMAGE_ERROR.
//   - A route that thinks (Route.Thinking) never continues by prefill,
//     which Anthropic refuses together with thinking: a broken stream there
//     restarts cleanly, and pause_turn ends the answer truncated.
//   - The thinking blocks of an answer that calls tools in a Session
//     (Event.Thinking) lead the assistant message of that turn, unchanged,
//     ahead of its text and tool uses, as Anthropic requires on a tool-use
//     turn. The thinking of other answers is dropped: the API needs it
//     nowhere else, and it is never part of the answer. Such a block is
//     sent to the model that signed it (Block.Model) only: a call to
//     another model leaves it out.
//   - A stop sequence (StopSequence) is a natural end: no continuation, no
//     escalation. A caller's own max_tokens (Config.MaxTokens) is a
//     ceiling that escalation never passes; Config.MaxTotalOutputTokens
//     caps every call at what is left of it, and once nothing is, the
//     completion ends COMPLETED with what it kept, flagged truncated.
//   - pause_turn is continued by prefill as STREAM_RESUME, sharing the bound
//     of MAX_OUTPUT_TOKENS_RECOVERY; without prefill the answer ends
//     COMPLETED, flagged truncated.
//   - The token budget is settled before the stop hook, so the hook judges
//     the answer that would be returned. A truncated, refused or filtered
//     answer goes to neither.
//   - A stop-hook block discards the blocked answer (the model still sees
//     it) so that the Result holds only the answer the hook accepted. More
//     than MaxStopHookBlocks blocks end STOP_HOOK_PREVENTED with the last
//     answer as it stands.
//   - NEXT_TURN resets the per-step and per-turn counters (retries,
//     overloads, continuations, reactive compaction, collapse); escalation,
//     media recovery, stop-hook blocks and the budget count per completion,
//     and an escalated max_tokens stays for the later turns. In a Session,
//     Result.Text holds the text of every turn, in order.
//   - A completion whose replica died is continued by another one from its
//     event log: Takeover builds a machine from the rebuilt Prior, and its
//     Start decides as for a broken stream of the attempt in flight, with
//     a failure of kind FailReplicaLost and no backoff (STREAM_RESUME by
//     prefill, or a clean RETRY voiding the partial answer). It counts as
//     a retry of the step, so replicas that keep dying end the completion.
//     With Config.Checkpoints, Step.Checkpoint hands out a Snapshot where
//     the machine holds what its events do not show (it awaits the
//     caller; the caller's answer, a stop hook's message or a summary
//     changed the conversation): a Takeover from the last one
//     (Prior.Base) awaits the caller again, or continues the turn with
//     that conversation — how later turns of a Session are taken over.
//   - A cancel while the caller runs tools or its stop hook ends
//     ABORTED_TOOLS; while a call, a summary or a wait is in progress,
//     ABORTED_STREAMING.
package recovery
