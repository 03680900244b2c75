package telemetry

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
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// Observer records what the driver does: logs, spans and metrics. It is the
// single hook for all three. The Server holds one; start gives each
// completion a Trail of its own, which records through it.
//
// The spans form this tree under the RPC span of otelgrpc:
//
//	chat {model}                      one per completion (GenAI conventions)
//	├── attempt {n} {route}           one per upstream attempt
//	└── compact {model}               one per summarising call
//
// Transitions are span events on the completion span, and on the attempt
// span they follow.
type Observer struct {
	log    *slog.Logger
	tracer trace.Tracer
	m      *instruments
	// tracing is whether the server was given a TracerProvider. Without
	// one, a completion whose context carries no recording span opens no
	// spans at all: the no-op tracer's would cost a context, a name and
	// options per span, for nothing.
	tracing bool
}

// Trail is the telemetry of one completion: its spans, what its attempts
// told, and the line and metrics recorded at its end. Observer.start makes
// it from the completion's Info.
type Trail struct {
	*Observer
	info  Info
	trail *trail
}

// Info is what telemetry is told of a completion when it starts: plain
// values the driver fills in.
type Info struct {
	// ID is the completion id.
	ID string
	// First is the route called first.
	First recovery.Route
	// MaxTokens is the max_tokens the completion starts with.
	MaxTokens int
	// Key names the caller's key or certificate; "" without auth.
	Key string
	// Chain is the completion's routes, whose upstreams' addresses go on
	// the spans.
	Chain []*config.Route
}

// route is the route of the chain named name, or nil.
func (i *Info) route(name string) *config.Route {
	for _, r := range i.Chain {
		if r.Spec.Name == name {
			return r
		}
	}
	return nil
}

// trail is the telemetry state of one completion. The driver calls the
// Observer from one goroutine, so it needs no lock.
type trail struct {
	ctx      context.Context // carries span, for logs
	span     trace.Span      // chat {model}, or offSpan
	spans    bool            // whether the completion opens spans (opensSpans)
	begun    time.Time
	pending  *attemptSpan // an ended attempt whose transitions may still come
	attempts int          // attempts started so far
	key      string       // name of the caller's key; "" without auth
	// ended is what each attempt told, by attempt number, for the
	// completion span and the metrics recorded at the end.
	ended endedAttempts
}

// endedAttempts is what each attempt told, by attempt number. A completion
// makes a few attempts: a list is lighter than a map (whose first entry
// costs a group of eight), and as quick.
type endedAttempts []endedAttempt

type endedAttempt struct {
	attempt int
	info    attemptInfo
}

// get is what attempt n told; zero when it told nothing.
func (e endedAttempts) get(n int) (attemptInfo, bool) {
	for _, a := range e {
		if a.attempt == n {
			return a.info, true
		}
	}
	return attemptInfo{}, false
}

// set records what attempt n told.
func (e *endedAttempts) set(n int, info attemptInfo) {
	for i := range *e {
		if (*e)[i].attempt == n {
			(*e)[i].info = info
			return
		}
	}
	*e = append(*e, endedAttempt{n, info})
}

// attemptInfo is what one attempt told that the end of the completion
// needs: its failure, and what the upstream said of its response.
type attemptInfo struct {
	errorKind  string
	httpStatus int
	model      string    // the model the upstream says answered, scrubbed
	id         string    // the upstream's response id
	firstChunk time.Time // zero without a chunk
}

// attemptSpan follows one upstream attempt. Its span stays open after the
// attempt ends, with the end time fixed, until the transitions that follow
// it have been recorded on it: the backoff and the decision come after the
// attempt, in the machine's next step.
type attemptSpan struct {
	Ctx      context.Context
	o        *Trail
	span     trace.Span // nil when the completion opens no spans
	attempt  int
	route    string
	provider string // the route's provider and model, for the metrics
	model    string
	begun    time.Time
	first    time.Time // first chunk
	ended    time.Time
	chunks   int
	outcome  string
	next     string // the reason of the first transition that followed
}

