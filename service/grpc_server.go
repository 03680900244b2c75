package service

import (
	"context"
	"net"
	"runtime"
	"time"

	grpcrecovery "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/internal/telemetry"
)

// ProcessHealthService is the grpc.health.v1 service name whose status
// follows the process alone: SERVING from NewGRPC on, NOT_SERVING once
// Drain begins, and never changed by Redis. It is what a liveness probe
// should ask: the overall status ("") and the Completion service's turn
// NOT_SERVING while Redis does not answer, when a replica still serves
// from its memory and restarting it would lose the completions it holds.
const ProcessHealthService = "completiond.process"

// GRPC is an assembled gRPC server: the Completion service, health,
// reflection, one log line per RPC and panic recovery.
type GRPC struct {
	// Server is the gRPC server.
	Server *grpc.Server
	// Health is the health service: the overall status ("") and the
	// Completion service's are NOT_SERVING while Redis does not answer,
	// ProcessHealthService's only once Drain begins; Drain marks every one
	// NOT_SERVING.
	Health *health.Server
	// Completion is the Completion service.
	Completion *Server
}

// NewGRPC assembles the gRPC server around s: its own codec, set for this
// server only (grpc_codec.go), authentication (s's
// Config.Auth), the transport limits and the in-flight and per-key limits
// (Config.Limits), health, and reflection unless Config.DisableReflection.
// Extra options (for example a stats handler, or TLS credentials from
// ServerTLS) are appended.
func NewGRPC(s *Server, opts ...grpc.ServerOption) *GRPC {
	log := s.cfg.Logger
	rpcLine := telemetry.NewRPCLog(log, CallerName)
	recOpts := []grpcrecovery.Option{grpcrecovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in handler", "panic", p)
		return internalStatus().Err()
	})}
	authn := &authenticator{auth: s.cfg.Auth}
	identify, identifyStream, enforce, enforceStream := authn.interceptors()
	refusals := telemetry.NewRefusals(log, s.cfg.Telemetry.MeterProvider, s.cfg.Now)
	s.refusals = refusals // a budget's refusal at a completion's start (budget.go)
	limiter := newLimiter(&s.cfg, guard.NewKeyLimits(s.cfg.Limits, s.cfg.Now, guard.NewSharedLimits(s.shared)), refusals)
	limit, limitStream := limiter.interceptors()
	entry := &door{authn: authn, limits: s.cfg.Limits, refusals: refusals}
	base := append(transportOptions(s.cfg.Limits),
		grpc.InTapHandle(entry.tap), // on the headers, before any body is read (door.go)
		codecOption(),               // this server's codec, not the process's (grpc_codec.go)
		// Handlers run on a few long-lived goroutines rather than one new
		// goroutine per RPC where they can: a worker keeps its grown stack.
		// When every worker is busy (streams are long: most of the time), an
		// RPC gets a goroutine of its own, whose stack presizeStack grows
		// once while it is shallow (grpc_presize.go); grpc-go replaces a
		// worker every 65 536 RPCs, so that its stack can shrink again.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.ChainUnaryInterceptor(
			presizeUnary, // first: the stack is grown while shallow (grpc_presize.go)
			identify,     // then: the log line names the key
			rpcLine.Unary,
			grpcrecovery.UnaryServerInterceptor(recOpts...),
			enforce,
			limit,
		),
		grpc.ChainStreamInterceptor(
			presizeStack,
			identifyStream,
			rpcLine.Stream,
			grpcrecovery.StreamServerInterceptor(recOpts...),
			enforceStream,
			limitStream,
		),
	)
	g := grpc.NewServer(append(base, opts...)...)
	s.Register(g)
	h := health.NewServer()
	healthpb.RegisterHealthServer(g, boundedHealth{h})
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(completionv1.Completion_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	// ProcessHealthService follows the process alone: only Drain's Shutdown
	// changes it. The other two are NOT_SERVING while Redis does not
	// answer; Shutdown wins over the watcher.
	h.SetServingStatus(ProcessHealthService, healthpb.HealthCheckResponse_SERVING)
	if s.redis != nil {
		s.redis.Watch(func(up bool) {
			st := healthpb.HealthCheckResponse_SERVING
			if !up {
				st = healthpb.HealthCheckResponse_NOT_SERVING
			}
			h.SetServingStatus("", st)
			h.SetServingStatus(completionv1.Completion_ServiceDesc.ServiceName, st)
		})
	}
	if !s.cfg.DisableReflection {
		registerReflection(g, log) // with the proto's comments
	}
	return &GRPC{Server: g, Health: h, Completion: s}
}

// Serve serves g on lis, within the connection limits of its Config
// (Listener): what cmd/completiond runs. Tests that need no such limits
// may serve g.Server directly.
func (g *GRPC) Serve(lis net.Listener) error {
	return g.Server.Serve(Listener(lis, g.Completion.cfg.Limits))
}

// Drain stops the server within a bound, whatever its handlers do: health
// turns NOT_SERVING (every service, ProcessHealthService too) and new completions are refused (UNAVAILABLE with
// RetryInfo, ErrorInfo DRAINING), while Attach and Session resume are still
// answered, so that a caller whose stream broke can reconnect and see its
// completion to the end. Once no completion runs, or when ctx is done, the
// server stops taking RPCs and lets the ones in flight finish. When ctx is
// done every completion is aborted, each ending typed (UNAVAILABLE with
// RetryInfo), and the handlers get Config.AbortGrace to return; whatever
// still runs after that is cut by a hard stop (grpc.Server.Stop closes
// every connection). Drain therefore returns at most AbortGrace after ctx
// is done. A handler that ignores cancellation (an upstream call stuck in a
// provider) is left behind, its caller disconnected; it ends when its call
// does, or with the process.
func (g *GRPC) Drain(ctx context.Context) {
	defer g.Completion.Close()
	g.Health.Shutdown()
	select {
	case <-g.Completion.running.drain():
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() {
		g.Server.GracefulStop() // returns once every handler has, even after Stop
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	g.Completion.Abort()
	grace := time.NewTimer(g.Completion.cfg.AbortGrace)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	g.Completion.cfg.Logger.Warn("handlers still running after the abort grace: stopping hard", "grace", g.Completion.cfg.AbortGrace)
	g.Server.Stop()
}
