package driver

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/recovery"
)

// ErrCallerGone is what Run returns when the caller went away before the
// result was sent.
var ErrCallerGone = errors.New("client gone")

// Completion is one run of the driver loop: it owns the machine and is the
// only place that waits, streams and calls. It decides nothing: each Step
// of the machine says what to run, what to publish, and which attempts'
// output is final or void; the outbox (outbox.go) forwards that.
type Completion struct {
	spec       Spec
	out        *outbox                    // numbers, holds and sends the events
	history    []*completionv1.Transition // every transition, for Complete
	trail      *telemetry.Trail           // this completion's, from Observer.Start
	models     map[int32]string           // the model each attempt's upstream says answered; nil until one says
	final      *completionv1.Result
	conclusion Conclusion // once Run has returned
	prevPrompt int        // the messages of the last call's prompt, for its cache breakpoint
}

// New returns the completion of sp.
func New(sp Spec) *Completion {
	out := &outbox{send: sp.Send, settled: sp.Settled, unsettled: sp.Held,
		log: sp.Log, id: sp.ID, observe: sp.Observe, fence: sp.Fence, seq: sp.AfterSeq, hooks: sp.Hooks, open: sp.Open}
	if out.unsettled == nil {
		out.unsettled = map[int][]*completionv1.CompletionEvent{}
	}
	return &Completion{spec: sp, out: out}
}

// ID is the completion's id.
func (c *Completion) ID() string { return c.spec.ID }

// Result is the result sent, once Run has returned with one.
func (c *Completion) Result() *completionv1.Result { return c.final }

// Transitions are every transition published, once Run has returned.
func (c *Completion) Transitions() []*completionv1.Transition { return c.history }

// Conclusion is how the completion's RPC ends, once Run has returned.
func (c *Completion) Conclusion() Conclusion { return c.conclusion }

// Fenced reports whether the replica lost the completion's lease while it
// ran: it stopped writing, and its caller attaches elsewhere.
func (c *Completion) Fenced() bool { c.out.await(); return c.out.fenced }

// Abort ends the completion's log with an empty result and status, for a
// run that cannot go on (it panicked), so that its followers end too.
func (c *Completion) Abort(status []byte) {
	c.out.end(0, 0, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{}}}, status)
}

// Run drives the machine to its end and returns the result. The returned
// error is ErrCallerGone when the caller went away before the result was
// sent.
func (c *Completion) Run(ctx context.Context) (*recovery.Result, error) {
	defer c.spec.Release()
	mc := &c.spec.Machine
	mc.OpenRoutes = c.spec.Breakers.Open(mc.Routes)
	var m *recovery.Machine
	if c.spec.Prior != nil {
		m = takeover(*mc, *c.spec.Prior)
	} else {
		m = recovery.New(*mc) // inlined: the machine is in Run's frame
	}
	started := c.spec.Started
	if started == nil {
		first := mc.Routes[0]
		started = &completionv1.Started{CompletionId: c.spec.ID, Route: first.Name, Model: first.Model, Provider: first.Provider}
	}
	var traceID string
	c.trail, traceID = c.spec.Observer.Start(ctx, c.telemetryInfo())
	if traceID != "" {
		started.TraceId = traceID
	}
	if c.spec.Prior == nil {
		c.out.ahead(&completionv1.CompletionEvent{Attempt: 0, Turn: 1, Event: &completionv1.CompletionEvent_Started{Started: started}})
	}
	step := m.Start(c.spec.Now())
	for {
		if step.Checkpoint != nil {
			c.saveCheckpoint(step.Checkpoint) // before the step's events: a takeover reads the events after it
		}
		a := step.Action
		if a.Kind == recovery.ActFinish {
			c.out.holdForEnd() // the step's events go to the log with the result
		}
		c.forward(step)
		if a.Kind == recovery.ActFinish {
			return c.finish(a)
		}
		ev := c.perform(ctx, a)
		c.charge(a, ev)
		ev.Now, ev.Rand, ev.OpenRoutes = c.spec.Now(), c.spec.Rand(), c.spec.Breakers.Open(mc.Routes)
		step = m.Step(ev)
	}
}

// telemetryInfo is what the completion's Trail is told of it.
func (c *Completion) telemetryInfo() telemetry.Info {
	return telemetry.Info{ID: c.spec.ID, First: c.spec.Machine.Routes[0], MaxTokens: c.spec.Machine.StartMaxTokens(), Key: c.spec.Key, Chain: c.spec.Routes}
}

