package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Telemetry is where the service sends its traces and metrics. The zero value
// turns both off, at no cost beyond a few nil checks per completion.
type Telemetry struct {
	// TracerProvider receives one span per completion (`chat {model}`), one
	// child span per upstream attempt and one per compaction call; nil turns
	// tracing off.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the completiond.* and gen_ai.* metrics; nil
	// turns metrics off.
	MeterProvider metric.MeterProvider
}

// Instrumentation is the scope name of the service's tracer and meter.
const Instrumentation = "github.com/completiond/completiond/service"

// Attribute keys. The gen_ai.*, http.*, server.* and error.* ones follow
// the OpenTelemetry semantic conventions; the completiond.* ones are this
// service's own.
const (
	keyOperation     = attribute.Key("gen_ai.operation.name")
	keyProvider      = attribute.Key("gen_ai.provider.name")
	keyRequestModel  = attribute.Key("gen_ai.request.model")
	keyMaxTokens     = attribute.Key("gen_ai.request.max_tokens")
	keyResponseModel = attribute.Key("gen_ai.response.model")
	keyResponseID    = attribute.Key("gen_ai.response.id")
	keyFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	keyFirstChunk    = attribute.Key("gen_ai.response.time_to_first_chunk")
	keyInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	keyOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	keyCacheRead     = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	keyCacheCreation = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	keyTokenType     = attribute.Key("gen_ai.token.type")
	keyErrorType     = attribute.Key("error.type")
	keyServerAddress = attribute.Key("server.address")
	keyServerPort    = attribute.Key("server.port")
	keyResendCount   = attribute.Key("http.request.resend_count")
	keyHTTPStatus    = attribute.Key("http.response.status_code")
	keyCompletionID  = attribute.Key("completiond.completion_id")
	keyAttempt       = attribute.Key("completiond.attempt")
	keyAttempts      = attribute.Key("completiond.attempts")
	keyRoute         = attribute.Key("completiond.route")
	keyOutcome       = attribute.Key("completiond.outcome")
	keyErrorKind     = attribute.Key("completiond.error.kind")
	keyRequestID     = attribute.Key("completiond.upstream.request_id")
	keyBackoff       = attribute.Key("completiond.backoff.seconds")
	keyNext          = attribute.Key("completiond.next")
	keyReason        = attribute.Key("completiond.reason")
	keyTruncated     = attribute.Key("completiond.truncated")
	keyChunks        = attribute.Key("completiond.chunks")
	keyPurpose       = attribute.Key("completiond.purpose")
	keyAuthKey       = attribute.Key("completiond.auth.key")
	keyCircuitState  = attribute.Key("completiond.circuit.state")
	// An attempt's own tokens: gen_ai.usage.* is on the chat span only, so
	// that a backend summing it counts each completion once.
	keyAttemptInput  = attribute.Key("completiond.usage.input_tokens")
	keyAttemptOutput = attribute.Key("completiond.usage.output_tokens")
	// The attributes of a transition event.
	keyTerminal      = attribute.Key("completiond.terminal")
	keyDiscardOutput = attribute.Key("completiond.discard_output")
	keyToRoute       = attribute.Key("completiond.to_route")
	keyToModel       = attribute.Key("completiond.to_model")
	keyNextMaxTokens = attribute.Key("completiond.max_tokens")
	keyMessage       = attribute.Key("completiond.message")
)

