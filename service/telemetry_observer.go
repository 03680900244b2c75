package service

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/completiond/completiond/recovery"
)

// observer records what the driver does: logs, spans and metrics. It is the
// single hook for all three. The Server holds one without a trail; each
// completion gets a copy, and start gives the copy a trail of its own.
//
// The spans form this tree under the RPC span of otelgrpc:
//
//	chat {model}                      one per completion (GenAI conventions)
//	├── attempt {n} {route}           one per upstream attempt
//	└── compact {model}               one per summarising call
//
// Transitions are span events on the completion span, and on the attempt
// span they follow.
type observer struct {
	log    *slog.Logger
	tracer trace.Tracer
	m      *instruments
	trail  *trail // per completion; nil on the Server's copy
}

// trail is the telemetry state of one completion. The driver calls the
// observer from one goroutine, so it needs no lock.
type trail struct {
	ctx      context.Context // carries span, for logs
	span     trace.Span      // chat {model}
	begun    time.Time
	pending  *attemptSpan // an ended attempt whose transitions may still come
	attempts int          // attempts started so far
	key      string       // name of the caller's key; "" without auth
}

// attemptSpan follows one upstream attempt. Its span stays open after the
// attempt ends, with the end time fixed, until the transitions that follow
// it have been recorded on it: the backoff and the decision come after the
// attempt, in the machine's next step.
type attemptSpan struct {
	ctx     context.Context
	o       *observer
	span    trace.Span
	attempt int
	route   string
	begun   time.Time
	first   time.Time // first chunk
	ended   time.Time
	chunks  int
	outcome string
	next    string // the reason of the first transition that followed
}

// newObserver returns the Server's observer: logs to log, telemetry to tel.
// circuits, if not nil, reports each route's circuit state (0 closed,
// 1 half-open, 2 open: gobreaker.State) for the completiond.circuit.state gauge; it
// is called on the metrics collector's goroutine.
func newObserver(log *slog.Logger, tel Telemetry, circuits func() map[string]int) observer {
	return observer{log: log, tracer: tracerFrom(tel.TracerProvider), m: newInstruments(tel.MeterProvider, circuits)}
}

// ensure fills in what a zero observer lacks, so that a completion built
// without New still runs.
func (o *observer) ensure() {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.tracer == nil {
		o.tracer = tracerFrom(nil)
	}
	if o.m == nil {
		o.m = newInstruments(nil, nil)
	}
}

// start opens the completion span as a child of the RPC span in ctx, and
// puts its trace id into the Started event when the trace is recorded.
func (o *observer) start(ctx context.Context, c *completion) {
	o.ensure()
	first := c.machine.Routes[0]
	ctx, span := o.tracer.Start(ctx, "chat "+first.Model, trace.WithSpanKind(trace.SpanKindClient))
	o.trail = &trail{ctx: ctx, span: span, begun: time.Now(), key: CallerName(ctx)}
	if span.IsRecording() {
		span.SetAttributes(keyOperation.String("chat"), keyProvider.String(first.Provider),
			keyRequestModel.String(first.Model), keyMaxTokens.Int(requestMaxTokens(c)),
			keyRoute.String(first.Name), keyCompletionID.String(c.id))
		if o.trail.key != "" {
			span.SetAttributes(keyAuthKey.String(o.trail.key))
		}
		if c.started != nil {
			c.started.TraceId = span.SpanContext().TraceID().String()
		}
	}
	if o.m.on {
		o.m.inFlight.Add(ctx, 1)
	}
}

// requestMaxTokens is the max_tokens the completion starts with.
func requestMaxTokens(c *completion) int {
	if c.machine.MaxTokens > 0 {
		return c.machine.MaxTokens
	}
	return c.machine.Policy.Truncation.MaxOutputTokens
}

