package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// rawCodec sends the []byte it is given as the message, whatever it holds,
// and decodes replies as protobuf. Named "proto", it reaches the server's
// proto codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec sends []byte, not %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// badUTF8 is m encoded, with the placeholder "ZZ" of a string field
// replaced by two bytes that are not UTF-8: the encoding is otherwise valid.
func badUTF8(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b, []byte("ZZ")) != 1 {
		t.Fatalf("placeholder not found once in %x", b)
	}
	return bytes.Replace(b, []byte("ZZ"), []byte{0xff, 0xfe}, 1)
}

// malformedWire are bytes that are no protobuf message: a truncated varint,
// a length past the end, a group end without a start, a field number 0.
var malformedWire = map[string][]byte{
	"truncated varint":  {0x08, 0xff},
	"length past end":   {0x0a, 0x7f, 'a'},
	"stray group end":   {0x0c},
	"field number zero": {0x00, 0x01},
}

// TestUndecodableRequestsAreInvalidArgument sends bytes that do not decode —
// malformed protobuf, a string field that is not UTF-8 — as the request of
// each RPC, and as a Session's first and later messages: each is refused
// with INVALID_ARGUMENT, not INTERNAL, and nothing reaches the upstream.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	cfg := newTestEnv(t).grpc.Completion.cfg // the test env's configuration, on a connection of our own
	up := &countingProvider{Provider: sim.New(sim.Config{})}
	for _, r := range cfg.Routes {
		r.Upstream = up
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPC(srv)
	conn := serveBufconn(t, g)
	t.Cleanup(func() {
		conn.Close()
		g.Server.Stop()
	})

	requests := map[string][]byte{"route not UTF-8": badUTF8(t, &completionv1.CompleteRequest{Route: "ZZ"})}
	for name, b := range malformedWire {
		requests[name] = b
	}
	start := func(route string) *completionv1.SessionRequest {
		req := prompt("hello", map[string]string{sim.MetaPace: "20ms", sim.MetaWords: "50"})
		req.Route = route
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: &completionv1.SessionStart{Request: req}}}
	}
	firsts := map[string][]byte{"route not UTF-8": badUTF8(t, start("ZZ"))}
	laters := map[string][]byte{"tool_use_id not UTF-8": badUTF8(t, &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{
		ToolResults: &completionv1.ToolResults{Results: []*completionv1.ToolResultBlock{{ToolUseId: "ZZ"}}}}})}
	for name, b := range malformedWire {
		firsts[name], laters[name] = b, b
	}
	good, err := proto.Marshal(start("sim"))
	if err != nil {
		t.Fatal(err)
	}

	for name, b := range requests {
		t.Run("Complete/"+name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			err := conn.Invoke(ctx, "/completion.v1.Completion/Complete", b, new(completionv1.CompleteResponse), grpc.ForceCodecV2(rawCodec{}))
			checkInvalid(t, err, "request")
		})
		t.Run("Stream/"+name, func(t *testing.T) {
			checkInvalid(t, rawStream(t, conn, "Stream", b), "request")
		})
	}
	for name, b := range firsts {
		t.Run("Session first/"+name, func(t *testing.T) {
			checkInvalid(t, rawStream(t, conn, "Session", b), "start")
		})
	}
	for name, b := range laters {
		t.Run("Session later/"+name, func(t *testing.T) {
			checkInvalid(t, rawStream(t, conn, "Session", good, b), "request")
		})
	}
	if n := up.calls.Load(); n > int64(len(laters)) {
		t.Errorf("the upstream was called %d times, want at most %d (the Sessions' good starts)", n, len(laters))
	}
}

// rawStream opens a stream of rpc, sends msgs as they are, closes its side,
// and returns the status the stream ends with.
func rawStream(t *testing.T, conn *grpc.ClientConn, rpc string, msgs ...[]byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: rpc == "Session"}
	s, err := conn.NewStream(ctx, desc, "/completion.v1.Completion/"+rpc, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := s.SendMsg(m); err != nil {
			break // the server ended the stream: RecvMsg tells how
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		if err := s.RecvMsg(new(completionv1.CompletionEvent)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !hasViolation(st.Details(), field) {
		t.Errorf("status %v %q, want INVALID_ARGUMENT naming %s", st.Code(), st.Message(), field)
	}
}

// TestMalformedMarkIsFoundAmongUnknownFields checks the mark survives other
// unknown fields, and that an ordinary unknown field is no mark.
func TestMalformedMarkIsFoundAmongUnknownFields(t *testing.T) {
	var req completionv1.CompleteRequest
	markMalformed(&req, errors.New("bad bytes"))
	other := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7)
	req.ProtoReflect().SetUnknown(append(other, req.ProtoReflect().GetUnknown()...))
	if why, ok := malformed(&req); !ok || why != "bad bytes" {
		t.Errorf("malformed = %q, %v", why, ok)
	}
	var plain completionv1.CompleteRequest
	plain.ProtoReflect().SetUnknown(other)
	if _, ok := malformed(&plain); ok {
		t.Error("an unknown field was taken for the mark")
	}
}
