package client

import (
	"context"
	"io"
	"regexp"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// startsServer is a CompletionClient whose Streams end, in turn, with
// ends (nil: started then the result), recording each start's key.
type startsServer struct {
	completionv1.CompletionClient
	mu   sync.Mutex
	ends []error
	keys []string
}

func (f *startsServer) Stream(_ context.Context, req *completionv1.CompleteRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[completionv1.CompletionEvent], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, req.GetIdempotencyKey())
	end := f.ends[0]
	f.ends = f.ends[1:]
	if end != nil {
		return &eventsStream{end: end}, nil
	}
	return &eventsStream{evs: []*completionv1.CompletionEvent{
		{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: "cmpl_1"}}},
		{Seq: 2, Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{}}},
	}, end: io.EOF}, nil
}

func (f *startsServer) Complete(_ context.Context, req *completionv1.CompleteRequest, _ ...grpc.CallOption) (*completionv1.CompleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, req.GetIdempotencyKey())
	return &completionv1.CompleteResponse{CompletionId: "cmpl_1"}, nil
}

// eventsStream yields evs, then end.
type eventsStream struct {
	grpc.ClientStream
	evs []*completionv1.CompletionEvent
	end error
}

func (s *eventsStream) Recv() (*completionv1.CompletionEvent, error) {
	if len(s.evs) == 0 {
		return nil, s.end
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

var hexKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestStreamRestartsWithItsKey: a start that drops before started is sent
// again with the same idempotency key — random unless the caller set one,
// the caller's request untouched —; a refusal is not.
func TestStreamRestartsWithItsKey(t *testing.T) {
	refused, _ := status.New(codes.Unavailable, "overloaded").WithDetails(&errdetails.ErrorInfo{Reason: "OVERLOADED", Domain: Domain})
	for _, tc := range []struct {
		name     string
		key      string
		ends     []error
		restarts int
		ok       bool
	}{
		{"a transport drop", "", []error{status.Error(codes.Unavailable, "drop"), nil}, 1, true},
		{"a cut without a status", "", []error{io.EOF, io.EOF, nil}, 2, true},
		{"the caller's key", "mine", []error{status.Error(codes.Unavailable, "drop"), nil}, 1, true},
		{"a refusal", "", []error{refused.Err()}, 0, false},
		{"another code", "", []error{status.Error(codes.Internal, "bug")}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &startsServer{ends: tc.ends}
			c := &Client{rpc: f, reconnect: Reconnect{Backoff: 1, MaxBackoff: 1, Window: time.Minute, Rand: func() float64 { return 0 }}}
			req := Text("hi")
			req.IdempotencyKey = tc.key
			s, err := c.Stream(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Wait()
			if (err == nil) != tc.ok || s.Restarts() != tc.restarts || len(f.keys) != tc.restarts+1 {
				t.Fatalf("ended %v after %d restarts, %d starts; want ok %v, %d restarts", err, s.Restarts(), len(f.keys), tc.ok, tc.restarts)
			}
			for _, k := range f.keys {
				if k != f.keys[0] || (tc.key == "" && !hexKey.MatchString(k)) || (tc.key != "" && k != tc.key) {
					t.Errorf("keys sent %q", f.keys)
				}
			}
			if req.GetIdempotencyKey() != tc.key {
				t.Errorf("the caller's request was changed: key %q", req.GetIdempotencyKey())
			}
		})
	}
}

// TestCallsGetTheirOwnKeys: each call without a key gets a new one.
func TestCallsGetTheirOwnKeys(t *testing.T) {
	f := &startsServer{}
	c := &Client{rpc: f, reconnect: DefaultReconnect()}
	req := Text("hi")
	for range 2 {
		if _, err := c.Complete(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.keys) != 2 || f.keys[0] == f.keys[1] || !hexKey.MatchString(f.keys[0]) || req.GetIdempotencyKey() != "" {
		t.Errorf("keys %q, the caller's %q: want two random keys, the request untouched", f.keys, req.GetIdempotencyKey())
	}
}

// sessionsClient serves each Session call the next of streams.
type sessionsClient struct {
	completionv1.CompletionClient
	streams []*replayStream
	opened  int
}

func (c *sessionsClient) Session(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent], error) {
	s := c.streams[c.opened]
	c.opened++
	return s, nil
}

// TestRunSessionRestartsWithItsKey: a Session start that drops before
// started is sent again, the same start with the same key.
func TestRunSessionRestartsWithItsKey(t *testing.T) {
	done := &replayStream{status: status.New(codes.OK, ""), events: []*completionv1.CompletionEvent{
		{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: "cmpl_1"}}},
		{Seq: 2, Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{}}},
	}}
	cut := &replayStream{status: status.New(codes.Unavailable, "drop")}
	f := &sessionsClient{streams: []*replayStream{cut, done}}
	c := &Client{rpc: f, reconnect: Reconnect{Backoff: 1, MaxBackoff: 1, Window: time.Minute, Rand: func() float64 { return 0 }}}
	start := &completionv1.SessionStart{Request: Text("hi")}
	fold, err := c.RunSession(t.Context(), start, SessionHandler{})
	if err != nil || !fold.Done() || f.opened != 2 {
		t.Fatalf("RunSession: %v after %d calls", err, f.opened)
	}
	first, again := cut.sent[0].req.GetStart(), done.sent[0].req.GetStart()
	if first == nil || !proto.Equal(first, again) || !hexKey.MatchString(first.GetRequest().GetIdempotencyKey()) {
		t.Errorf("sent %v, then %v: want the same start, with a key", first, again)
	}
	if start.GetRequest().GetIdempotencyKey() != "" {
		t.Error("the caller's start was changed")
	}
}
