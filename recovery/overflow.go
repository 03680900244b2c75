package recovery

import (
	"fmt"
	"strings"
)

// contextLimit handles "X + Y > Z": the prompt fits, the requested output
// does not, so retry at once asking for less. The new max_tokens must be
// smaller than the old, and each adjustment counts as a retry of the step,
// which keeps a confused upstream from looping here.
func (m *Machine) contextLimit(f *Failure, streamed string) Action {
	adj := f.ContextWindow - f.InputTokens - m.p.Overflow.ContextAdjustMargin
	switch {
	case f.ContextWindow <= 0 || f.InputTokens <= 0:
		return m.overflow(f, streamed, "context limit exceeded (numbers unknown)")
	case adj < m.p.Overflow.MinAdjustedMaxTokens:
		return m.overflow(f, streamed, fmt.Sprintf("%d + %d > %d leaves max_tokens %d < %d",
			f.InputTokens, f.MaxTokens, f.ContextWindow, adj, m.p.Overflow.MinAdjustedMaxTokens))
	case adj >= m.callMax():
		return m.overflow(f, streamed, fmt.Sprintf("%d + %d > %d although max_tokens is already %d",
			f.InputTokens, f.MaxTokens, f.ContextWindow, m.callMax()))
	case m.step.retries >= m.p.Retry.MaxRetries:
		return m.overflow(f, streamed, fmt.Sprintf("%d + %d > %d with no retries left on this step (%d allowed)",
			f.InputTokens, f.MaxTokens, f.ContextWindow, m.p.Retry.MaxRetries))
	}
	m.step.retries++ // an upstream that shaves a token at a time must not loop
	if streamed != "" {
		m.void(m.attempt)
	}
	m.maxTokens, m.ceiling = adj, adj
	m.emit(m.transition(ContextLimitAdjust, f, fmt.Sprintf("%d + %d > %d: max_tokens lowered to %d (%d − %d − %d)",
		f.InputTokens, f.MaxTokens, f.ContextWindow, adj, f.ContextWindow, f.InputTokens, m.p.Overflow.ContextAdjustMargin)))
	return m.call()
}

// overflow climbs the prompt-too-long ladder: collapse old bulky content
// (not twice in a row), summarise the middle (once per turn), move to a
// route with a larger window, give up.
//
// cause says what went wrong, for the transition messages.
func (m *Machine) overflow(f *Failure, streamed, cause string) Action {
	if streamed != "" {
		m.void(m.attempt)
	}
	if m.p.Overflow.Compaction && !m.thisTurn.collapsed {
		out, blocks, bytes := Collapse(m.msgs, m.p.Overflow.KeepRecentMessages, m.p.Overflow.CollapseMinBytes)
		if blocks > 0 {
			m.msgs, m.thisTurn.collapsed = out, true
			m.emit(m.transition(CollapseDrainRetry, f, fmt.Sprintf(
				"%s: elided %d old block(s), %d bytes, outside the first message and the last %d",
				cause, blocks, bytes, m.p.Overflow.KeepRecentMessages)))
			return m.call()
		}
	}
	m.thisTurn.collapsed = false
	if m.p.Overflow.Compaction && m.thisTurn.reactiveCompactions < m.p.Overflow.MaxReactiveCompactions {
		if s, ok := SplitForCompaction(m.msgs, m.p.Overflow.KeepRecentMessages); ok {
			// Counted when tried, so a failed summary is not tried again.
			m.thisTurn.reactiveCompactions++
			return m.summarize(compaction{reactive: true, cause: f, split: s})
		}
	}
	return m.overflowFallback(f, cause, m.ladderNote())
}

// ladderNote says why compaction could not help, for the next transition.
func (m *Machine) ladderNote() string {
	switch {
	case !m.p.Overflow.Compaction:
		return "compaction is off"
	case m.thisTurn.reactiveCompactions >= m.p.Overflow.MaxReactiveCompactions:
		return "reactive compaction already used"
	}
	return "nothing to compact"
}

// overflowFallback moves to a later route with a larger context window, or
// ends PROMPT_TOO_LONG.
func (m *Machine) overflowFallback(f *Failure, cause, note string) Action {
	name := m.cur().Name
	if i := m.largerWindow(f); i >= 0 {
		why := fmt.Sprintf("%s on %s (%s); %s has a larger context window", cause, name, note, m.cfg.Routes[i].Name)
		return m.fallback(i, f, Event{}, why)
	}
	return m.fail(PromptTooLong, f, "", fmt.Sprintf("%s on %s (%s) and no route with a larger window", cause, name, note), 0, false)
}

