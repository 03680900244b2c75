package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/recovery"
)

// rpcLog writes the one log line of every RPC, "finished call", with the
// fields go-grpc-middleware's logging interceptor gave it that operators
// use — grpc.service, grpc.method, grpc.code, grpc.time_ms, auth.key (the
// caller's key, when authentication is on) and grpc.error (when the RPC
// failed) — and at the level that interceptor chose for the code. When the
// RPC ran a completion that ended before the RPC did, the line also carries
// the completion's summary (see completionSummary): a completion has no
// line of its own then, so that a clean Stream or Complete costs one line.
//
// It is built with slog.LogAttrs: no field is boxed or formatted unless the
// line is written. A slog.Record holds five fields without allocating; the
// fields of a completion's summary spill over into one allocation of the
// record's, short-lived, rather than into the rpcScope, which lives as
// long as the RPC (an idle stream keeps it).
type rpcLog struct {
	log *slog.Logger
	// caller names the authenticated caller of an RPC's context; "" when
	// none or without auth.
	caller func(context.Context) string
}

func (l rpcLog) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if !l.log.Enabled(ctx, slog.LevelError) { // no line at any level: nothing to gather
		return h(ctx, req)
	}
	s := &rpcScope{parent: ctx}
	resp, err := h(s, req)
	l.line(ctx, s, info.FullMethod, start, err)
	return resp, err
}

func (l rpcLog) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	ctx := ss.Context()
	if !l.log.Enabled(ctx, slog.LevelError) {
		return h(srv, ss)
	}
	s := &rpcScope{parent: ctx, ServerStream: ss}
	err := h(srv, s)
	l.line(ctx, s, info.FullMethod, start, err)
	return err
}

func (l rpcLog) line(ctx context.Context, s *rpcScope, fullMethod string, start time.Time, err error) {
	sum, ok, refused := s.close()
	if refused {
		return
	}
	code := status.Code(err)
	level := codeLevel(code)
	if !l.log.Enabled(ctx, level) {
		return
	}
	service, method := splitMethod(fullMethod)
	attrs := [6 + completionSummaryFields]slog.Attr{
		slog.String("grpc.service", service),
		slog.String("grpc.method", method),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000),
	}
	n := 4
	if name := l.callerName(ctx); name != "" {
		attrs[n] = slog.String("auth.key", name)
		n++
	}
	if err != nil {
		attrs[n] = slog.String("grpc.error", err.Error())
		n++
	}
	if ok {
		n += sum.attrs(attrs[n:])
	}
	logAttrs(ctx, l.log, level, "finished call", attrs[:n]...)
}

// NewRPCLog returns the RPC log line's interceptors' owner: lines go to
// log, naming the caller that caller finds in an RPC's context.
func NewRPCLog(log *slog.Logger, caller func(context.Context) string) rpcLog {
	return rpcLog{log: log, caller: caller}
}

// callerName is the caller of ctx, by l.caller.
func (l rpcLog) callerName(ctx context.Context) string {
	if l.caller == nil {
		return ""
	}
	return l.caller(ctx)
}

// rpcScope is what the log line of one RPC gathers while the RPC runs: the
// summary of the completion it ran, which the observer hands over when the
// completion ends (observer.finish) instead of writing a line of its own.
// It is the RPC's context, and for a streaming RPC its stream too, so that
// the handler and the completion find it in their context at the cost of
// one small allocation per RPC.
//
// It is not pooled: a context may be kept after its RPC ends (a resumable
// Session's completion runs on a context detached from the RPC that started
// it, and may outlive it), and a reused scope would hand that completion
// another RPC's values. The lock orders a late completion against the line.
type rpcScope struct {
	parent            context.Context
	grpc.ServerStream // nil for a unary RPC

	mu      sync.Mutex
	closed  bool // the RPC's line is being written: a completion ending now writes its own
	has     bool // sum is set
	sum     completionSummary
	refused bool // Refusals logged the call's refusal, sampled: no line of its own
}

