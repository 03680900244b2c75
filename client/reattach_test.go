package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/testproxy"
)

// slow is a request whose answer streams for about a second.
func slow(grace bool) *completionv1.CompleteRequest {
	req := paced(ask(""))
	req.Metadata["sim.words"] = "50"
	if grace {
		req.ResumeGrace = durationpb.New(60_000_000_000)
	}
	return req
}

// atSeq is a cut point: the event of seq n.
func atSeq(n uint64) func(*completionv1.CompletionEvent) bool {
	return func(ev *completionv1.CompletionEvent) bool { return ev.GetSeq() == n }
}

// atRetry is a cut point: the RETRY transition, as the backoff starts.
func atRetry(ev *completionv1.CompletionEvent) bool {
	return ev.GetTransition().GetReason() == completionv1.TransitionReason_TRANSITION_REASON_RETRY
}

// cutAfter reads s, cutting the proxy's connections once, on the first
// event cut matches, and returns the seqs the application saw.
func cutAfter(t *testing.T, s *Stream, p *testproxy.Proxy, cut func(*completionv1.CompletionEvent) bool) ([]uint64, error) {
	t.Helper()
	var seqs []uint64
	done := false
	for ev, err := range s.Events() {
		if err != nil {
			return seqs, err
		}
		seqs = append(seqs, ev.GetSeq())
		if !done && cut(ev) {
			done = true
			if p.Cut() == 0 {
				t.Fatal("the proxy carried no connection to cut")
			}
		}
	}
	return seqs, nil
}

// TestStreamReattachesAfterADrop: a real TCP proxy between the client and
// the server drops the connection mid-stream, or while the server waits
// out a backoff; the stream attaches again by itself and the application
// sees every seq once and the same answer as without the drop, from as
// many upstream attempts.
func TestStreamReattachesAfterADrop(t *testing.T) {
	backoff := func(grace bool) *completionv1.CompleteRequest {
		req := slow(grace)
		req.Metadata["sim.faults"] = "server_error=502,server_error=502"
		return req
	}
	tests := []struct {
		name string
		req  func(grace bool) *completionv1.CompleteRequest
		cut  func(*completionv1.CompletionEvent) bool
	}{
		{"mid-stream", slow, atSeq(6)},
		{"during a backoff", backoff, atRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { reattach(t, tt.req, tt.cut) })
	}
}

func reattach(t *testing.T, req func(grace bool) *completionv1.CompleteRequest, cut func(*completionv1.CompletionEvent) bool) {
	addr := serveAddr(t)
	p := testproxy.New(t, addr)
	c, err := Connect(p.Addr(), ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(ctxFor(t), req(true))
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := cutAfter(t, s, p, cut)
	if err != nil {
		t.Fatalf("after %v: %v", seqs, err)
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("seqs %v: not each once in order", seqs)
		}
	}
	if s.Attaches() < 1 {
		t.Errorf("no attach after the cut")
	}
	direct, err := New(serve(t)).Stream(ctxFor(t), req(false))
	if err != nil {
		t.Fatal(err)
	}
	want, err := direct.Wait()
	if err != nil {
		t.Fatal(err)
	}
	f := s.Fold()
	if got, n := len(f.Result().GetAttempts()), len(want.Result().GetAttempts()); got != n {
		t.Errorf("%d upstream attempts, %d without the drop", got, n)
	}
	if f.Text() != want.Text() || f.Text() == "" {
		t.Errorf("answer after the drop %q\nuninterrupted %q", f.Text(), want.Text())
	}
}