// NewObserver returns the Server's Observer: logs to log, telemetry to tel.
// circuits, if not nil, reports each route's circuit state (0 closed,
// 1 half-open, 2 open: gobreaker.State) for the completiond.circuit.state gauge; it
// is called on the metrics collector's goroutine.
func NewObserver(log *slog.Logger, tel Telemetry, circuits func() map[string]int) *Observer {
	return &Observer{log: log, tracer: tracerFrom(tel.TracerProvider), m: newInstruments(tel.MeterProvider, circuits),
		tracing: tel.TracerProvider != nil}
}

// ensure fills in what a zero observer lacks, so that a completion built
// without New still runs.
func (o *Observer) ensure() {
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

// Start opens the completion span as a child of the RPC span in ctx and
// returns the completion's Trail, with the trace id for the Started event
// when the trace is recorded ("" otherwise).
func (o *Observer) Start(ctx context.Context, info Info) (*Trail, string) {
	if o == nil {
		o = &Observer{}
	}
	o.ensure()
	first := info.First
	span, spans := offSpan, o.opensSpans(ctx)
	if spans {
		ctx, span = o.tracer.Start(ctx, "chat "+first.Model, trace.WithSpanKind(trace.SpanKindClient))
	}
	tr := &Trail{Observer: o, info: info, trail: &trail{ctx: ctx, span: span, spans: spans, begun: time.Now(), key: info.Key}}
	traceID := ""
	if span.IsRecording() {
		span.SetAttributes(keyOperation.String("chat"), keyProvider.String(first.Provider),
			keyRequestModel.String(first.Model), keyMaxTokens.Int(info.MaxTokens),
			keyRoute.String(first.Name), keyCompletionID.String(info.ID))
		if tr.trail.key != "" {
			span.SetAttributes(keyAuthKey.String(tr.trail.key))
		}
		traceID = span.SpanContext().TraceID().String()
	}
	if o.m.on {
		o.m.inFlight.Add(ctx, 1)
	}
	return tr, traceID
}

// offSpan is the completion span of a completion that opens no spans: it
// records nothing, as the no-op tracer's spans do.
var offSpan trace.Span = tracenoop.Span{}

// opensSpans reports whether a completion run under ctx opens spans: with
// a TracerProvider, or when ctx carries a recording span (whose children
// the no-op tracer would still have to hide from the logs and the span).
// Otherwise its context, with the RPC's span in it, stands for them.
func (o *Observer) opensSpans(ctx context.Context) bool {
	return o.tracing || trace.SpanFromContext(ctx).IsRecording()
}

// AttemptStart opens the span of one upstream attempt, a child of the
// completion span: "attempt {n} {route}" for an answer, "compact {model}"
// for a summarising call (purpose compaction). ctx keeps its cancellation;
// only its span changes.
func (o *Trail) AttemptStart(ctx context.Context, call recovery.Call, summary bool) *attemptSpan {
	o.ensure()
	o.closePending()
	s := &attemptSpan{Ctx: ctx, o: o, attempt: call.Attempt, route: call.Route.Name, provider: call.Route.Provider,
		model: call.Route.Model, begun: time.Now()}
	if o.trail == nil || !o.trail.spans {
		return s
	}
	name := "attempt " + strconv.Itoa(call.Attempt) + " " + call.Route.Name
	if summary {
		name = "compact " + call.Route.Model
	}
	s.Ctx, s.span = o.tracer.Start(trace.ContextWithSpan(ctx, o.trail.span), name, trace.WithSpanKind(trace.SpanKindClient))
	resends := o.resends()
	if s.span.IsRecording() {
		s.span.SetAttributes(keyOperation.String("chat"), keyProvider.String(call.Route.Provider),
			keyRequestModel.String(call.Route.Model), keyMaxTokens.Int(call.MaxTokens),
			keyAttempt.Int(call.Attempt), keyRoute.String(call.Route.Name))
		// The HTTP conventions set the resend count on resends only.
		if resends > 0 {
			s.span.SetAttributes(keyResendCount.Int(resends))
		}
		s.span.SetAttributes(serverAttrs(o.info.route(call.Route.Name))...)
		if summary {
			s.span.SetAttributes(keyPurpose.String("compaction"))
		}
	}
	return s
}

// serverAttrs are server.address and server.port of the upstream a route
// calls, when its provider calls one over the network (provider.Addressed).
func serverAttrs(r *config.Route) []attribute.KeyValue {
	if r == nil {
		return nil
	}
	a, ok := r.Upstream.(provider.Addressed)
	if !ok {
		return nil
	}
	host, port := a.Address()
	if host == "" {
		return nil
	}
	attrs := []attribute.KeyValue{keyServerAddress.String(host)}
	if port > 0 {
		attrs = append(attrs, keyServerPort.Int(port))
	}
	return attrs
}

// resends is the number of attempts before this one: the resend count of
// the HTTP conventions.
func (o *Trail) resends() int {
	n := 0
	if o.trail != nil {
		n = o.trail.attempts
		o.trail.attempts++
	}
	return n
}

// Chunk notes one streamed chunk. It runs per token, so it only counts.
func (s *attemptSpan) Chunk() {
	if s.chunks == 0 {
		s.first = time.Now()
	}
	s.chunks++
}

// End records how the attempt ended, ev as the machine sees it and fin as
// the provider told it. The span stays open for the transitions that
// follow; see attemptSpan.
func (s *attemptSpan) End(ev recovery.Event, fin provider.Finish) {
	s.ended = time.Now()
	s.outcome = eventOutcome(ev)
	model := fin.Model // scrubbed by completion.call
	if s.chunks > 0 && s.o.m.on {
		s.o.m.firstChunk.Record(s.Ctx, s.first.Sub(s.begun).Seconds(), metric.WithAttributes(
			keyOperation.String("chat"), keyProvider.String(s.provider), keyRequestModel.String(s.model),
			keyResponseModel.String(s.o.m.models.bound(orDefault(model, s.model))), keyRoute.String(s.route)))
	}
	if s.span != nil && s.span.IsRecording() {
		s.record(ev, model, fin.ID)
	}
	if tr := s.o.trail; tr != nil {
		tr.pending = s
		info := attemptInfo{model: model, id: fin.ID, firstChunk: s.first}
		if ev.Failure != nil {
			info.errorKind, info.httpStatus = ev.Failure.Kind.String(), ev.Failure.HTTPStatus
		}
		tr.ended.set(s.attempt, info)
	}
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
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

// record puts what the attempt returned on its span: its own usage (not
// as gen_ai.usage.*: that is the completion's), the upstream's model and
// response id, the time to the first chunk, the stop reason, and the
// classified failure (never the prompt or the answer).
func (s *attemptSpan) record(ev recovery.Event, model, id string) {
	s.span.SetAttributes(keyAttemptInput.Int64(inputTokens(ev.Usage)), keyAttemptOutput.Int64(ev.Usage.OutputTokens),
		keyChunks.Int(s.chunks))
	if model != "" {
		s.span.SetAttributes(keyResponseModel.String(model))
	}
	if id != "" {
		s.span.SetAttributes(keyResponseID.String(id))
	}
	if !s.first.IsZero() {
		s.span.SetAttributes(keyFirstChunk.Float64(s.first.Sub(s.begun).Seconds()))
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
		s.span.SetAttributes(keyBackoff.Float64(t.Backoff.Seconds()))
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
func (o *Trail) closePending() {
	if o.trail != nil && o.trail.pending != nil {
		o.trail.pending.close()
		o.trail.pending = nil
	}
}

// Transition logs t, counts it, and records it as a span event on the
// completion span and on the attempt it follows.
func (o *Trail) Transition(t recovery.Transition) {
	o.ensure()
	ctx := context.Background()
	if tr := o.trail; tr != nil {
		ctx = tr.ctx
		o.traceTransition(t)
		// An attempt refused before it started (an open circuit) has no
		// span: its failure is known from the transition only.
		if _, ok := tr.ended.get(t.Attempt); !ok && t.Failure != nil {
			tr.ended.set(t.Attempt, attemptInfo{errorKind: t.Failure.Kind.String(), httpStatus: t.Failure.HTTPStatus})
		}
	}
	if o.m.on {
		o.countTransition(ctx, t)
	}
	o.logTransition(ctx, t)
}

func (o *Trail) traceTransition(t recovery.Transition) {
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

// transitionAttrs are the attributes of a transition span event, all in
// the completiond.* namespace but the HTTP status.
func transitionAttrs(t recovery.Transition) []attribute.KeyValue {
	attrs := []attribute.KeyValue{keyReason.String(t.Reason.String()), keyAttempt.Int(t.Attempt),
		keyTerminal.Bool(t.Terminal), keyDiscardOutput.Bool(t.DiscardOutput)}
	if t.Backoff > 0 {
		attrs = append(attrs, keyBackoff.Float64(t.Backoff.Seconds()))
	}
	if t.To.Name != "" {
		attrs = append(attrs, keyToRoute.String(t.To.Name), keyToModel.String(t.To.Model), keyNextMaxTokens.Int(t.MaxTokens))
	}
	if t.Failure != nil {
		attrs = append(attrs, keyErrorKind.String(t.Failure.Kind.String()))
		if t.Failure.HTTPStatus != 0 {
			attrs = append(attrs, keyHTTPStatus.Int(t.Failure.HTTPStatus))
		}
	}
	if t.Message != "" {
		attrs = append(attrs, keyMessage.String(t.Message))
	}
	return attrs
}

func (o *Observer) countTransition(ctx context.Context, t recovery.Transition) {
	reason := metric.WithAttributes(keyReason.String(t.Reason.String()))
	o.m.transitions.Add(ctx, 1, reason)
	if t.Backoff > 0 {
		o.m.backoff.Record(ctx, t.Backoff.Seconds(), reason)
	}
}

func (o *Trail) logTransition(ctx context.Context, t recovery.Transition) {
	// A terminal transition without a failure (COMPLETED, a caller's
	// cancel) says nothing the completion's own line does not: DEBUG.
	level := slog.LevelInfo
	if t.Terminal && t.Failure == nil {
		level = slog.LevelDebug
	}
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 11)
	attrs = append(attrs, slog.String("completion_id", o.info.ID), slog.Int("attempt", t.Attempt), slog.Int("turn", t.Turn),
		slog.String("reason", t.Reason.String()), slog.Bool("terminal", t.Terminal), slog.Bool("discard_output", t.DiscardOutput))
	if t.Backoff > 0 {
		attrs = append(attrs, slog.String("backoff", t.Backoff.String()))
	}
	if t.To.Name != "" {
		attrs = append(attrs, slog.String("to_route", t.To.Name))
	}
	if t.Failure != nil {
		attrs = append(attrs, slog.String("error_kind", t.Failure.Kind.String()), slog.Int("http_status", t.Failure.HTTPStatus))
	}
	logAttrs(ctx, o.log, level, "transition", attrs...)
}

// Finish ends the completion span with the result, and records the
// completion's metrics: attempts by their final outcome, tokens, duration.
func (o *Trail) Finish(r *recovery.Result) {
	o.ensure()
	ctx := context.Background()
	if o.trail != nil {
		ctx = o.trail.ctx
	}
	// The RPC that ran the completion reports it on its own line; a
	// completion no RPC reports writes its line here, first, so that it
	// carries the ids of the span still recording.
	if sum := summarize(o.info.ID, r, o.info.Chain); !o.handOver(ctx, sum) && o.log.Enabled(ctx, slog.LevelInfo) {
		o.logFinish(ctx, sum)
	}
	if o.m.on {
		o.countFinish(ctx, r)
	}
	if tr := o.trail; tr != nil {
		o.closePending()
		if tr.span.IsRecording() {
			o.endSpan(r)
		}
		tr.span.End()
	}
}

// summarize is what the log says of a completion that ended with r, its
// cost at the prices of chain's routes included.
func summarize(id string, r *recovery.Result, chain []*config.Route) completionSummary {
	sum := completionSummary{id: id, reason: r.Reason, stopReason: r.StopReason, truncated: r.Truncated,
		route: r.Route.Name, attempts: len(r.Attempts), input: int64(r.Usage.InputTokens), output: int64(r.Usage.OutputTokens)}
	sum.cost, sum.costKnown = config.TotalCost(chain, r.Attempts)
	return sum
}

// handOver gives sum to the log line of the RPC that runs the completion
// (rpcScope), and reports whether that line will carry it.
func (o *Observer) handOver(ctx context.Context, sum completionSummary) bool {
	s := scopeFrom(ctx)
	return s != nil && s.offer(sum)
}

// logFinish writes the line of a completion that no RPC's line reports,
// "completion finished": its summary and the caller's key (auth_key).
func (o *Trail) logFinish(ctx context.Context, sum completionSummary) {
	var attrs [completionSummaryFields + 1]slog.Attr
	n := sum.attrs(attrs[:])
	if o.trail != nil && o.trail.key != "" {
		attrs[n] = slog.String("auth_key", o.trail.key)
		n++
	}
	logAttrs(ctx, o.log, slog.LevelInfo, "completion finished", attrs[:n]...)
}

// endSpan sets the response attributes of the completion span: the model
// and response id of the attempt that answered, as its upstream named them,
// the upstream it called, and the usage of all attempts, counted here once.
func (o *Trail) endSpan(r *recovery.Result) {
	tr := o.trail
	span := tr.span
	model := r.Route.Model
	if n, ok := answered(r); ok {
		info, _ := tr.ended.get(n)
		model = orDefault(info.model, model)
		if info.id != "" {
			span.SetAttributes(keyResponseID.String(info.id))
		}
		if !info.firstChunk.IsZero() {
			span.SetAttributes(keyFirstChunk.Float64(info.firstChunk.Sub(tr.begun).Seconds()))
		}
	}
	span.SetAttributes(serverAttrs(o.info.route(r.Route.Name))...)
	span.SetAttributes(keyResponseModel.String(model), keyInputTokens.Int64(inputTokens(r.Usage)),
		keyOutputTokens.Int64(r.Usage.OutputTokens), keyReason.String(r.Reason.String()),
		keyTruncated.Bool(r.Truncated), keyAttempts.Int(len(r.Attempts)))
	if r.Usage.CacheReadInputTokens > 0 {
		span.SetAttributes(keyCacheRead.Int64(r.Usage.CacheReadInputTokens))
	}
	if r.Usage.CacheCreationInputTokens > 0 {
		span.SetAttributes(keyCacheCreation.Int64(r.Usage.CacheCreationInputTokens))
	}
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

// answered is the number of the last attempt whose output is in the
// answer.
func answered(r *recovery.Result) (int, bool) {
	for _, a := range slices.Backward(r.Attempts) {
		if a.Outcome == recovery.OutcomeAnswered {
			return a.Attempt, true
		}
	}
	return 0, false
}

// inputTokens are all the input tokens of u, cached or not: the GenAI
// conventions count cache reads and writes in gen_ai.usage.input_tokens,
// and give them again on their own.
func inputTokens(u recovery.Usage) int64 {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// countFinish records the metrics known only at the end: the machine's own
// verdict on every attempt (a failure with its kind and HTTP status), the
// tokens by the model that answered each attempt, and the completion's
// duration.
func (o *Trail) countFinish(ctx context.Context, r *recovery.Result) {
	o.m.inFlight.Add(ctx, -1)
	var ended endedAttempts
	if o.trail != nil {
		ended = o.trail.ended
	}
	for _, a := range r.Attempts {
		attrs := []attribute.KeyValue{keyOutcome.String(outcomeName(a.Outcome)), keyRoute.String(a.Route.Name),
			keyProvider.String(a.Route.Provider)}
		if info, _ := ended.get(a.Attempt); a.Outcome == recovery.OutcomeFailed && info.errorKind != "" {
			attrs = append(attrs, keyErrorKind.String(info.errorKind))
			if info.httpStatus != 0 {
				attrs = append(attrs, keyHTTPStatus.Int(info.httpStatus))
			}
		}
		o.m.attempts.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
	o.countTokens(ctx, r, ended)
	o.countCost(ctx, r)
	first := o.info.First
	common := []attribute.KeyValue{keyOperation.String("chat"), keyProvider.String(first.Provider), keyRequestModel.String(first.Model)}
	if o.trail != nil && o.trail.key != "" {
		common = append(common, keyAuthKey.String(o.trail.key))
	}
	if r.Reason != recovery.Completed {
		common = append(common, keyErrorType.String(r.Reason.String()))
	}
	if o.trail != nil {
		o.m.duration.Record(ctx, time.Since(o.trail.begun).Seconds(), metric.WithAttributes(common...))
	}
}

// tokenKey groups a completion's attempts for gen_ai.client.token.usage.
type tokenKey struct{ provider, request, response string }

// countTokens records the completion's tokens once per token type and
// model: the attempts' usage summed by the route's provider and model and
// the model the upstream said answered (bounded: see labelSet); attempts
// that used no tokens are left out. A completion answered by one model is
// one record of each type.
func (o *Trail) countTokens(ctx context.Context, r *recovery.Result, ended endedAttempts) {
	var order []tokenKey
	sums := map[tokenKey]recovery.Usage{}
	for _, a := range r.Attempts {
		info, _ := ended.get(a.Attempt)
		k := tokenKey{a.Route.Provider, a.Route.Model, o.m.models.bound(orDefault(info.model, a.Route.Model))}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] = sums[k].Add(a.Usage)
	}
	for _, k := range order {
		u := sums[k]
		if u == (recovery.Usage{}) {
			continue // an attempt refused before it read anything, e.g. a 429
		}
		attrs := []attribute.KeyValue{keyOperation.String("chat"), keyProvider.String(k.provider),
			keyRequestModel.String(k.request), keyResponseModel.String(k.response)}
		if o.trail != nil && o.trail.key != "" {
			attrs = append(attrs, keyAuthKey.String(o.trail.key))
		}
		o.m.tokens.Record(ctx, inputTokens(u), metric.WithAttributes(append(attrs, keyTokenType.String("input"))...))
		o.m.tokens.Record(ctx, u.OutputTokens, metric.WithAttributes(append(attrs, keyTokenType.String("output"))...))
	}
}

// countCost adds what each attempt cost to completiond.cost.usd, by the
// caller's key (bounded: see instruments.keys), the attempt's route and
// the route's model — the model as configured, which the prices are for,
// not the one the upstream named. An attempt whose route has no prices,
// or that cost nothing, adds nothing: a series of zeros says nothing.
func (o *Trail) countCost(ctx context.Context, r *recovery.Result) {
	key := ""
	if o.trail != nil {
		key = o.trail.key
	}
	for _, a := range r.Attempts {
		usd, known := config.AttemptCost(o.info.Chain, a)
		if !known || usd <= 0 {
			continue
		}
		o.m.cost.Add(ctx, usd, metric.WithAttributes(keyAuthKey.String(o.m.keys.bound(key)),
			keyRoute.String(a.Route.Name), keyRequestModel.String(a.Route.Model)))
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
