package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/internal/telemetry"
)

// completionPrefix is the method prefix of the Completion service, the only
// one the in-flight and per-key limits count.
var completionPrefix = "/" + completionv1.Completion_ServiceDesc.ServiceName + "/"

// uncounted are the Completion service's methods the limits do not count:
// they start no completion, and a key at its concurrency limit must still
// be able to cancel one of its completions (or list its routes).
var uncounted = map[string]bool{
	completionv1.Completion_Cancel_FullMethodName:     true,
	completionv1.Completion_ListRoutes_FullMethodName: true,
}

// limiter enforces the in-flight cap of the server and, through keys, the
// concurrency and rate limits of each authenticated key on the Completion
// service's calls, but for Cancel and ListRoutes (uncounted).
type limiter struct {
	l        config.Limits
	inFlight atomic.Int64
	keys     *guard.KeyLimits
	// waiting spreads the RetryInfo of the callers refused alike, so that
	// those who obey it do not all come back at once.
	waiting *guard.Waiting
	now     func() time.Time
	rand    func() float64
	// refusals counts each refusal and logs them, sampled.
	refusals *telemetry.Refusals
}

func newLimiter(cfg *Config, keys *guard.KeyLimits, refusals *telemetry.Refusals) *limiter {
	return &limiter{l: cfg.Limits, keys: keys, waiting: guard.NewWaiting(), now: cfg.Now, rand: cfg.Rand, refusals: refusals}
}

// acquire admits a call of method or refuses it: UNAVAILABLE when the server
// runs MaxInFlight completions, RESOURCE_EXHAUSTED when the caller's key
// runs KeyMaxConcurrent or started more than its rate allows; each with a
// RetryInfo. An admitted call calls release when it ends.
func (l *limiter) acquire(ctx context.Context, method string) (release func(), err error) {
	if !strings.HasPrefix(method, completionPrefix) || uncounted[method] {
		return func() {}, nil
	}
	if n := l.inFlight.Add(1); l.l.MaxInFlight > 0 && n > int64(l.l.MaxInFlight) {
		l.inFlight.Add(-1)
		return nil, l.refuse(ctx, method, &guard.Refusal{Reason: guard.ReasonOverloaded, RetryAfter: guard.ShedRetryDelay,
			Spacing: guard.ShedRetryDelay / time.Duration(l.l.MaxInFlight),
			Message: fmt.Sprintf("server overloaded: %d completions in flight, retry later", l.l.MaxInFlight)})
	}
	c, ok := callerFrom(ctx)
	if !ok || l.keys == nil || !l.keys.On() {
		return func() { l.inFlight.Add(-1) }, nil
	}
	releaseKey, err := l.keys.Admit(c.Name)
	if err != nil {
		l.inFlight.Add(-1)
		var r *guard.Refusal
		if !errors.As(err, &r) {
			return nil, refusalStatus(err)
		}
		return nil, l.refuse(ctx, method, r)
	}
	return func() {
		releaseKey()
		l.inFlight.Add(-1)
	}, nil
}

// refuse is the status of refusal r of a call of method: its RetryInfo
// spread over the callers refused alike, the refusal counted and logged
// (sampled).
func (l *limiter) refuse(ctx context.Context, method string, r *guard.Refusal) error {
	l.waiting.Spread(r, l.now(), l.rand())
	err := refusalStatus(r)
	l.refusals.Refused(ctx, method, r.Reason, r.Key, status.Code(err), r.Message)
	return err
}

// interceptors return the limiter as unary and stream interceptors.
func (l *limiter) interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		release, err := l.acquire(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer release()
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		release, err := l.acquire(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer release()
		return h(srv, ss)
	}
	return unary, stream
}

// transportOptions are the server options of l: streams per connection,
// keepalive enforcement and parameters, the receive size, the handshake's
// timeout.
func transportOptions(l config.Limits) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(2*l.MaxRequestBytes + 1<<20), // room to refuse oversized requests with field violations
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.MaxConnectionIdle, MaxConnectionAge: l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace, Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout,
		}),
	}
	if l.HandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(l.HandshakeTimeout))
	}
	if l.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(min(int64(l.MaxConcurrentStreams), math.MaxUint32))))
	}
	return opts
}