// takeover is recovery.Takeover, never inlined into Run: inlined, its
// machine (over a KiB) would take a second place in Run's frame beside
// the new one's, on the goroutine's stack for as long as every completion
// lasts; a completion taken over has its machine on the heap instead.
//
//go:noinline
func takeover(cfg recovery.Config, p recovery.Prior) *recovery.Machine {
	return recovery.Takeover(cfg, p)
}

// forward does what a step says before its action runs: settle the held
// output, then publish the transitions.
func (c *Completion) forward(step recovery.Step) {
	c.out.settle(step)
	for _, t := range step.Transitions {
		c.publish(t)
	}
}

// publish sends one transition, numbered by the machine.
func (c *Completion) publish(t recovery.Transition) {
	pt := convert.FromTransition(t)
	c.history = append(c.history, pt)
	c.trail.Transition(t)
	c.out.event(t.Attempt, t.Turn, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Transition{Transition: pt}})
}

// finish sends the result of an ActFinish and ends the run.
func (c *Completion) finish(a recovery.Action) (*recovery.Result, error) {
	c.final = c.result(a.Result)
	c.conclusion = c.spec.Conclude(a.Result)
	c.out.end(a.Attempt, a.Turn, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{Result: c.final}}, c.conclusion.Status)
	c.trail.Finish(a.Result)
	if c.out.callerGone() {
		return a.Result, ErrCallerGone
	}
	return a.Result, nil
}

// result maps the machine's result to the wire, with the models the
// upstreams said answered (a route's model may be an alias the upstream
// resolves, e.g. to a dated version). The result's model is the model of
// the last attempt whose output is in the answer; without one it is empty.
// A model an upstream names is its own words: like its error messages, it
// is scrubbed of anything that looks like a credential and bounded (the
// providers, which know their keys, have scrubbed those already). Each
// attempt's cost is at the prices of its own route (config.AttemptCost).
func (c *Completion) result(r *recovery.Result) *completionv1.Result {
	out := convert.FromResult(r)
	out.Model = ""
	for i, a := range out.GetAttempts() {
		if m := c.models[a.GetAttempt()]; m != "" {
			a.Model = m // scrubbed by call
		}
		if a.GetOutcome() == completionv1.AttemptOutcome_ATTEMPT_OUTCOME_ANSWERED {
			out.Model = a.GetModel()
		}
		a.CostUsd, a.CostKnown = config.AttemptCost(c.spec.Routes, r.Attempts[i]) // FromResult keeps the attempts' order
	}
	out.CostUsd, out.CostKnown = config.TotalCost(c.spec.Routes, r.Attempts)
	return out
}

// perform runs one action and reports what happened. An action that
// finished is reported as such even if the caller left meanwhile; the next
// one then reports the cancellation, so the machine knows where it stopped.
func (c *Completion) perform(ctx context.Context, a recovery.Action) recovery.Event {
	if c.out.callerGone() || ctx.Err() != nil {
		calling := a.Kind == recovery.ActCall || a.Kind == recovery.ActSummarize
		return recovery.Event{Kind: recovery.EvCancelled, Reason: cancelReason(ctx, c.out.callerGone()), NotSent: calling}
	}
	switch a.Kind {
	case recovery.ActCall, recovery.ActSummarize:
		if c.spec.Budget != nil {
			// Before every call, the first included: a retry, a
			// continuation, a fallback, a next turn, a summary. The
			// attempt that crossed the budget has finished already.
			if d, why, spent := c.spec.Budget.Spent(); spent {
				return recovery.Event{Kind: recovery.EvBudgetExceeded, Reason: why, RetryAfter: d, NotSent: true}
			}
		}
		return c.call(ctx, a)
	case recovery.ActWait:
		return c.wait(ctx, a.Delay)
	case recovery.ActAwaitTools:
		return c.spec.Caller.AwaitTools(ctx, a)
	case recovery.ActAwaitStopHook:
		return c.stopHook(ctx, a)
	}
	return recovery.Event{Kind: recovery.EvCancelled, Reason: "unknown action"}
}