// largerWindow returns the first later route whose context window exceeds
// what the prompt is known to need, or -1.
func (m *Machine) largerWindow(f *Failure) int {
	need := max(m.cur().ContextWindow, f.ContextWindow, f.PromptTokens)
	if !m.p.Retry.Fallback || need <= 0 {
		return -1
	}
	found := -1
	for i := m.route + 1; i < len(m.cfg.Routes); i++ {
		if m.cfg.Routes[i].ContextWindow <= need {
			continue
		}
		if !m.open[m.cfg.Routes[i].Name] {
			return i
		}
		if found < 0 {
			found = i // an open one only if no closed one is large enough
		}
	}
	return found
}

// summarized rebuilds the conversation around the summary (the text of the
// summarising attempt) and calls again. The reason of the transition,
// AUTO_COMPACT or REACTIVE_COMPACT_RETRY, is published now that the
// compacted conversation is what the next attempt sends. A summary cut by
// its token limit is still a summary; an empty one is a failed compaction.
func (m *Machine) summarized(ev Event) Action {
	if ev.Text == "" {
		m.record(OutcomeFailed, ev.Usage)
		return m.compactFailed(&Failure{Kind: FailUnknown, Provider: m.cur().Provider,
			Message: "the summarising call answered nothing (stop " + ev.StopReason.String() + ")"}, "")
	}
	m.record(OutcomeDiscarded, ev.Usage)
	c := *m.summarizing
	m.summarizing = nil
	m.step = stepState{}
	m.msgs, m.summarizedSinceGrowth = c.split.Compacted(ev.Text), true
	r := AutoCompact
	if c.reactive {
		r = ReactiveCompactRetry
	}
	m.emit(m.transition(r, c.cause, fmt.Sprintf(
		"summarised %d middle message(s) into %d bytes; kept the first %d and the last %d verbatim",
		len(c.split.Middle), len(ev.Text), len(c.split.Head), len(c.split.Tail))))
	m.checkpoint(SnapshotNext)
	if c.reactive {
		return m.call() // the upstream judges; the ladder goes on if it still refuses
	}
	return m.callChecked() // still blocked: BLOCKING_LIMIT, without calling
}

// summaryFailed handles a failed summarising call: a transient failure is
// retried on the same route, within the retry budget of the last route of
// a chain (a summary does not fall back: it compacts this route's
// prompt), the Retry-After ceiling and the deadline; anything else gives
// the compaction up.
func (m *Machine) summaryFailed(ev Event) Action {
	f := ev.Failure
	if f == nil {
		f = &Failure{Kind: FailUnknown, Message: "the summarising call failed without a classified failure"}
	}
	if !ev.NotSent {
		m.record(OutcomeFailed, ev.Usage)
	}
	if !f.Transient() || ev.NotSent {
		return m.compactFailed(f, "")
	}
	m.step.retries++
	d, why, ok := m.retryWait(f, ev.Rand, false)
	if !ok {
		return m.compactFailed(f, why)
	}
	t := m.transition(Retry, f, fmt.Sprintf("%s: summarising call, retry %d of %d on %s %s",
		f.Kind, m.step.retries, m.p.Retry.MaxRetries, m.cur().Name, after(d)))
	t.Retry, t.Backoff = m.step.retries, d
	m.emit(t)
	m.step.waited += d
	if d <= 0 {
		return m.summaryCall()
	}
	m.phase = phaseWaiting
	return Action{Kind: ActWait, Delay: d}
}

// compactFailed moves past a compaction whose summary could not be made
// (because of f; why says why it was not retried, if it was retryable): the
// ladder goes on (reactive), or the prompt stays blocked (proactive).
func (m *Machine) compactFailed(f *Failure, why string) Action {
	c := *m.summarizing
	m.summarizing = nil
	m.step = stepState{}
	if why != "" {
		why = " (" + why + ")"
	}
	why = "the summarising call failed: " + f.Error() + why
	if !c.reactive {
		return m.finish(BlockingLimit, f, why+"; the prompt leaves no room for the answer")
	}
	return m.overflowFallback(c.cause, "prompt too long", why)
}

