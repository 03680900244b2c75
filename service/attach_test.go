package service

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/provider"
)

// gatedProvider lets the first after chunks of each call through, then
// holds the call until open is closed. A call whose context ends — held
// at the gate, or before it got there (the sim checks its context before
// each chunk, so a cancel that comes between two chunks ends the call
// without reaching the gate) — is recorded by closing cancelled.
type gatedProvider struct {
	provider.Provider
	after     int
	open      chan struct{}
	cancelled chan struct{}
	once      sync.Once
}

func (g *gatedProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	n := 0
	fin, err := g.Provider.Stream(ctx, req, func(ch provider.Chunk) error {
		if n++; n > g.after {
			select {
			case <-g.open:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return emit(ch)
	})
	if ctx.Err() != nil {
		g.once.Do(func() { close(g.cancelled) })
	}
	return fin, err
}

// gatedEnv is a test server whose upstream holds every call after its
// third chunk until the returned provider's open is closed.
func gatedEnv(t *testing.T, mutate ...func(*Config)) (*testEnv, *gatedProvider) {
	t.Helper()
	var g *gatedProvider
	e := newTestEnv(t, append([]func(*Config){func(c *Config) {
		for _, r := range c.Routes {
			if g == nil {
				g = &gatedProvider{Provider: r.Upstream, after: 3, open: make(chan struct{}), cancelled: make(chan struct{})}
			}
			r.Upstream = g
			r.Timeouts.Idle = time.Minute
		}
	}}, mutate...)...)
	return e, g
}

// recvUntilDelta receives from st until it has a text delta, and returns the events.
func recvUntilDelta(t *testing.T, st interface {
	Recv() (*completionv1.CompletionEvent, error)
}) []*completionv1.CompletionEvent {
	t.Helper()
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("recv before the first delta: %v", err)
		}
		evs = append(evs, ev)
		if ev.GetDelta() != nil {
			return evs
		}
	}
}

// attachAll runs Attach and returns its events and final status.
func attachAll(ctx context.Context, client completionv1.CompletionClient, id string, after uint64) ([]*completionv1.CompletionEvent, *status.Status) {
	st, err := client.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: after})
	if err != nil {
		return nil, status.Convert(err)
	}
	return recvAll(st.Recv)
}

func resumable(grace time.Duration) *completionv1.CompleteRequest {
	req := prompt("Tell me about recovery.", nil)
	req.ResumeGrace = durationpb.New(grace)
	return req
}

// waitEnded waits until the log of id has ended and returns its events.
func waitEnded(t *testing.T, l fleet.Log, id string) []*completionv1.CompletionEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var evs []*completionv1.CompletionEvent
	for {
		p, err := l.Read(id, uint64(len(evs)))
		if err != nil {
			t.Fatal(err)
		}
		if evs = append(evs, p.Events...); p.Done() {
			return evs
		}
		select {
		case <-p.More:
		case <-deadline:
			t.Fatalf("log of %s did not end", id)
		}
	}
}

// TestStreamCutThenAttach: a Stream with a resume grace is cut mid-way;
// an Attach after the last seq seen gets the rest, every seq exactly once,
// ending with the result, and the upstream saw one call.
func TestStreamCutThenAttach(t *testing.T) {
	e, g := gatedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cutThenAttach(ctx, t, e.client, e.client, g.open)
	if n := e.upstream.calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
}

// TestAttachSeveral: two attachers of a live completion both get all of it.
func TestAttachSeveral(t *testing.T) {
	e, g := gatedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := e.client.Stream(ctx, resumable(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	seen := recvUntilDelta(t, st)
	id := seen[0].GetStarted().GetCompletionId()
	var wg sync.WaitGroup
	got := make([][]*completionv1.CompletionEvent, 2)
	sts := make([]*status.Status, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], sts[i] = attachAll(ctx, e.client, id, 0)
		}()
	}
	close(g.open)
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	wg.Wait()
	for i := range got {
		checkContract(t, got[i], sts[i])
	}
}

