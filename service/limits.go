package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// shedRetryDelay is the RetryInfo of a completion refused because too many
// run: the server's or the key's concurrency cap.
const shedRetryDelay = time.Second

// completionPrefix is the method prefix of the Completion service, the only
// one the in-flight and per-key limits count.
var completionPrefix = "/" + completionv1.Completion_ServiceDesc.ServiceName + "/"

// limiter enforces the in-flight cap of the server and the concurrency and
// rate limits of each authenticated key on the Completion service's calls.
type limiter struct {
	l        config.Limits
	now      func() time.Time
	inFlight atomic.Int64

	mu   sync.Mutex
	keys map[string]*keyLimit // by caller name; as many as there are keys

	// shared, with Config.Redis, are the per-key limits of the fleet; the
	// local ones answer whenever Redis cannot.
	shared *sharedLimits
}

// keyLimit is the state of one key.
type keyLimit struct {
	running int
	rate    *rate.Limiter
}

func newLimiter(l config.Limits, now func() time.Time) *limiter {
	return &limiter{l: l, now: now, keys: map[string]*keyLimit{}}
}

// acquire admits a call of method or refuses it: UNAVAILABLE when the server
// runs MaxInFlight completions, RESOURCE_EXHAUSTED when the caller's key
// runs KeyMaxConcurrent or started more than its rate allows; each with a
// RetryInfo. An admitted call calls release when it ends. With Config.Redis
// the key's limits hold across the fleet (limits_shared.go), and fall back to
// this replica's own counts while Redis cannot answer.
func (l *limiter) acquire(ctx context.Context, method string) (release func(), err error) {
	if !strings.HasPrefix(method, completionPrefix) {
		return func() {}, nil
	}
	if n := l.inFlight.Add(1); l.l.MaxInFlight > 0 && n > int64(l.l.MaxInFlight) {
		l.inFlight.Add(-1)
		return nil, limitStatus(codes.Unavailable, "OVERLOADED", shedRetryDelay,
			fmt.Sprintf("server overloaded: %d completions in flight, retry later", l.l.MaxInFlight), "")
	}
	c, ok := callerFrom(ctx)
	if !ok || (l.l.KeyMaxConcurrent <= 0 && l.l.KeyRate <= 0) {
		return func() { l.inFlight.Add(-1) }, nil
	}
	if l.shared != nil && l.shared.g.usable() {
		release, shared, err := l.shared.admit(c.Name, l.l)
		if shared {
			if err != nil {
				l.inFlight.Add(-1)
				return nil, err
			}
			return func() {
				release()
				l.inFlight.Add(-1)
			}, nil
		}
	}
	if err := l.admitKey(c.Name); err != nil {
		l.inFlight.Add(-1)
		return nil, err
	}
	return func() {
		l.mu.Lock()
		l.keys[c.Name].running--
		l.mu.Unlock()
		l.inFlight.Add(-1)
	}, nil
}

// admitKey counts one more completion of key, or refuses it.
func (l *limiter) admitKey(key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		k = &keyLimit{rate: rate.NewLimiter(rate.Inf, 0)}
		if l.l.KeyRate > 0 {
			k.rate = rate.NewLimiter(rate.Limit(l.l.KeyRate), max(l.l.KeyBurst, 1))
		}
		l.keys[key] = k
	}
	if l.l.KeyMaxConcurrent > 0 && k.running >= l.l.KeyMaxConcurrent {
		return limitStatus(codes.ResourceExhausted, "KEY_CONCURRENCY", shedRetryDelay,
			fmt.Sprintf("key %q runs %d completions, its limit", key, k.running), key)
	}
	now := l.now()
	r := k.rate.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return limitStatus(codes.ResourceExhausted, "KEY_RATE", d,
			fmt.Sprintf("key %q exceeds its rate of %g completions per second", key, l.l.KeyRate), key)
	}
	k.running++
	return nil
}

// limitStatus is the status of a refused call, with ErrorInfo{reason} and
// RetryInfo{delay}.
func limitStatus(code codes.Code, reason string, delay time.Duration, msg, key string) error {
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	if key != "" {
		info.Metadata = map[string]string{"key": key}
	}
	return withDetails(code, msg, info, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}).Err()
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