// attemptStart opens the span of one upstream attempt, a child of the
// completion span: "attempt {n} {route}" for an answer, "compact {model}"
// for a summarising call (purpose compaction). ctx keeps its cancellation;
// only its span changes.
func (o *observer) attemptStart(ctx context.Context, c *completion, call recovery.Call, summary bool) *attemptSpan {
	o.ensure()
	o.closePending()
	s := &attemptSpan{ctx: ctx, o: o, attempt: call.Attempt, route: call.Route.Name, begun: time.Now()}
	if o.trail == nil {
		return s
	}
	name := "attempt " + strconv.Itoa(call.Attempt) + " " + call.Route.Name
	if summary {
		name = "compact " + call.Route.Model
	}
	s.ctx, s.span = o.tracer.Start(trace.ContextWithSpan(ctx, o.trail.span), name, trace.WithSpanKind(trace.SpanKindClient))
	if s.span.IsRecording() {
		s.span.SetAttributes(keyOperation.String("chat"), keyProvider.String(call.Route.Provider),
			keyRequestModel.String(call.Route.Model), keyMaxTokens.Int(call.MaxTokens),
			keyResendCount.Int(o.resends()), keyAttempt.Int(call.Attempt), keyRoute.String(call.Route.Name))
		if summary {
			s.span.SetAttributes(keyPurpose.String("compaction"))
		}
	}
	return s
}

// resends is the number of attempts before this one: the resend count of
// the HTTP conventions, 0 for the first attempt.
func (o *observer) resends() int {
	n := 0
	if o.trail != nil {
		n = o.trail.attempts
		o.trail.attempts++
	}
	return n
}

// chunk notes one streamed chunk. It runs per token, so it only counts.
func (s *attemptSpan) chunk() {
	if s.chunks == 0 {
		s.first = time.Now()
	}
	s.chunks++
}

// end records how the attempt ended. The span stays open for the
// transitions that follow; see attemptSpan.
func (s *attemptSpan) end(ev recovery.Event) {
	s.ended = time.Now()
	s.outcome = eventOutcome(ev)
	if s.chunks > 0 && s.o.m.on {
		s.o.m.firstToken.Record(s.ctx, s.first.Sub(s.begun).Seconds(), metric.WithAttributes(keyRoute.String(s.route)))
	}
	if s.span != nil && s.span.IsRecording() {
		s.record(ev)
	}
	if s.o.trail != nil {
		s.o.trail.pending = s
	}
}

// eventOutcome is an attempt's outcome as far as the attempt itself tells;
// a later transition may still discard an answer.
func eventOutcome(ev recovery.Event) string {
	switch ev.Kind {
	case recovery.EvAttemptDone:
		return "answered"
	case recovery.EvAttemptFailed:
		return "failed"
	case recovery.EvCancelled:
		return "cancelled"
	}
	return "unknown"
}

// record puts what the attempt returned on its span: usage, stop reason,
// and the classified failure (never the prompt or the answer).
func (s *attemptSpan) record(ev recovery.Event) {
	s.span.SetAttributes(keyInputTokens.Int64(ev.Usage.InputTokens), keyOutputTokens.Int64(ev.Usage.OutputTokens),
		keyChunks.Int(s.chunks))
	if !s.first.IsZero() {
		s.span.AddEvent("first chunk", trace.WithTimestamp(s.first))
	}
	switch ev.Kind {
	case recovery.EvAttemptDone:
		s.span.SetAttributes(keyFinishReasons.StringSlice([]string{ev.StopReason.String()}))
	case recovery.EvAttemptFailed:
		s.span.SetAttributes(failureAttrs(ev.Failure)...)
		s.span.SetStatus(codes.Error, ev.Failure.Error())
	case recovery.EvCancelled:
		s.span.SetAttributes(keyErrorType.String("cancelled"))
	}
}

// failureAttrs describe a classified upstream failure.
func failureAttrs(f *recovery.Failure) []attribute.KeyValue {
	errType := f.Type
	if errType == "" {
		errType = f.Kind.String()
	}
	attrs := []attribute.KeyValue{keyErrorType.String(errType), keyErrorKind.String(f.Kind.String())}
	if f.HTTPStatus != 0 {
		attrs = append(attrs, keyHTTPStatus.Int(f.HTTPStatus))
	}
	if f.RequestID != "" {
		attrs = append(attrs, keyRequestID.String(f.RequestID))
	}
	return attrs
}