// TestStreamWithoutGraceEndsOnADrop: without resume_grace a drop is the
// end (the server cancels the completion), typed UNAVAILABLE, no attach.
func TestStreamWithoutGraceEndsOnADrop(t *testing.T) {
	p := testproxy.New(t, serveAddr(t))
	c, err := Connect(p.Addr(), ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(ctxFor(t), slow(false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cutAfter(t, s, p, atSeq(4))
	if e := AsError(err); e == nil || e.Code != codes.Unavailable || e.CompletionID == "" || s.Attaches() != 0 {
		t.Fatalf("got %v after %d attaches, want UNAVAILABLE and none", err, s.Attaches())
	}
}

// TestAttachFollowsAndReattaches: Client.Attach replays what a caller
// missed, and attaches again itself when its own connection drops.
func TestAttachFollowsAndReattaches(t *testing.T) {
	addr := serveAddr(t)
	first := New(dial(t, addr))
	ctx, cancel := context.WithCancel(ctxFor(t))
	s, err := first.Stream(ctx, slow(true))
	if err != nil {
		t.Fatal(err)
	}
	for s.Fold().LastSeq() < 3 {
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	cancel() // the first caller goes away; the completion keeps running
	p := testproxy.New(t, addr)
	c, err := Connect(p.Addr(), ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.Attach(ctxFor(t), s.Fold().CompletionID(), 3)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := cutAfter(t, a, p, atSeq(8))
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0] != 4 || a.Attaches() < 1 || !a.Fold().Done() {
		t.Errorf("seqs %v, attaches %d, done %v", seqs, a.Attaches(), a.Fold().Done())
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("seqs %v: a gap or a repeat", seqs)
		}
	}
}

// TestStreamGivesUpAfterTheWindow: when the server stays unreachable, the
// stream stops attaching once the reconnect window is over and ends typed
// UNAVAILABLE with what it had.
func TestStreamGivesUpAfterTheWindow(t *testing.T) {
	p := testproxy.New(t, serveAddr(t))
	c, err := Connect(p.Addr(), ConnectOptions{}, WithReconnect(Reconnect{Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Window: 300 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(ctxFor(t), slow(true))
	if err != nil {
		t.Fatal(err)
	}
	for s.Fold().LastSeq() < 4 {
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close() // the proxy no longer listens: every attach fails
	_, err = s.Wait()
	if e := AsError(err); e == nil || e.Code != codes.Unavailable || e.CompletionID == "" || s.Fold().LastSeq() < 4 {
		t.Fatalf("got %v, want UNAVAILABLE with the completion id", err)
	}
}

func TestReconnectDelay(t *testing.T) {
	r := Reconnect{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second}
	for try, want := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 100 * time.Millisecond, 5: 800 * time.Millisecond, 6: time.Second, 40: time.Second} {
		if got := r.delay(try); got != want {
			t.Errorf("delay(%d) = %v, want %v", try, got, want)
		}
	}
}

// TestRunSessionResumesAfterADrop: the connection drops while the server
// awaits a tool result (the result is lost with it) or while the next
// turn streams; RunSession resumes the Session, sends the lost answer
// again, and the handler sees every event once and each call once; the
// answer and the attempts are those of an uninterrupted run.
func TestRunSessionResumesAfterADrop(t *testing.T) {
	tests := []struct {
		name string
		cut  func(ev *completionv1.CompletionEvent, calls int) bool
	}{
		{"awaiting a tool result", func(ev *completionv1.CompletionEvent, calls int) bool { return ev.GetToolCall() != nil }},
		{"while turn 2 streams", func(ev *completionv1.CompletionEvent, calls int) bool {
			return ev.GetTurn() == 2 && ev.GetDelta() != nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serveAddr(t)
			p := testproxy.New(t, addr)
			c, err := Connect(p.Addr(), ConnectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := paced(tools(ask("tool_use=search")))
			req.ResumeGrace = durationpb.New(time.Minute)
			var seqs []uint64
			calls, cut := map[string]int{}, false
			h := SessionHandler{
				Event: func(ev *completionv1.CompletionEvent) error {
					seqs = append(seqs, ev.GetSeq())
					if !cut && tt.cut(ev, len(calls)) {
						cut = p.Cut() > 0
					}
					return nil
				},
				Tool: TextTool(func(_ context.Context, call *completionv1.ToolCall) (string, error) {
					calls[call.GetId()]++
					return "42", nil
				}),
			}
			fold, err := c.RunSession(ctxFor(t), start(req, 0, false), h)
			if err != nil || !cut {
				t.Fatalf("RunSession: %v (cut %v)", err, cut)
			}
			for i, seq := range seqs {
				if seq != uint64(i+1) {
					t.Fatalf("seqs %v: not each once in order", seqs)
				}
			}
			for id, n := range calls {
				if n != 1 {
					t.Errorf("call %s run %d times", id, n)
				}
			}
			plain := paced(tools(ask("tool_use=search")))
			want, err := New(dial(t, addr)).RunSession(ctxFor(t), start(plain, 0, false), SessionHandler{Tool: h.Tool})
			if err != nil {
				t.Fatal(err)
			}
			if fold.Text() != want.Text() || len(fold.Result().GetAttempts()) != len(want.Result().GetAttempts()) {
				t.Errorf("after the drop %q (%d attempts)\nuninterrupted %q (%d)", fold.Text(), len(fold.Result().GetAttempts()), want.Text(), len(want.Result().GetAttempts()))
			}
		})
	}
}

// TestConnectionsSpreadCalls: ConnectOptions.Connections opens that many
// connections, each call starting on the next one, and Close closes them
// all; the default is one connection for every call.
func TestConnectionsSpreadCalls(t *testing.T) {
	for _, tc := range []struct{ connections, want int }{{0, 1}, {1, 1}, {3, 3}} {
		t.Run(fmt.Sprint(tc.connections), func(t *testing.T) {
			p := testproxy.New(t, serveAddr(t))
			c, err := Connect(p.Addr(), ConnectOptions{Connections: tc.connections})
			if err != nil {
				t.Fatal(err)
			}
			for range 4 {
				if _, err := c.Complete(ctxFor(t), ask("")); err != nil {
					t.Fatal(err)
				}
			}
			if n := p.Cut(); n != tc.want {
				t.Errorf("%d connections carried the calls, want %d", n, tc.want)
			}
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}