// TestResumeGraceExpiry: nobody attaches within the grace, so the
// upstream call is cancelled and the log ends ABORTED_STREAMING.
func TestResumeGraceExpiry(t *testing.T) {
	e, g := gatedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, cut := context.WithCancel(ctx)
	st, err := e.client.Stream(sctx, resumable(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	seen := recvUntilDelta(t, st)
	cut()
	select {
	case <-g.cancelled:
	case <-ctx.Done():
		t.Fatal("the upstream call was not cancelled")
	}
	evs := waitEnded(t, e.grpc.Completion.log, seen[0].GetStarted().GetCompletionId())
	tr := transitions(evs)
	if len(tr) == 0 || tr[len(tr)-1] != "ABORTED_STREAMING" {
		t.Fatalf("transitions = %v, want ending ABORTED_STREAMING", tr)
	}
}

// TestAttachRefusals: the statuses of an attach that cannot be served.
func TestAttachRefusals(t *testing.T) {
	e, _ := authEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ops := bearer(ctx, "Bearer ops-secret-key")
	evs, st := func() ([]*completionv1.CompletionEvent, *status.Status) {
		s, err := e.client.Stream(ops, prompt("hello", nil))
		if err != nil {
			return nil, status.Convert(err)
		}
		var evs []*completionv1.CompletionEvent
		for {
			ev, err := s.Recv()
			if err != nil {
				return evs, status.Convert(err)
			}
			evs = append(evs, ev)
		}
	}()
	if len(evs) == 0 || evs[len(evs)-1].GetResult() == nil {
		t.Fatalf("stream: %d events, %v", len(evs), st)
	}
	id, last := evs[0].GetStarted().GetCompletionId(), evs[len(evs)-1].GetSeq()
	tests := []struct {
		name  string
		ctx   context.Context
		id    string
		after uint64
		want  codes.Code
		n     int
	}{
		{name: "owner replays all", ctx: ops, id: id, want: codes.OK, n: len(evs)},
		{name: "owner after the last", ctx: ops, id: id, after: last, want: codes.OK},
		{name: "beyond the last", ctx: ops, id: id, after: last + 1, want: codes.OutOfRange},
		{name: "unknown id", ctx: ops, id: "cmpl_nope", want: codes.NotFound},
		{name: "a huge unknown id is not echoed", ctx: ops, id: strings.Repeat("x", 1<<20), want: codes.NotFound},
		{name: "empty id", ctx: ops, want: codes.InvalidArgument},
		{name: "another key", ctx: bearer(ctx, "Bearer narrow-secret-key"), id: id, want: codes.PermissionDenied},
		{name: "no key", ctx: ctx, id: id, want: codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, st := attachAll(tt.ctx, e.client, tt.id, tt.after)
			if st.Code() != tt.want || len(got) != tt.n {
				t.Fatalf("got %d events, %v; want %d events, %v", len(got), st, tt.n, tt.want)
			}
			if n := len(st.Message()); n > 1024 {
				t.Errorf("a status message of %d bytes: a caller's value is echoed", n)
			}
		})
	}
}

// TestResumeGraceValidation: the grace is bounded, and only Stream resumes.
func TestResumeGraceValidation(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.MaxResumeGrace = time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tests := []struct {
		name  string
		grace *durationpb.Duration
	}{
		{"over the maximum", durationpb.New(2 * time.Minute)},
		{"negative", durationpb.New(-time.Second)},
		{"invalid", &durationpb.Duration{Seconds: 1, Nanos: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := prompt("hello", nil)
			req.ResumeGrace = tt.grace
			_, st := e.streamAll(t, req)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("status %v, want INVALID_ARGUMENT", st)
			}
		})
	}
	if _, err := e.client.Complete(ctx, resumable(time.Second)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Complete with a grace: %v, want INVALID_ARGUMENT", err)
	}
}

