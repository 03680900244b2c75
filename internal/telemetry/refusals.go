package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"
)

// RefusalLogEvery is how often, at most, the log says that calls are being
// refused for one reason and key. Clients that obey RetryInfo still come
// back, and a refusal per call written as a line per call made the log the
// busiest part of a server at its rate limit.
const RefusalLogEvery = time.Second

// maxRefusalKeys bounds the key names the refusal metric and log keep
// apart: keys are configured, but a client certificate's name is the CA's
// to choose. Later names are counted under otherModel.
const maxRefusalKeys = 256

// Refusals counts and logs the calls the server refuses at its door and
// its limits: the counter completiond.refusals by reason and key, and a
// log line for each reason and key at most every RefusalLogEvery, which
// says how many refusals it stands for (suppressed). Its methods are safe
// for concurrent use; a nil *Refusals does nothing.
type Refusals struct {
	log     *slog.Logger
	now     func() time.Time
	counter metric.Int64Counter
	keys    *labelSet

	mu   sync.Mutex
	last map[refusalKey]*refusalLine
}

// refusalKey is what a refusal log line stands for.
type refusalKey struct{ reason, key string }

// refusalLine is when a reason and key were last logged, and how many of
// their refusals were not logged since.
type refusalLine struct {
	at         time.Time
	suppressed int64
}

// keyRefusalReason is the refusal's reason: an ErrorInfo reason, or the code's
// name for refusals without one (UNAUTHENTICATED).
var keyRefusalReason = attribute.Key("completiond.refusal.reason")

// NewRefusals returns the server's refusal counter and log: lines go to
// log (nil: none), the counter to mp (nil: none), now is the clock of the
// log's sampling (nil: time.Now).
func NewRefusals(log *slog.Logger, mp metric.MeterProvider, now func() time.Time) *Refusals {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	c, _ := mp.Meter(Instrumentation).Int64Counter("completiond.refusals", metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused before any completion ran (unauthenticated, over a limit), by reason and key."))
	return &Refusals{log: log, now: now, counter: c, keys: newLabelSet(maxRefusalKeys), last: map[refusalKey]*refusalLine{}}
}

// Refused records one refused call of fullMethod: reason (an ErrorInfo
// reason, or the code's name), the key's name ("" when the caller has
// none), the code it was refused with and the status's message. It marks
// the RPC's own log line as said (see MarkRefused) so that the call is
// not logged twice.
func (r *Refusals) Refused(ctx context.Context, fullMethod, reason, key string, code codes.Code, msg string) {
	if r == nil {
		return
	}
	key = r.keys.bound(key)
	r.counter.Add(ctx, 1, metric.WithAttributes(keyRefusalReason.String(reason), keyAuthKey.String(key)))
	MarkRefused(ctx)
	suppressed, ok := r.due(refusalKey{reason, key})
	if !ok {
		return
	}
	level := codeLevel(code)
	if !r.log.Enabled(ctx, level) {
		return
	}
	service, method := splitMethod(fullMethod)
	logAttrs(ctx, r.log, level, "refused call",
		slog.String("grpc.service", service), slog.String("grpc.method", method), slog.String("grpc.code", code.String()),
		slog.String("reason", reason), slog.String("auth.key", key), slog.String("grpc.error", msg),
		slog.Int64("suppressed", suppressed))
}

// due reports whether k's line is due, and how many refusals of k were
// not logged since its last line.
func (r *Refusals) due(k refusalKey) (suppressed int64, ok bool) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.last[k]
	if l == nil {
		r.last[k] = &refusalLine{at: now}
		return 0, true
	}
	if now.Sub(l.at) < RefusalLogEvery {
		l.suppressed++
		return 0, false
	}
	suppressed, l.at, l.suppressed = l.suppressed, now, 0
	return suppressed, true
}

// MarkRefused tells the log line of the RPC of ctx that its refusal was
// recorded already (by Refusals), so that the RPC writes no line of its
// own: a refusal is one sampled line, not one per call.
func MarkRefused(ctx context.Context) {
	if s := scopeFrom(ctx); s != nil {
		s.mu.Lock()
		s.refused = true
		s.mu.Unlock()
	}
}
