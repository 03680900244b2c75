package service

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rpcLog writes the one log line of every RPC, "finished call", with the
// fields go-grpc-middleware's logging interceptor gave it that operators
// use — grpc.service, grpc.method, grpc.code, grpc.time_ms, auth.key (the
// caller's key, when authentication is on) and grpc.error (when the RPC
// failed) — and at the level that interceptor chose for the code. It is
// built with slog.LogAttrs: no field is boxed or formatted unless the line
// is written, and a line without an error carries at most five fields, which
// a slog.Record holds without allocating.
type rpcLog struct{ log *slog.Logger }

func (l rpcLog) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	l.line(ctx, info.FullMethod, start, err)
	return resp, err
}

func (l rpcLog) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	l.line(ss.Context(), info.FullMethod, start, err)
	return err
}

func (l rpcLog) line(ctx context.Context, fullMethod string, start time.Time, err error) {
	code := status.Code(err)
	level := codeLevel(code)
	if !l.log.Enabled(ctx, level) {
		return
	}
	service, method := splitMethod(fullMethod)
	attrs := [6]slog.Attr{
		slog.String("grpc.service", service),
		slog.String("grpc.method", method),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000),
	}
	n := 4
	if name := CallerName(ctx); name != "" {
		attrs[n] = slog.String("auth.key", name)
		n++
	}
	if err != nil {
		attrs[n] = slog.String("grpc.error", err.Error())
		n++
	}
	logAttrs(ctx, l.log, level, "finished call", attrs[:n]...)
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