// cutThenAttach streams a resumable completion through from, cuts the
// stream after its first delta, attaches through to after the last seq
// seen, lets the upstream go on (open), and checks the contract of the
// whole: every seq once, to the result. It returns every event.
func cutThenAttach(ctx context.Context, t *testing.T, from, to completionv1.CompletionClient, open chan struct{}) []*completionv1.CompletionEvent {
	t.Helper()
	sctx, cut := context.WithCancel(ctx)
	st, err := from.Stream(sctx, resumable(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	seen := recvUntilDelta(t, st)
	cut()
	id := seen[0].GetStarted().GetCompletionId()
	last := seen[len(seen)-1].GetSeq()
	done := make(chan struct{})
	var rest []*completionv1.CompletionEvent
	var ast *status.Status
	go func() {
		defer close(done)
		rest, ast = attachAll(ctx, to, id, last)
	}()
	close(open)
	<-done
	if ast.Code() != codes.OK {
		t.Fatalf("attach: %v", ast)
	}
	all := append(seen, rest...)
	if r := checkContract(t, all, status.New(codes.OK, "")); r == nil {
		t.Fatal("no result")
	}
	return all
}

// TestAnotherKeyLearnsNothing: Attach and Session resume check the owner
// before the range, so that another key's refusal is the same whatever
// after_seq it asks for — at 2^40 it used to be OUT_OF_RANGE, which told
// how far the completion had got. The owner still gets OUT_OF_RANGE.
func TestAnotherKeyLearnsNothing(t *testing.T) {
	e, _ := authEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ops, narrow := bearer(ctx, "Bearer ops-secret-key"), bearer(ctx, "Bearer narrow-secret-key")
	streamed, _ := e.streamAllCtx(t, ops, prompt("hello", nil))
	session := openSession(t, ops, e.client, startMsg(resumableStart("", time.Minute)))
	if res, _ := finish(t, nil, session); res == nil || len(streamed) == 0 {
		t.Fatal("the completions did not end")
	}
	streamID, streamLast := last(streamed)
	sessionID, sessionLast := last(session.events)
	attach := func(ctx context.Context, id string, after uint64) *status.Status {
		_, st := attachAll(ctx, e.client, id, after)
		return st
	}
	resume := func(ctx context.Context, id string, after uint64) *status.Status {
		s := openSession(t, ctx, e.client, resumeMsg(id, after))
		s.until(func(*completionv1.CompletionEvent) bool { return false })
		return statusOf(s.status)
	}
	for _, c := range []struct {
		rpc  string
		call func(context.Context, string, uint64) *status.Status
		id   string
		last uint64
	}{{"Attach", attach, streamID, streamLast}, {"resume", resume, sessionID, sessionLast}} {
		var first *status.Status
		for _, after := range []uint64{0, 1, c.last, c.last + 1, 1 << 40} {
			st := c.call(narrow, c.id, after)
			if st.Code() != codes.PermissionDenied {
				t.Errorf("%s by another key after %d: %v, want PERMISSION_DENIED", c.rpc, after, st)
			}
			if first == nil {
				first = st
			} else if !proto.Equal(st.Proto(), first.Proto()) {
				t.Errorf("%s by another key after %d: %v, unlike after 0: %v", c.rpc, after, st, first)
			}
		}
		if st := c.call(ops, c.id, 1<<40); st.Code() != codes.OutOfRange {
			t.Errorf("%s by the owner after 2^40: %v, want OUT_OF_RANGE", c.rpc, st)
		}
	}
}

// TestAnotherKeyLearnsNothingOfADroppedHead: when the log no longer keeps
// a completion's first events, another key is PERMISSION_DENIED before and
// after them, as the owner is OUT_OF_RANGE before them.
func TestAnotherKeyLearnsNothingOfADroppedHead(t *testing.T) {
	e, _ := authEnv(t, func(c *Config) { c.EventLog.MaxEvents = 4 })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ops, narrow := bearer(ctx, "Bearer ops-secret-key"), bearer(ctx, "Bearer narrow-secret-key")
	streamed, _ := e.streamAllCtx(t, ops, prompt("hello", nil))
	id, end := last(streamed)
	if end <= 4 {
		t.Fatalf("%d events: too few to drop any", end)
	}
	if _, st := attachAll(ops, e.client, id, 0); st.Code() != codes.OutOfRange {
		t.Fatalf("the owner, from the dropped head: %v, want OUT_OF_RANGE", st)
	}
	for _, after := range []uint64{0, end - 2, end + 1} {
		if _, st := attachAll(narrow, e.client, id, after); st.Code() != codes.PermissionDenied {
			t.Errorf("another key after %d: %v, want PERMISSION_DENIED", after, st)
		}
	}
}