// Bucket boundaries recommended by the GenAI semantic conventions.
var (
	secondsBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// instruments are the service's metrics. When metrics are off, on is false
// and nothing is recorded (not even attribute sets are built).
type instruments struct {
	on          bool
	transitions metric.Int64Counter
	attempts    metric.Int64Counter
	backoff     metric.Float64Histogram
	tokens      metric.Int64Histogram
	duration    metric.Float64Histogram
	firstChunk  metric.Float64Histogram
	inFlight    metric.Int64UpDownCounter
	cost        metric.Float64Counter
	// keys bounds the completiond.auth.key values of the cost counter:
	// keys are configured, but a client certificate's name is the CA's to
	// choose (as for the refusals, maxRefusalKeys).
	keys *labelSet
	// models bounds the gen_ai.response.model values: the upstream names
	// them, and a metric label must not grow without end.
	models *labelSet
}

// newInstruments creates the instruments on mp. Instrument errors are not
// fatal: the API then hands back a working no-op instrument, and the SDK has
// already reported the error to otel's error handler.
func newInstruments(mp metric.MeterProvider, circuits func() map[string]int) *instruments {
	in := &instruments{on: mp != nil, models: newLabelSet(maxModelLabels), keys: newLabelSet(maxRefusalKeys)}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter(Instrumentation)
	in.transitions, _ = m.Int64Counter("completiond.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Transitions published, by reason."))
	in.attempts, _ = m.Int64Counter("completiond.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Upstream attempts, by outcome (answered, discarded, failed), route and provider; failures also by error kind and HTTP status."))
	in.backoff, _ = m.Float64Histogram("completiond.backoff", metric.WithUnit("s"),
		metric.WithDescription("Waits before a retry, by reason."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.tokens, _ = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per completion, by the model that answered each attempt."), metric.WithExplicitBucketBoundaries(tokenBuckets...))
	in.duration, _ = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a completion, retries included."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.firstChunk, _ = m.Float64Histogram("gen_ai.client.operation.time_to_first_chunk", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an upstream attempt to its first chunk."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.inFlight, _ = m.Int64UpDownCounter("completiond.streams_in_flight", metric.WithUnit("{completion}"),
		metric.WithDescription("Completions running now."))
	// The unit is an annotation, which the Prometheus exporter leaves out
	// of the name: "USD" would make it completiond_cost_usd_USD_total.
	in.cost, _ = m.Float64Counter("completiond.cost.usd", metric.WithUnit("{USD}"),
		metric.WithDescription("What upstream attempts cost at their routes' prices, in USD, by key, route and model; routes without prices add nothing."))
	if in.on && circuits != nil {
		observeCircuits(m, circuits)
	}
	return in
}

// circuitStates name the circuit states, indexed by gobreaker.State.
var circuitStates = [...]string{"closed", "half_open", "open"}

// observeCircuits registers the circuit-state gauge, read at each
// collection: one series per route and state, 1 for the state the circuit
// is in and 0 for the others, so that an alert is a plain comparison.
func observeCircuits(m metric.Meter, circuits func() map[string]int) {
	_, _ = m.Int64ObservableGauge("completiond.circuit.state", metric.WithUnit("{circuit}"),
		metric.WithDescription("Circuit breaker state by route: 1 for the state the circuit is in (closed, half_open, open), 0 for the others."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for route, state := range circuits() {
				for i, name := range circuitStates {
					v := int64(0)
					if i == state {
						v = 1
					}
					o.Observe(v, metric.WithAttributes(keyRoute.String(route), keyCircuitState.String(name)))
				}
			}
			return nil
		}))
}

// maxModelLabels is how many distinct gen_ai.response.model values the
// metrics keep; later ones are counted under otherModel.
const maxModelLabels = 64

// otherModel stands for the models past maxModelLabels.
const otherModel = "_other"

// labelSet admits the first max distinct values of a label and maps every
// later one to otherModel.
type labelSet struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func newLabelSet(max int) *labelSet { return &labelSet{max: max, seen: map[string]struct{}{}} }

// bound returns v if it is admitted, otherModel otherwise.
func (s *labelSet) bound(v string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[v]; ok {
		return v
	}
	if len(s.seen) >= s.max {
		return otherModel
	}
	s.seen[v] = struct{}{}
	return v
}

// tracerFrom returns the service's tracer, or a no-op one when tracing is off.
func tracerFrom(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return tp.Tracer(Instrumentation)
}

// TraceLogHandler wraps h so that every record logged with a context that
// carries a recording span gets trace_id and span_id attributes: the RPC log
// line and the transition lines can then be found from a trace in Jaeger,
// and the other way round. Without tracing it adds nothing.
func TraceLogHandler(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		sc := span.SpanContext()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// ObserveCertificateExpiry registers, on tel's meter provider, the gauge
// completiond.tls.certificate.expiry: when the server certificate
// notAfter returns expires, in seconds since the Unix epoch, read at each
// collection (after a reload, the new one's). An alert compares it with
// the time (deploy/prometheus/alerts.yaml). Without metrics it does
// nothing.
func ObserveCertificateExpiry(tel Telemetry, notAfter func() time.Time) {
	if tel.MeterProvider == nil {
		return
	}
	_, _ = tel.MeterProvider.Meter(Instrumentation).Int64ObservableGauge("completiond.tls.certificate.expiry", metric.WithUnit("s"),
		metric.WithDescription("When the server's TLS certificate expires, in seconds since the Unix epoch."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(notAfter().Unix())
			return nil
		}))
}
