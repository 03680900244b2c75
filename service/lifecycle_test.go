package service

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
)

// stuckProvider is an upstream call that ignores cancellation: Stream
// blocks until release is closed, whatever its context says.
type stuckProvider struct {
	entered chan struct{} // closed when the first call is in Stream
	release chan struct{} // closed by the test to let the calls return
	once    sync.Once
}

func newStuckProvider(t *testing.T) *stuckProvider {
	p := &stuckProvider{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(p.free)
	return p
}

func (p *stuckProvider) free() {
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func (p *stuckProvider) Kind() string { return "stuck" }

func (p *stuckProvider) Stream(context.Context, *provider.Request, func(provider.Chunk) error) (provider.Finish, error) {
	p.once.Do(func() { close(p.entered) })
	<-p.release
	return provider.Finish{}, context.Canceled
}

// TestDrainIsBoundedWhenAHandlerIgnoresCancellation: a handler stuck in an
// upstream call that ignores its context used to keep Drain (and the
// process) waiting forever; Drain now returns within the drain timeout plus
// AbortGrace, and the stuck call's caller is disconnected.
func TestDrainIsBoundedWhenAHandlerIgnoresCancellation(t *testing.T) {
	stuck := newStuckProvider(t)
	const drain, grace = 100 * time.Millisecond, 100 * time.Millisecond
	env := newTestEnv(t, func(c *Config) {
		c.AbortGrace = grace
		for _, r := range c.Routes {
			r.Upstream = stuck
		}
	})
	st, err := env.client.Stream(t.Context(), prompt("hello", nil))
	if err != nil {
		t.Fatal(err)
	}
	<-stuck.entered
	ctx, cancel := context.WithTimeout(t.Context(), drain)
	defer cancel()
	began := time.Now()
	drained := make(chan struct{})
	go func() { env.grpc.Drain(ctx); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drain + grace + 5*time.Second):
		t.Fatal("Drain did not return: a handler that ignores cancellation holds the server")
	}
	if took := time.Since(began); took < drain+grace {
		t.Errorf("Drain returned after %v, before the drain timeout and the grace (%v)", took, drain+grace)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if c := statusOf(err).Code(); c != codes.Unavailable {
				t.Errorf("the stuck stream ended %v, want Unavailable (connection closed)", err)
			}
			break
		}
	}
	stuck.free() // goleak in TestMain: the handler and GracefulStop end once the call returns
}

// TestDrainEndsASessionWaitingForToolsUnavailable: a Session whose caller
// runs its tools when the drain times out ends ABORTED_TOOLS with
// UNAVAILABLE and RetryInfo, as for a stream: the caller may retry
// elsewhere. The same holds while a stop-hook verdict is awaited, and for
// a Session with a resume grace.
func TestDrainEndsASessionWaitingForToolsUnavailable(t *testing.T) {
	tests := []struct {
		name  string
		start *completionv1.SessionStart
		wait  func(*sessionClient)
	}{
		{"tool results", sessionStart("tool_use"), func(s *sessionClient) { s.toolCall() }},
		{"tool results, resumable", resumableStart("tool_use", time.Minute), func(s *sessionClient) { s.toolCall() }},
		{"stop-hook verdict", sessionStart("", func(st *completionv1.SessionStart) { st.StopHook = true }),
			func(s *sessionClient) { s.hookRequest() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 5 {
				env := newTestEnv(t)
				s := env.session(t, tt.start)
				tt.wait(s)
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
				drained := make(chan struct{})
				go func() { env.grpc.Drain(ctx); close(drained) }()
				res, code := s.end()
				st := statusOf(s.status)
				if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_TOOLS && res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_STREAMING ||
					code != codes.Unavailable || retryInfo(st) == nil {
					t.Errorf("ended %v / %v (RetryInfo %v), want ABORTED_* / Unavailable with RetryInfo", res.GetReason(), st, retryInfo(st))
				}
				<-drained
				cancel()
			}
		})
	}
}

