package recovery

import (
	"fmt"
	"time"
)

// attemptFailed handles a failed attempt by the class of its failure. The
// kinds with a recovery of their own come first: x-should-retry may call a
// prompt-too-long failure retryable, but resending it unchanged cannot help.
func (m *Machine) attemptFailed(ev Event) Action {
	if !ev.NotSent {
		m.record(OutcomeFailed, ev.Usage)
	}
	f := ev.Failure
	if f == nil {
		f = &Failure{Kind: FailUnknown, Message: "the attempt failed without a classified failure"}
	}
	if m.outputSpent() && !ev.NotSent {
		return m.spentOut(ev.Text, fmt.Sprintf("attempt %d failed (%s)", m.attempt, f.Kind))
	}
	switch {
	case f.Kind == FailPrefillRejected && m.inflight.Prefill == "":
		// The upstream refused the caller's own messages (say, a final
		// assistant message it will not continue), not a prefill of ours:
		// a permanent error of the request.
		g := *f
		g.Kind = FailInvalidRequest
		return m.fail(ModelError, &g, ev.Text, "the request was refused, and it carried no prefill of ours: "+f.Error(), 0, false)
	case f.Kind == FailPrefillRejected:
		return m.prefillRejected(f, ev)
	case f.Kind == FailContextLimit:
		return m.contextLimit(f, ev.Text)
	case f.Kind == FailPromptTooLong:
		return m.overflow(f, ev.Text, "prompt too long")
	case f.Kind == FailMedia:
		return m.media(f, ev.Text)
	case f.Outage() && f.ShouldRetry < 0:
		// The upstream is failing and says this request must not be
		// retried there: never on the same route.
		why := fmt.Sprintf("%s on %s with x-should-retry: false", f.Kind, m.cur().Name)
		return m.giveUp(f, ev, 0, false, why)
	case f.Transient():
		return m.transient(f, ev)
	case f.RouteSpecific():
		return m.routeFailed(f, ev)
	}
	return m.fail(ModelError, f, ev.Text, "permanent failure, never retried: "+f.Error(), 0, false)
}

// transient handles a failure that may pass if tried again: wait and retry,
// or move to the next route when this one is overloaded, silent or spent.
func (m *Machine) transient(f *Failure, ev Event) Action {
	if f.Kind == FailOverloaded {
		m.step.overloads++
	} else {
		m.step.overloads = 0
	}
	m.step.retries++
	name := m.cur().Name
	switch {
	case m.open[name] && m.canFallback():
		// The breaker has seen enough of this route: a retry would not be sent.
		return m.fallback(m.next(), f, ev, fmt.Sprintf("the circuit of %s is open", name))
	case f.Kind == FailOverloaded && m.step.overloads >= m.p.Retry.OverloadsBeforeFallback && m.canFallback():
		// A different upstream has not been hammered: no wait.
		return m.fallback(m.next(), f, ev, fmt.Sprintf("%d consecutive overloads on %s", m.step.overloads, name))
	case f.Kind == FailTimeout && m.canFallback():
		return m.fallback(m.next(), f, ev, fmt.Sprintf("%s timed out; a silent route is re-tried last", name))
	case f.DeadRoute() && m.canFallback():
		return m.fallback(m.next(), f, ev, fmt.Sprintf("%s dropped the call after %s without a byte of a response: a dead route, re-tried last", name, f.Silence))
	}
	d, why, ok := m.retryWait(f, ev.Rand, m.canFallback())
	if !ok {
		return m.giveUp(f, ev, d, true, why)
	}
	return m.retry(f, ev, m.step.retries, d)
}

// retryWait decides whether retry m.step.retries of the step may run on the
// current route, and after which wait: within the route's retry budget
// (see RetryPolicy.Budget), a Retry-After under the ceiling, and a wait
// the caller's deadline outlives. When it may not, it returns the wait the
// upstream would need (for RetryInfo) and why.
func (m *Machine) retryWait(f *Failure, u float64, hasFallback bool) (time.Duration, string, bool) {
	rp, n, name := m.p.Retry, m.step.retries, m.cur().Name
	budget, maxWait := rp.Budget(hasFallback)
	if f.RetryAfter > rp.RetryAfterCeiling {
		return f.RetryAfter, fmt.Sprintf("%s asks for a wait of %s, over the ceiling of %s", name, f.RetryAfter, rp.RetryAfterCeiling), false
	}
	if n > budget {
		return rp.RetryDelay(n, f.RetryAfter, 0), fmt.Sprintf("no retries left on %s (%d allowed)", name, budget), false
	}
	d := rp.RetryDelay(n, f.RetryAfter, u)
	if maxWait > 0 && m.step.waited+d > maxWait {
		return d, fmt.Sprintf("a wait of %s would take the waiting on %s to %s, over its budget of %s",
			d, name, m.step.waited+d, maxWait), false
	}
	if dl := m.cfg.Deadline; !dl.IsZero() && m.now.Add(d).After(dl) {
		return d, fmt.Sprintf("a wait of %s would outlive the deadline (%s left)", d, dl.Sub(m.now)), false
	}
	return d, "", true
}

