package service

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/testproxy"
	"github.com/completiond/completiond/provider/sim"
)

// The tests of this file put a real TCP connection between a gRPC client
// and the server, through a testproxy, and cut it: the caller reconnects
// (Attach, or a Session resume) with the last seq it received, and must end
// with exactly what an uninterrupted run gives, for no extra upstream call.

// cutEnv is a test server served on a loopback TCP port, a client that
// dials it directly, and one that goes through a proxy.
type cutEnv struct {
	*testEnv
	direct  completionv1.CompletionClient
	proxied completionv1.CompletionClient
	proxy   *testproxy.Proxy
}

func newCutEnv(t *testing.T) *cutEnv {
	t.Helper()
	e := newTestEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.grpc.Server.Serve(lis) }() // stopped with the server
	p := testproxy.New(t, lis.Addr().String())
	return &cutEnv{testEnv: e, direct: dialTCP(t, lis.Addr().String()), proxied: dialTCP(t, p.Addr()), proxy: p}
}

// dialTCP is a client of addr that reconnects at once after a cut.
func dialTCP(t *testing.T, addr string) completionv1.CompletionClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond,
			Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return completionv1.NewCompletionClient(conn)
}

// measured runs f and returns the upstream calls it made.
func (e *cutEnv) measured(f func()) int64 {
	before := e.upstream.calls.Load()
	f()
	return e.upstream.calls.Load() - before
}

// cutAndRecv cuts the proxy's connections and receives what recv still
// delivers (messages that arrived before the cut) until it fails.
func (e *cutEnv) cutAndRecv(t *testing.T, recv func() (*completionv1.CompletionEvent, error)) []*completionv1.CompletionEvent {
	t.Helper()
	if e.proxy.Cut() == 0 {
		t.Fatal("no connection to cut")
	}
	evs, st := recvAll(recv)
	if st.Err() == nil {
		t.Fatal("the stream ended OK across a cut")
	}
	return evs
}

// sameRun checks that got, a run across cuts, ended as want, an
// uninterrupted run of the same request: same transitions, same answer and
// status code, for the same number of upstream calls.
func sameRun(t *testing.T, got, want []*completionv1.CompletionEvent, gotSt, wantSt *status.Status, gotCalls, wantCalls int64) {
	t.Helper()
	res, wantRes := checkContract(t, got, gotSt), checkContract(t, want, wantSt)
	if g, w := transitions(got), transitions(want); !slices.Equal(g, w) {
		t.Errorf("transitions %v, uninterrupted %v", g, w)
	}
	if resultText(res) != resultText(wantRes) || gotSt.Code() != wantSt.Code() {
		t.Errorf("answer %q (%v), uninterrupted %q (%v)", resultText(res), gotSt.Code(), resultText(wantRes), wantSt.Code())
	}
	if gotCalls != wantCalls {
		t.Errorf("%d upstream calls, uninterrupted %d", gotCalls, wantCalls)
	}
}

// TestStreamResumesAcrossACutConnection: a Stream with a resume grace
// whose TCP connection is cut, mid-stream or during a backoff, is
// reattached with Attach after the last seq received.
func TestStreamResumesAcrossACutConnection(t *testing.T) {
	tests := []struct {
		name  string
		req   *completionv1.CompleteRequest
		cutAt func(*completionv1.CompletionEvent) bool
	}{
		{"mid-stream", prompt("Tell me about recovery.", map[string]string{sim.MetaWords: "40", sim.MetaPace: "5ms"}),
			func(ev *completionv1.CompletionEvent) bool { return ev.GetSeq() == 8 }},
		{"during a backoff", faults("rate_limit=300ms"), // the RETRY is sent before its wait
			func(ev *completionv1.CompletionEvent) bool {
				return ev.GetTransition().GetReason() == completionv1.TransitionReason_TRANSITION_REASON_RETRY
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCutEnv(t)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var want []*completionv1.CompletionEvent
			var wantSt *status.Status
			wantCalls := e.measured(func() { want, wantSt = streamVia(ctx, e.direct, tt.req) })

			var got []*completionv1.CompletionEvent
			var gotSt *status.Status
			gotCalls := e.measured(func() {
				req := proto.Clone(tt.req).(*completionv1.CompleteRequest)
				req.ResumeGrace = durationpb.New(time.Minute)
				st, err := e.proxied.Stream(ctx, req, grpc.WaitForReady(true))
				if err != nil {
					t.Fatal(err)
				}
				got = recvUntil(t, st.Recv, tt.cutAt)
				got = append(got, e.cutAndRecv(t, st.Recv)...)
				id, after := last(got)
				at, err := e.proxied.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: after}, grpc.WaitForReady(true))
				if err != nil {
					t.Fatal(err)
				}
				var rest []*completionv1.CompletionEvent
				rest, gotSt = recvAll(at.Recv)
				got = append(got, rest...)
			})
			sameRun(t, got, want, gotSt, wantSt, gotCalls, wantCalls)
		})
	}
}

