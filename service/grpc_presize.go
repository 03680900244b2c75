package service

import (
	"context"
	"strings"

	"google.golang.org/grpc"
)

// A completion's handler needs a 32 KiB stack: its deepest calls (grpc-go
// writing the response headers under the first Send, the SDK's request
// path) sit under the interceptors, the driver and the provider. A
// goroutine starts with a few KiB, so the runtime grew each RPC's stack two
// or three times, and each growth copies the stack and walks every frame on
// it to adjust pointers — the deeper the stack, the dearer the copy
// (golang/go#18138), all of it before the first token. grpc-go's stream
// workers keep grown stacks only while there are more workers than
// concurrent RPCs, and streams are long.
//
// presizeStack, the first interceptor, takes a frame of presizeFrame bytes
// while the stack is still shallow, so that the runtime grows it once, to
// the size the handler reaches anyway, copying a few frames; an idle
// stream holds no more stack for it. make loadbench measures both (its
// short-answer profile and the stacks per idle stream).
const presizeFrame = 16 << 10

// presizeStack is the stream interceptor that runs first: see presizeFrame.
// Only the completion service's RPCs need the stack (not health checks nor
// reflection).
func presizeStack(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, completionPrefix) {
		presize()
	}
	return handler(srv, ss)
}

// presizeUnary is presizeStack for unary RPCs (Complete).
func presizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, completionPrefix) {
		presize()
	}
	return handler(ctx, req)
}

// presize takes a presizeFrame-byte frame and returns: the stack is grown
// on the way in, and stays so.
//
//go:noinline
func presize() {
	var frame [presizeFrame]byte
	touchFrame(&frame)
}

// touchFrame uses the frame, so that the compiler keeps it; the pointer does
// not escape, so the frame stays on the stack.
//
//go:noinline
func touchFrame(b *[presizeFrame]byte) { b[len(b)-1] = 1 }