// follow records a transition on the attempt it follows: the decision, the
// backoff, and whether it voided the attempt's output.
func (s *attemptSpan) follow(t recovery.Transition) {
	if s.outcome == "answered" && voids(t, s.attempt) {
		s.outcome = "discarded"
	}
	if s.span == nil || !s.span.IsRecording() {
		return
	}
	if s.next == "" {
		s.next = t.Reason.String()
		s.span.SetAttributes(keyNext.String(s.next))
	}
	if t.Backoff > 0 {
		s.span.SetAttributes(keyBackoff.String(t.Backoff.String()))
	}
	s.span.AddEvent("transition", trace.WithTimestamp(s.ended), trace.WithAttributes(transitionAttrs(t)...))
}

// voids reports whether t voids the output of attempt n.
func voids(t recovery.Transition, n int) bool {
	return (t.DiscardOutput && t.Attempt == n) || slices.Contains(t.DiscardAttempts, n)
}

// close ends the attempt span at the time the attempt ended.
func (s *attemptSpan) close() {
	if s.span == nil {
		return
	}
	if s.span.IsRecording() && s.outcome != "" {
		s.span.SetAttributes(keyOutcome.String(s.outcome))
	}
	s.span.End(trace.WithTimestamp(s.ended))
}

// closePending ends the span of the last attempt, if it still waits for
// transitions.
func (o *observer) closePending() {
	if o.trail != nil && o.trail.pending != nil {
		o.trail.pending.close()
		o.trail.pending = nil
	}
}

// transition logs t, counts it, and records it as a span event on the
// completion span and on the attempt it follows.
func (o *observer) transition(c *completion, t recovery.Transition) {
	o.ensure()
	ctx := context.Background()
	if o.trail != nil {
		ctx = o.trail.ctx
		o.traceTransition(t)
	}
	if o.m.on {
		o.countTransition(ctx, t)
	}
	o.logTransition(ctx, c, t)
}

func (o *observer) traceTransition(t recovery.Transition) {
	tr := o.trail
	if tr.pending != nil && tr.pending.attempt != t.Attempt {
		o.closePending()
	}
	if tr.pending != nil {
		tr.pending.follow(t)
	}
	if tr.span.IsRecording() {
		tr.span.AddEvent("transition", trace.WithAttributes(transitionAttrs(t)...))
	}
}

// transitionAttrs are the attributes of a transition span event.
func transitionAttrs(t recovery.Transition) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("reason", t.Reason.String()), attribute.Int("attempt", t.Attempt),
		attribute.Bool("terminal", t.Terminal), attribute.Bool("discard_output", t.DiscardOutput)}
	if t.Backoff > 0 {
		attrs = append(attrs, attribute.String("backoff", t.Backoff.String()))
	}
	if t.To.Name != "" {
		attrs = append(attrs, attribute.String("to_route", t.To.Name), attribute.String("to_model", t.To.Model),
			attribute.Int("max_tokens", t.MaxTokens))
	}
	if t.Failure != nil {
		attrs = append(attrs, attribute.String("error.kind", t.Failure.Kind.String()))
		if t.Failure.HTTPStatus != 0 {
			attrs = append(attrs, attribute.Int("http_status", t.Failure.HTTPStatus))
		}
	}
	if t.Message != "" {
		attrs = append(attrs, attribute.String("message", t.Message))
	}
	return attrs
}

func (o *observer) countTransition(ctx context.Context, t recovery.Transition) {
	reason := metric.WithAttributes(keyReason.String(t.Reason.String()))
	o.m.transitions.Add(ctx, 1, reason)
	if t.Backoff > 0 {
		o.m.backoff.Record(ctx, t.Backoff.Seconds(), reason)
	}
}

func (o *observer) logTransition(ctx context.Context, c *completion, t recovery.Transition) {
	if !o.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := []any{"completion_id", c.id, "attempt", t.Attempt, "turn", t.Turn, "reason", t.Reason.String(),
		"terminal", t.Terminal, "discard_output", t.DiscardOutput}
	if t.Backoff > 0 {
		attrs = append(attrs, "backoff", t.Backoff.String())
	}
	if t.To.Name != "" {
		attrs = append(attrs, "to_route", t.To.Name)
	}
	if t.Failure != nil {
		attrs = append(attrs, "error_kind", t.Failure.Kind.String(), "http_status", t.Failure.HTTPStatus)
	}
	o.log.InfoContext(ctx, "transition", attrs...)
}