// rpcScopeKey is the context key of an RPC's rpcScope.
type rpcScopeKey struct{}

// Context implements grpc.ServerStream: the scope is the stream's context.
func (s *rpcScope) Context() context.Context { return s }

// Deadline implements context.Context.
func (s *rpcScope) Deadline() (time.Time, bool) { return s.parent.Deadline() }

// Done implements context.Context.
func (s *rpcScope) Done() <-chan struct{} { return s.parent.Done() }

// Err implements context.Context.
func (s *rpcScope) Err() error { return s.parent.Err() }

// Value implements context.Context: the scope under rpcScopeKey, the
// parent's values otherwise.
func (s *rpcScope) Value(key any) any {
	if key == (rpcScopeKey{}) {
		return s
	}
	return s.parent.Value(key)
}

// scopeFrom returns the rpcScope of the RPC that ctx belongs to, or nil.
func scopeFrom(ctx context.Context) *rpcScope {
	s, _ := ctx.Value(rpcScopeKey{}).(*rpcScope)
	return s
}

// offer hands the summary of a completion that ended to the RPC's line. It
// reports false when the line is written already, or carries another
// completion's summary: the completion then logs its own line.
func (s *rpcScope) offer(sum completionSummary) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.has {
		return false
	}
	s.sum, s.has = sum, true
	return true
}

// close ends what the scope gathers and returns the summary offered, if
// any, and whether the call's refusal was logged already (MarkRefused).
func (s *rpcScope) close() (completionSummary, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.sum, s.has, s.refused
}

// completionSummary is what an operator needs of a completion on the line
// that reports it: the RPC's, or a "completion finished" line of its own
// when no RPC reports it (a completion taken over from another replica, or
// a resumable Session's that outlived the RPC which started it).
type completionSummary struct {
	id         string
	reason     recovery.Reason
	stopReason recovery.StopReason
	truncated  bool
	route      string
	attempts   int
	input      int64
	output     int64
	cost       float64 // in USD, at the prices of the attempts' routes
	costKnown  bool    // every attempt's route has prices
}

// completionSummaryFields is the most fields summary.attrs writes.
const completionSummaryFields = 9

// attrs writes the summary's fields into a, which has room for
// completionSummaryFields, and returns how many it wrote: cost_usd only
// when the cost is known, since a line of a server without prices that
// said 0 would say the completion was free.
func (c *completionSummary) attrs(a []slog.Attr) int {
	_ = a[completionSummaryFields-1]
	a[0] = slog.String("completion_id", c.id)
	a[1] = slog.String("reason", c.reason.String())
	a[2] = slog.String("stop_reason", c.stopReason.String())
	a[3] = slog.Bool("truncated", c.truncated)
	a[4] = slog.String("route", c.route)
	a[5] = slog.Int("attempts", c.attempts)
	a[6] = slog.Int64("input_tokens", c.input)
	a[7] = slog.Int64("output_tokens", c.output)
	if !c.costKnown {
		return 8
	}
	a[8] = slog.Float64("cost_usd", c.cost)
	return 9
}

// splitMethod splits "/package.Service/Method".
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

// codeLevel is the level of an RPC's line by its code, as go-grpc-middleware's
// DefaultServerCodeToLevel has it: the caller's mistakes at INFO, refusals
// and limits at WARN, the server's failures at ERROR.
func codeLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.NotFound, codes.Canceled, codes.AlreadyExists, codes.InvalidArgument, codes.Unauthenticated:
		return slog.LevelInfo
	case codes.DeadlineExceeded, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// logAttrs is log.LogAttrs without the caller's program counter, which
// slog otherwise finds with runtime.Callers on every line — a third of a
// line's cost, for a source location the JSON handler does not print.
// The caller has checked that the level is enabled.
func logAttrs(ctx context.Context, log *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = log.Handler().Handle(ctx, r)
}