// deadlineInterceptors give every RPC a server-side deadline d, well
// before the client's: the server sees the deadline pass first, as it does
// now and then when the client's own timer runs late, and the client
// reports the status the server chose.
func deadlineInterceptors(d time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, cancel := context.WithTimeout(ss.Context(), d)
			defer cancel()
			return h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
		}),
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// TestDeadlineMidStreamIsDeadlineExceeded: a completion cut by its RPC's
// deadline ends DEADLINE_EXCEEDED (ErrorInfo ABORTED_STREAMING or
// ABORTED_TOOLS), never CANCELLED, on all three RPCs. It used to end
// CANCELLED whenever the server noticed the deadline first: the abort was
// mapped as the caller's cancellation.
func TestDeadlineMidStreamIsDeadlineExceeded(t *testing.T) {
	cfg := DefaultConfig()
	client, _ := grpcClient(t, cfg, deadlineInterceptors(50*time.Millisecond)...)
	slow := func() *completionv1.CompleteRequest {
		return prompt("slow", map[string]string{sim.MetaPace: "5ms", sim.MetaWords: "1000"})
	}
	tests := []struct {
		name string
		call func(ctx context.Context) (*status.Status, []*completionv1.CompletionEvent)
	}{
		{"Stream", func(ctx context.Context) (*status.Status, []*completionv1.CompletionEvent) {
			st, err := client.Stream(ctx, slow())
			if err != nil {
				return statusOf(err), nil
			}
			return drainEvents(st.Recv)
		}},
		{"Complete", func(ctx context.Context) (*status.Status, []*completionv1.CompletionEvent) {
			_, err := client.Complete(ctx, slow())
			return statusOf(err), nil
		}},
		{"Session streaming", func(ctx context.Context) (*status.Status, []*completionv1.CompletionEvent) {
			return sessionUntilEnd(ctx, client, &completionv1.SessionStart{Request: slow()})
		}},
		{"Session awaiting tools", func(ctx context.Context) (*status.Status, []*completionv1.CompletionEvent) {
			return sessionUntilEnd(ctx, client, sessionStart("tool_use"))
		}},
		{"resumable Session awaiting tools", func(ctx context.Context) (*status.Status, []*completionv1.CompletionEvent) {
			return sessionUntilEnd(ctx, client, resumableStart("tool_use", time.Minute)) // the grace keeps no deadline off
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			st, evs := tt.call(ctx)
			if st.Code() != codes.DeadlineExceeded {
				t.Fatalf("status %v, want DeadlineExceeded", st)
			}
			if reason := errorInfo(st).GetReason(); reason != "ABORTED_STREAMING" && reason != "ABORTED_TOOLS" {
				t.Errorf("ErrorInfo reason %q, want ABORTED_*", reason)
			}
			if evs != nil {
				checkContract(t, evs, st)
			}
		})
	}
}

// TestClientDeadlineMidStreamIsDeadlineExceeded: 40 streams cut by the
// client's deadline all end DEADLINE_EXCEEDED, whichever side notices first.
func TestClientDeadlineMidStreamIsDeadlineExceeded(t *testing.T) {
	env := newTestEnv(t)
	for i := range 40 {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Millisecond)
		st, err := env.client.Stream(ctx, prompt("slow", map[string]string{sim.MetaPace: "5ms", sim.MetaWords: "1000"}))
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := drainEvents(st.Recv); s.Code() != codes.DeadlineExceeded {
			t.Errorf("run %d: status %v, want DeadlineExceeded", i, s)
		}
		cancel()
	}
}

// drainEvents receives until the stream ends.
func drainEvents(recv func() (*completionv1.CompletionEvent, error)) (*status.Status, []*completionv1.CompletionEvent) {
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := recv()
		if errors.Is(err, io.EOF) {
			return status.New(codes.OK, ""), evs
		}
		if err != nil {
			return statusOf(err), evs
		}
		evs = append(evs, ev)
	}
}

// sessionUntilEnd starts a Session and reads it to its end without ever
// answering.
func sessionUntilEnd(ctx context.Context, client completionv1.CompletionClient, start *completionv1.SessionStart) (*status.Status, []*completionv1.CompletionEvent) {
	s, err := client.Session(ctx)
	if err != nil {
		return statusOf(err), nil
	}
	if err := s.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}}); err != nil {
		return statusOf(err), nil
	}
	return drainEvents(s.Recv)
}

// TestSessionsThatNeverStartEnd: Sessions that never send start used to
// stay open for ever, a goroutine each; each now ends DEADLINE_EXCEEDED
// after SessionStartWait, and its goroutines are gone.
func TestSessionsThatNeverStartEnd(t *testing.T) {
	const wait, sessions = 100 * time.Millisecond, 300
	env := newTestEnv(t, func(c *Config) { c.SessionStartWait = wait })
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // far beyond wait: the server must end them
	defer cancel()
	began := time.Now()
	codesSeen := make(chan codes.Code, sessions)
	for range sessions {
		s, err := env.client.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := s.Recv()
			codesSeen <- statusOf(err).Code()
		}()
	}
	for range sessions {
		if c := <-codesSeen; c != codes.DeadlineExceeded {
			t.Fatalf("a Session without start ended %v, want DeadlineExceeded", c)
		}
	}
	if took := time.Since(began); took > wait+5*time.Second {
		t.Errorf("the Sessions ended after %v, want about %v", took, wait)
	}
	waitGoroutines(t, before+5)
}

// TestSessionStartWaitIsNotTheCallerWait: a Session that sends its start
// in time runs as usual, however long it then takes.
func TestSessionStartWaitIsNotTheCallerWait(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.SessionStartWait = 50 * time.Millisecond })
	start := sessionStart("")
	start.Request.Metadata = map[string]string{sim.MetaPace: "10ms", sim.MetaWords: "20"} // 200 ms, beyond the start wait
	s := env.session(t, start)
	if _, code := s.end(); code != codes.OK {
		t.Errorf("status %v, want OK", code)
	}
}

// waitGoroutines waits, boundedly, until at most n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still run, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDrainEndsASessionThatHasNotStarted: a Session still waiting for its
// start when the drain times out ends UNAVAILABLE with RetryInfo at once,
// not after SessionStartWait.
func TestDrainEndsASessionThatHasNotStarted(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.SessionStartWait = time.Minute })
	s, err := env.client.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	began := time.Now()
	drained := make(chan struct{})
	go func() { env.grpc.Drain(ctx); close(drained) }()
	_, err = s.Recv()
	if st := statusOf(err); st.Code() != codes.Unavailable || retryInfo(st) == nil {
		t.Errorf("status %v, want Unavailable with RetryInfo", st)
	}
	<-drained
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("drain took %v", took)
	}
}