// giveUp falls back to the next route if there is one, and otherwise ends
// the completion with the failure, retryable after d when retryable.
func (m *Machine) giveUp(f *Failure, ev Event, d time.Duration, retryable bool, why string) Action {
	if m.canFallback() {
		return m.fallback(m.next(), f, ev, why)
	}
	return m.fail(ModelError, f, ev.Text, why+"; no route left", d, retryable)
}

// prefillRejected retries at once without a prefill. The route is marked so
// that it is never sent one again: a refusal is a property of the route.
func (m *Machine) prefillRejected(f *Failure, ev Event) Action {
	m.noPrefill[m.route] = true
	m.step.retries++
	if budget, _ := m.p.Retry.Budget(m.canFallback()); m.step.retries > budget {
		return m.giveUp(f, ev, 0, true, fmt.Sprintf("no retries left on %s (%d allowed)", m.cur().Name, budget))
	}
	return m.retry(f, ev, m.step.retries, 0)
}

// routeFailed handles a permanent failure that another route may not have.
// A call the open circuit kept from being sent is reported retryable after
// the circuit's cool-down, which the driver puts in RetryAfter.
func (m *Machine) routeFailed(f *Failure, ev Event) Action {
	why := fmt.Sprintf("%s on %s", f.Kind, m.cur().Name)
	if m.canFallback() {
		return m.fallback(m.next(), f, ev, why)
	}
	// An open circuit closes again after its cool-down; the other
	// route-specific failures need someone to fix the route.
	open := f.Kind == FailCircuitOpen
	return m.fail(ModelError, f, ev.Text, why+"; no route left", f.RetryAfter, open)
}

func (m *Machine) canFallback() bool { return m.p.Retry.Fallback && m.route+1 < len(m.cfg.Routes) }

// next is the route a fallback moves to: the next one whose circuit is not
// open, or simply the next one when all of them are open.
func (m *Machine) next() int { return m.closedFrom(m.route + 1) }

// retry tries the step again on the same route after d: RETRY, or
// STREAM_RESUME when a partial answer continues by prefill.
func (m *Machine) retry(f *Failure, ev Event, n int, d time.Duration) Action {
	name := m.cur().Name
	budget, _ := m.p.Retry.Budget(m.canFallback())
	t := m.transition(Retry, f, fmt.Sprintf("%s: retry %d of %d on %s %s", f.Kind, n, budget, name, after(d)))
	t.Retry, t.Backoff = n, d
	m.step.waited += d
	switch kept, ok := m.resume(ev, m.route); {
	case ok:
		t.Reason = StreamResume
		t.Message = fmt.Sprintf("%s after %d byte(s) of attempt %d: continuing the %d-byte partial answer by prefill on %s %s (retry %d of %d)",
			f.Kind, len(ev.Text), m.attempt, kept, name, after(d), n, budget)
	case len(m.voids) > 0:
		t.Message += "; clean restart, the partial answer is discarded"
	}
	m.emit(t)
	return m.wait(d)
}

// fallback moves to route i at once. A partial answer continues there by
// prefill (MODEL_FALLBACK then STREAM_RESUME) or is discarded.
func (m *Machine) fallback(i int, f *Failure, ev Event, why string) Action {
	from := m.cur()
	kept, resumed := m.resume(ev, i)
	m.route, m.step, m.ceiling = i, stepState{}, 0 // collapsed stays: the conversation is the same
	t := m.transition(ModelFallback, f, fmt.Sprintf("%s: falling back from %s to %s", why, from.Name, m.cur().Name))
	t.From = from
	if len(m.voids) > 0 {
		t.Message += "; the partial answer is discarded, " + m.cur().Name + " cannot continue it"
	}
	m.emit(t)
	if resumed {
		m.emit(m.transition(StreamResume, f,
			fmt.Sprintf("continuing the partial answer (%d bytes) on %s by prefill", kept, m.cur().Name)))
	}
	return m.callChecked()
}

// resume decides the fate of the partial answer of a failed step: the text
// kept by earlier resumes plus what the failed attempt streamed. If route i
// can continue it by prefill it is kept, and resume returns its length and
// true; otherwise it is voided and the step restarts cleanly. An attempt
// that made tool calls before it failed cannot be continued: a prefill
// carries text only, and the calls would be lost.
func (m *Machine) resume(ev Event, i int) (int, bool) {
	partial := m.segmentText() + ev.Text
	switch {
	case partial == "" && len(ev.ToolCalls) == 0:
		return 0, false
	case m.prefillOK(i) && len(ev.ToolCalls) == 0:
		if ev.Text != "" {
			m.parts = append(m.parts, part{attempt: m.attempt, text: ev.Text, tokens: ev.Usage.OutputTokens, cut: true})
		}
		return len(partial), true
	}
	m.dropParts(m.segStart)
	if ev.Text != "" || len(ev.ToolCalls) > 0 {
		m.void(m.attempt)
	}
	return 0, false
}

// after says when the next attempt starts, for transition messages.
func after(d time.Duration) string {
	if d <= 0 {
		return "at once"
	}
	return "after " + d.String()
}