// charge charges the attempt of action a, which ev reports, to the key's
// budget: its cost at its route's prices (0 USD on a route without) and
// its input plus output tokens, whatever became of its output. A call that
// was never sent is no attempt, and costs nothing.
func (c *Completion) charge(a recovery.Action, ev recovery.Event) {
	if c.spec.Budget == nil || (a.Kind != recovery.ActCall && a.Kind != recovery.ActSummarize) || ev.NotSent {
		return
	}
	usd, _ := config.AttemptCost(c.spec.Routes, recovery.AttemptRecord{Route: a.Call.Route, Usage: ev.Usage})
	c.spec.Budget.Charge(usd, ev.Usage.InputTokens+ev.Usage.OutputTokens)
}

func cancelReason(ctx context.Context, gone bool) string {
	if gone {
		return "the caller went away"
	}
	return context.Cause(ctx).Error()
}

// call runs one upstream attempt: an answer (ActCall), whose text and
// thinking go to the outbox as they stream, or a summary (ActSummarize),
// of which the caller sees nothing. Both go through the route's breaker
// and have a span of their own. Tool calls are only collected: the machine
// hands the answer's calls over when they are settled.
func (c *Completion) call(ctx context.Context, a recovery.Action) recovery.Event {
	call, summary := a.Call, a.Kind == recovery.ActSummarize
	route := c.spec.Route(call.Route.Name)
	breakers := c.spec.Breakers
	report, ok := breakers.Allow(route.Spec.Name)
	if !ok {
		return recovery.Event{Kind: recovery.EvAttemptFailed, NotSent: true, Failure: &recovery.Failure{
			Kind: recovery.FailCircuitOpen, Provider: route.Spec.Provider, RetryAfter: breakers.RetryAfter(route.Spec.Name),
			Message: "circuit open for route " + route.Spec.Name}}
	}
	// The provider stops its call when Stream returns (provider.Provider),
	// so the attempt needs no context of its own here.
	span := c.trail.AttemptStart(ctx, call, summary)
	attempt, turn := a.Attempt, a.Turn // for the callback, which would keep all of a
	var text strings.Builder
	var calls []recovery.ToolCall
	var thinking []recovery.Block
	var join *joinStop // a stop sequence split across the cut this attempt continues
	if !summary {
		join = newJoinStop(call.Continues, c.spec.Request.GetStopSequences())
	}
	answer := func(s string) error {
		text.WriteString(s)
		if summary {
			return nil
		}
		return c.out.output(attempt, turn, completionv1.DeltaKind_DELTA_KIND_TEXT, s)
	}
	fin, err := route.Upstream.Stream(span.Ctx, c.request(call, route, summary), func(ch provider.Chunk) error {
		span.Chunk()
		switch ch.Kind {
		case provider.ChunkText:
			s := ch.Text
			if join != nil {
				var done bool
				if s, done = join.feed(s); done {
					return errJoinStop
				}
				if s == "" {
					return nil
				}
			}
			return answer(s)
		case provider.ChunkThinking:
			if !summary {
				return c.out.output(attempt, turn, completionv1.DeltaKind_DELTA_KIND_THINKING, ch.Text)
			}
		case provider.ChunkThinkingBlock:
			thinking = append(thinking, ch.Block) // already streamed as ChunkThinking: for the machine only
		case provider.ChunkToolCall:
			calls = append(calls, ch.ToolCall)
		}
		return nil
	})
	if join != nil && !errors.Is(err, errJoinStop) {
		if rest := join.flush(); rest != "" {
			_ = answer(rest) // a caller gone is seen below, as for any chunk
		}
	}
	c.out.event(a.Attempt, a.Turn, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Usage{Usage: convert.FromUsage(fin.Usage)}})
	// The model and id an upstream names are its own words: scrubbed here,
	// once, where they enter, for the result, the span and the metrics.
	fin.Model, fin.ID = scrubName(fin.Model), scrubName(fin.ID)
	if fin.Model != "" {
		if c.models == nil {
			c.models = map[int32]string{}
		}
		c.models[int32(call.Attempt)] = fin.Model
	}
	ev := attemptEvent(fin, err, text.String(), calls)
	if errors.Is(err, errJoinStop) {
		ev = recovery.Event{Kind: recovery.EvAttemptDone, StopReason: recovery.StopSequence, StopSequence: join.matched,
			Text: text.String(), Usage: fin.Usage}
	}
	if ev.Kind == recovery.EvAttemptDone {
		ev.Thinking = thinking
	}
	if err != nil && (ctx.Err() != nil || c.out.callerGone()) { // the failure is the caller's leaving, not the route's
		ev = recovery.Event{Kind: recovery.EvCancelled, Reason: cancelReason(ctx, c.out.callerGone()), Text: ev.Text, Usage: ev.Usage}
	}
	report(ev)
	span.End(ev, fin)
	return ev
}

