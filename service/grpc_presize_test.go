package service

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
)

// TestPresizeInterceptorsPassThrough: the interceptors that grow the stack
// hand every RPC, completion or not, to its handler unchanged and return
// what it returns.
func TestPresizeInterceptorsPassThrough(t *testing.T) {
	errHandler := errors.New("handler's error")
	for _, method := range []string{completionPrefix + "Stream", completionPrefix + "Complete", "/grpc.health.v1.Health/Check"} {
		t.Run(method, func(t *testing.T) {
			var ss grpc.ServerStream = fakeStream{}
			called := false
			err := presizeStack("srv", ss, &grpc.StreamServerInfo{FullMethod: method}, func(srv any, got grpc.ServerStream) error {
				called = srv == "srv" && got == ss
				return errHandler
			})
			if !called || err != errHandler {
				t.Fatalf("stream: handler called with the same arguments %v, error %v", called, err)
			}
			type key struct{}
			ctx := context.WithValue(context.Background(), key{}, "v")
			res, err := presizeUnary(ctx, "req", &grpc.UnaryServerInfo{FullMethod: method}, func(got context.Context, req any) (any, error) {
				if got.Value(key{}) != "v" || req != "req" {
					t.Fatal("unary: handler called with other arguments")
				}
				return "res", errHandler
			})
			if res != "res" || err != errHandler {
				t.Fatalf("unary: %v, %v", res, err)
			}
		})
	}
}

// fakeStream is a grpc.ServerStream that the interceptors only pass on.
type fakeStream struct{ grpc.ServerStream }
