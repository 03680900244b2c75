package service

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/guard"
)

// completionPrefix is the method prefix of the Completion service, the only
// one the in-flight and per-key limits count.
var completionPrefix = "/" + completionv1.Completion_ServiceDesc.ServiceName + "/"

// limiter enforces the in-flight cap of the server and, through keys, the
// concurrency and rate limits of each authenticated key on the Completion
// service's calls.
type limiter struct {
	l        config.Limits
	inFlight atomic.Int64
	keys     *guard.KeyLimits
}

func newLimiter(l config.Limits, keys *guard.KeyLimits) *limiter {
	return &limiter{l: l, keys: keys}
}

// acquire admits a call of method or refuses it: UNAVAILABLE when the server
// runs MaxInFlight completions, RESOURCE_EXHAUSTED when the caller's key
// runs KeyMaxConcurrent or started more than its rate allows; each with a
// RetryInfo. An admitted call calls release when it ends.
func (l *limiter) acquire(ctx context.Context, method string) (release func(), err error) {
	if !strings.HasPrefix(method, completionPrefix) {
		return func() {}, nil
	}
	if n := l.inFlight.Add(1); l.l.MaxInFlight > 0 && n > int64(l.l.MaxInFlight) {
		l.inFlight.Add(-1)
		return nil, refusalStatus(&guard.Refusal{Reason: guard.ReasonOverloaded, RetryAfter: guard.ShedRetryDelay,
			Message: fmt.Sprintf("server overloaded: %d completions in flight, retry later", l.l.MaxInFlight)})
	}
	c, ok := callerFrom(ctx)
	if !ok || l.keys == nil || !l.keys.On() {
		return func() { l.inFlight.Add(-1) }, nil
	}
	releaseKey, err := l.keys.Admit(c.Name)
	if err != nil {
		l.inFlight.Add(-1)
		return nil, refusalStatus(err)
	}
	return func() {
		releaseKey()
		l.inFlight.Add(-1)
	}, nil
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
// keepalive enforcement and parameters, the receive size.
func transportOptions(l config.Limits) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(2*l.MaxRequestBytes + 1<<20), // room to refuse oversized requests with field violations
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.MaxConnectionIdle, MaxConnectionAge: l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace, Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout,
		}),
	}
	if l.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.MaxConcurrentStreams))
	}
	return opts
}