// scrubName is classify.ScrubModel, of which an empty name costs nothing.
func scrubName(s string) string {
	if s == "" {
		return ""
	}
	return classify.ScrubModel(s)
}

func attemptEvent(fin provider.Finish, err error, text string, calls []recovery.ToolCall) recovery.Event {
	if err == nil {
		return recovery.Event{Kind: recovery.EvAttemptDone, StopReason: fin.StopReason, StopSequence: fin.StopSequence,
			Text: text, ToolCalls: calls, Usage: fin.Usage}
	}
	f, ok := provider.AsFailure(err)
	if !ok {
		if errors.Is(err, ErrCallerGone) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return recovery.Event{Kind: recovery.EvCancelled, Reason: err.Error(), Text: text, Usage: fin.Usage}
		}
		f = &recovery.Failure{Kind: recovery.FailUnknown, Message: "unclassified upstream error"}
	}
	return recovery.Event{Kind: recovery.EvAttemptFailed, Failure: f, Text: text, ToolCalls: calls, Usage: fin.Usage}
}

// request builds the provider request of a call: the caller's parameters
// go unchanged on every attempt, and the route's reasoning (resolved for
// this completion's request, see config.Route.Reasoning). A summary carries
// neither the caller's tools nor its metadata (the sim's fault script
// belongs to the caller's own calls), nor its sampling, stop sequences,
// tool choice, output schema or cache breakpoints, and needs no thinking:
// it is completiond's own call, with a prompt of its own.
func (c *Completion) request(call recovery.Call, route *config.Route, summary bool) *provider.Request {
	req := c.spec.Request
	r := &provider.Request{
		Attempt: call.Attempt, Model: call.Route.Model, System: call.System, Messages: call.Messages,
		Tools: convert.ToTools(req.GetTools()), MaxTokens: call.MaxTokens, Prefill: call.Prefill,
		ThinkingBudget: route.ThinkingBudget, Metadata: req.GetMetadata(), Timeouts: route.Timeouts,
	}
	if summary {
		r.Tools, r.Metadata, r.ThinkingBudget = nil, nil, 0
		return r
	}
	r.Reasoning = provider.Reasoning{Effort: route.Effort, Interleaved: route.Interleaved}
	r.Sampling, r.StopSequences, r.ToolChoice = convert.ToSampling(req), req.GetStopSequences(), convert.ToToolChoice(req.GetToolChoice())
	if s := req.GetOutputJsonSchema(); s != "" {
		r.OutputSchema, r.StructuredOutput = []byte(s), route.StructuredOutput
	}
	plan := planCache(req.GetPromptCache(), r.System != "", r.Tools, r.Messages, len(c.spec.Machine.Messages), c.prevPrompt)
	r.Messages = plan.apply(r.Messages)
	r.CacheSystem, r.Tools = plan.system && r.System != "", plan.applyTools(r.Tools, r.System != "")
	c.prevPrompt = len(call.Messages)
	return r
}

// wait sleeps for d unless the caller goes away first.
func (c *Completion) wait(ctx context.Context, d time.Duration) recovery.Event {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return recovery.Event{Kind: recovery.EvCancelled, Reason: "caller went away during backoff"}
	case <-t.C:
		return recovery.Event{Kind: recovery.EvWaitElapsed}
	}
}

// stopHook checks a final answer: the output schema first (built in), then
// the caller's hook when it registered one.
func (c *Completion) stopHook(ctx context.Context, a recovery.Action) recovery.Event {
	if c.spec.Schema != nil {
		if msg, ok := checkAnswer(c.spec.Schema, a.Answer.Text()); !ok {
			return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: recovery.VerdictBlock, VerdictMessage: msg}
		}
	}
	return c.spec.Caller.AwaitStopHook(ctx, a, func(req *completionv1.CompletionEvent) bool {
		c.out.hookRequest(a.Attempt, a.Turn, req)
		return !c.out.callerGone()
	})
}