// media strips the media blocks an upstream rejected and retries. The
// transition is REACTIVE_COMPACT_RETRY: the conversation was cut down to
// what the upstream accepts, which is what a compaction does. It does not
// need Policy.Compaction, since nothing the model wrote is summarised away.
//
// When the failure names the blocks it rejected (Failure.MediaBlocks),
// exactly those are replaced and every other image and document goes on
// the retry; when it names none, or none of its refs points at a media
// block of the conversation, every image and document is replaced. Each
// strip-and-retry counts against Policy.Media.MaxRecoveries, whichever
// blocks it strips: an upstream that rejects another block after the first
// was stripped is rejecting media again, and past the bound the completion
// ends IMAGE_ERROR, so an upstream cannot walk the machine through a
// conversation's images one retry at a time.
//
// The refs index the call's Messages, which are the machine's own
// conversation but for thinking blocks left out of a call to another model
// (withoutForeignThinking); those only ever lead the machine's own
// assistant messages, which hold no media, so every media block has the
// same indexes in both and the refs apply to m.msgs as they are.
func (m *Machine) media(f *Failure, streamed string) Action {
	if streamed != "" {
		m.void(m.attempt)
	}
	if m.mediaRecoveries >= m.p.Media.MaxRecoveries {
		why := fmt.Sprintf("media rejected again%s after %d strip-and-retry (media.max_recoveries %d)",
			namedNote(f.MediaBlocks), m.mediaRecoveries, m.p.Media.MaxRecoveries)
		if m.mediaRecoveries == 0 {
			why = fmt.Sprintf("media rejected%s and media recovery is off (media.max_recoveries 0)", namedNote(f.MediaBlocks))
		}
		return m.fail(ImageError, f, "", why, 0, false)
	}
	out, stripped := StripMedia(m.msgs, f.MediaBlocks)
	named := len(stripped) > 0
	if !named {
		out, stripped = StripMedia(m.msgs, MediaBlocks(m.msgs))
	}
	if len(stripped) == 0 {
		return m.fail(ImageError, f, "", "media rejected but the conversation holds no image or document to strip", 0, false)
	}
	what := fmt.Sprintf("%s (%s) replaced by a placeholder", mediaCount(m.msgs, stripped), refList(stripped))
	var why string
	switch {
	case named:
		why = "media rejected: " + what
		if kept := len(MediaBlocks(out)); kept > 0 {
			why += fmt.Sprintf("; %d other media block(s) kept", kept)
		}
	case len(f.MediaBlocks) > 0:
		why = fmt.Sprintf("media rejected, naming no media block (%s): every media block, %s", refList(f.MediaBlocks), what)
	default:
		why = "media rejected, no block named: every media block, " + what
	}
	m.mediaRecoveries++
	m.msgs = out
	t := m.transition(ReactiveCompactRetry, f, why)
	t.Stripped = stripped
	m.emit(t)
	return m.call()
}

// namedNote is " (naming r1, r2)" for the blocks a rejection named, or "".
func namedNote(refs []BlockRef) string {
	if len(refs) == 0 {
		return ""
	}
	return " (naming " + refList(refs) + ")"
}

// mediaCount says how many images and documents of msgs refs point at:
// "2 image(s)", "1 image(s) and 1 document(s)".
func mediaCount(msgs []Message, refs []BlockRef) string {
	var images, docs int
	for _, r := range refs {
		if msgs[r.Message].Blocks[r.Block].Kind == BlockDocument {
			docs++
		} else {
			images++
		}
	}
	switch {
	case docs == 0:
		return fmt.Sprintf("%d image(s)", images)
	case images == 0:
		return fmt.Sprintf("%d document(s)", docs)
	}
	return fmt.Sprintf("%d image(s) and %d document(s)", images, docs)
}

// maxNamed is how many blocks a transition message names: the message is
// for people, and Transition.Stripped lists them all.
const maxNamed = 3

// refList names refs, the first maxNamed of them: "messages[0].content[1],
// messages[0].content[2] and 4 more".
func refList(refs []BlockRef) string {
	names := make([]string, 0, maxNamed)
	for _, r := range refs[:min(len(refs), maxNamed)] {
		names = append(names, r.String())
	}
	s := strings.Join(names, ", ")
	if n := len(refs) - maxNamed; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}