// finish ends the completion span with the result, and records the
// completion's metrics: attempts by their final outcome, tokens, duration.
func (o *observer) finish(c *completion, r *recovery.Result) {
	o.ensure()
	ctx := context.Background()
	if o.trail != nil {
		ctx = o.trail.ctx
	}
	// Logged first: the line carries the ids of the span still recording.
	attrs := []any{"completion_id", c.id, "reason", r.Reason.String(),
		"stop_reason", r.StopReason.String(), "truncated", r.Truncated, "route", r.Route.Name,
		"attempts", len(r.Attempts), "input_tokens", r.Usage.InputTokens, "output_tokens", r.Usage.OutputTokens}
	if o.trail != nil && o.trail.key != "" {
		attrs = append(attrs, "auth_key", o.trail.key)
	}
	o.log.InfoContext(ctx, "completion finished", attrs...)
	if o.m.on {
		o.countFinish(ctx, c, r)
	}
	if tr := o.trail; tr != nil {
		o.closePending()
		if tr.span.IsRecording() {
			endSpan(tr.span, r)
		}
		tr.span.End()
	}
}

// endSpan sets the response attributes of the completion span.
func endSpan(span trace.Span, r *recovery.Result) {
	span.SetAttributes(keyResponseModel.String(r.Route.Model), keyInputTokens.Int64(r.Usage.InputTokens),
		keyOutputTokens.Int64(r.Usage.OutputTokens), keyReason.String(r.Reason.String()),
		keyTruncated.Bool(r.Truncated), attribute.Int("completiond.attempts", len(r.Attempts)))
	if r.StopReason != recovery.StopNone {
		span.SetAttributes(keyFinishReasons.StringSlice([]string{r.StopReason.String()}))
	}
	if r.Reason == recovery.Completed {
		return
	}
	span.SetAttributes(keyErrorType.String(r.Reason.String()))
	msg := "completion ended " + r.Reason.String()
	if r.Failure != nil {
		span.SetAttributes(keyErrorKind.String(r.Failure.Kind.String()))
		msg += ": " + r.Failure.Error()
	}
	span.SetStatus(codes.Error, msg)
}

// countFinish records the metrics known only at the end: the machine's own
// verdict on every attempt, total tokens and the completion's duration.
func (o *observer) countFinish(ctx context.Context, c *completion, r *recovery.Result) {
	o.m.inFlight.Add(ctx, -1)
	for _, a := range r.Attempts {
		o.m.attempts.Add(ctx, 1, metric.WithAttributes(keyOutcome.String(outcomeName(a.Outcome)), keyRoute.String(a.Route.Name)))
	}
	first := c.machine.Routes[0]
	common := []attribute.KeyValue{keyOperation.String("chat"), keyProvider.String(first.Provider), keyRequestModel.String(first.Model)}
	if o.trail != nil && o.trail.key != "" {
		common = append(common, keyAuthKey.String(o.trail.key))
	}
	o.m.tokens.Record(ctx, r.Usage.InputTokens, metric.WithAttributes(append(common, keyTokenType.String("input"))...))
	o.m.tokens.Record(ctx, r.Usage.OutputTokens, metric.WithAttributes(append(common, keyTokenType.String("output"))...))
	if r.Reason != recovery.Completed {
		common = append(common, keyErrorType.String(r.Reason.String()))
	}
	if o.trail != nil {
		o.m.duration.Record(ctx, time.Since(o.trail.begun).Seconds(), metric.WithAttributes(common...))
	}
}

// outcomeName is the metric label of an attempt outcome.
func outcomeName(o recovery.Outcome) string {
	switch o {
	case recovery.OutcomeAnswered:
		return "answered"
	case recovery.OutcomeDiscarded:
		return "discarded"
	case recovery.OutcomeFailed:
		return "failed"
	}
	return "unknown"
}