// TestSessionResumesAcrossACutConnection: a Session with a resume grace
// whose TCP connection is cut — while it awaits a tool result, or while
// the next turn streams — is resumed on a new stream after the last seq
// received, which answers what is pending and the calls to come.
func TestSessionResumesAcrossACutConnection(t *testing.T) {
	tests := []struct {
		name  string
		cutAt func(*completionv1.CompletionEvent) bool
	}{
		{"awaiting a tool result", func(ev *completionv1.CompletionEvent) bool { return ev.GetToolCall() != nil }},
		{"streaming the next turn", func(ev *completionv1.CompletionEvent) bool { return ev.GetDelta() != nil && ev.GetTurn() == 2 }},
	}
	start := func() *completionv1.SessionStart {
		st := sessionStart("tool_use")
		st.Request.Metadata[sim.MetaWords], st.Request.Metadata[sim.MetaPace] = "40", "5ms"
		return st
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCutEnv(t)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var want []*completionv1.CompletionEvent
			var wantSt *status.Status
			wantCalls := e.measured(func() {
				s := openSession(t, ctx, e.direct, startMsg(start()))
				finish(t, nil, s)
				want, wantSt = s.events, sessionStatus(s)
			})

			var got []*completionv1.CompletionEvent
			var gotSt *status.Status
			gotCalls := e.measured(func() {
				graced := start()
				graced.Request.ResumeGrace = durationpb.New(time.Minute)
				a := openSession(t, ctx, e.proxied, startMsg(graced))
				answerUntil(a, tt.cutAt)
				got = append(a.events, e.cutAndRecv(t, a.stream.Recv)...)
				b := openSession(t, ctx, e.proxied, resumeMsg(last(got)))
				for _, id := range unanswered(got) {
					b.answer(id, "42", false)
				}
				_, gotSt = finish(t, got, b)
				got = append(got, b.events...)
			})
			sameRun(t, got, want, gotSt, wantSt, gotCalls, wantCalls)
		})
	}
}

// streamVia runs req as a Stream on client to its end.
func streamVia(ctx context.Context, client completionv1.CompletionClient, req *completionv1.CompleteRequest) ([]*completionv1.CompletionEvent, *status.Status) {
	st, err := client.Stream(ctx, req, grpc.WaitForReady(true))
	if err != nil {
		return nil, status.Convert(err)
	}
	return recvAll(st.Recv)
}

// recvUntil receives until an event matches at, which it includes.
func recvUntil(t *testing.T, recv func() (*completionv1.CompletionEvent, error), at func(*completionv1.CompletionEvent) bool) []*completionv1.CompletionEvent {
	t.Helper()
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := recv()
		if err != nil {
			t.Fatalf("the stream ended (%v) before the cut", err)
		}
		if evs = append(evs, ev); at(ev) {
			return evs
		}
	}
}

// answerUntil reads s, answering its tool calls, until an event matches
// at; a call that matches is left unanswered.
func answerUntil(s *sessionClient, at func(*completionv1.CompletionEvent) bool) {
	s.t.Helper()
	for {
		ev := s.until(func(ev *completionv1.CompletionEvent) bool { return at(ev) || ev.GetToolCall() != nil })
		if ev == nil {
			s.t.Fatalf("the Session ended (%v) before the cut", s.status)
		}
		if at(ev) {
			return
		}
		s.answer(ev.GetToolCall().GetId(), "42", false)
	}
}

// unanswered are the tool calls of evs after their last NEXT_TURN: those
// of the turn in progress, which the caller has not answered.
func unanswered(evs []*completionv1.CompletionEvent) []string {
	var ids []string
	for _, ev := range evs {
		if ev.GetTransition().GetReason() == completionv1.TransitionReason_TRANSITION_REASON_NEXT_TURN {
			ids = nil
		}
		if c := ev.GetToolCall(); c != nil {
			ids = append(ids, c.GetId())
		}
	}
	return ids
}

// sessionStatus is the status s ended with.
func sessionStatus(s *sessionClient) *status.Status {
	if isEOF(s.status) {
		return status.New(codes.OK, "")
	}
	return statusOf(s.status)
}
