package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

const (
	abortedStreaming = completionv1.TransitionReason_TRANSITION_REASON_ABORTED_STREAMING
	abortedTools     = completionv1.TransitionReason_TRANSITION_REASON_ABORTED_TOOLS
	completed        = completionv1.TransitionReason_TRANSITION_REASON_COMPLETED
)

// slowPrompt is a request whose sim answer streams for minutes: only a
// cancel ends it within a test.
func slowPrompt() *completionv1.CompleteRequest {
	return prompt("Tell me everything.", map[string]string{sim.MetaPace: "20ms", sim.MetaWords: "10000"})
}

// callCancel calls Cancel for id and returns its answer and status.
func callCancel(ctx context.Context, client completionv1.CompletionClient, id string) (*completionv1.CancelResponse, *status.Status) {
	resp, err := client.Cancel(ctx, &completionv1.CancelRequest{CompletionId: id})
	return resp, status.Convert(err)
}

// ownEnd is how a completion's own caller saw it end: its events and
// status, or none when the caller left (gone).
type ownEnd func() (evs []*completionv1.CompletionEvent, st *status.Status, gone bool)

// cancelCase starts a completion on client and returns its id once it is
// running (as the case needs it: streaming, or awaiting tools), and what
// its own caller sees of its end.
type cancelCase struct {
	name   string
	start  func(t *testing.T, ctx context.Context, client completionv1.CompletionClient) (string, ownEnd)
	reason completionv1.TransitionReason
}

// cancelCases are the completions a Cancel ends, locally or across a
// fleet: a Stream, a resumable Stream whose caller left, a Session that
// awaits its caller's tool results, and a resumable one whose caller left.
func cancelCases() []cancelCase {
	streaming := func(grace time.Duration, leave bool) func(*testing.T, context.Context, completionv1.CompletionClient) (string, ownEnd) {
		return func(t *testing.T, ctx context.Context, client completionv1.CompletionClient) (string, ownEnd) {
			sctx, leaveNow := context.WithCancel(ctx)
			req := slowPrompt()
			if grace > 0 {
				req.ResumeGrace = durationpb.New(grace)
			}
			st, err := client.Stream(sctx, req)
			if err != nil {
				t.Fatal(err)
			}
			seen := recvUntilDelta(t, st)
			if leave {
				leaveNow()
				return seen[0].GetStarted().GetCompletionId(), func() ([]*completionv1.CompletionEvent, *status.Status, bool) { return nil, nil, true }
			}
			t.Cleanup(leaveNow)
			return seen[0].GetStarted().GetCompletionId(), func() ([]*completionv1.CompletionEvent, *status.Status, bool) {
				rest, s := recvAll(st.Recv)
				return append(seen, rest...), s, false
			}
		}
	}
	awaitingTools := func(grace time.Duration, leave bool) func(*testing.T, context.Context, completionv1.CompletionClient) (string, ownEnd) {
		return func(t *testing.T, ctx context.Context, client completionv1.CompletionClient) (string, ownEnd) {
			sctx, leaveNow := context.WithCancel(ctx)
			t.Cleanup(leaveNow)
			start := sessionStart("tool_use")
			if grace > 0 {
				start.Request.ResumeGrace = durationpb.New(grace)
			}
			s := openSession(t, sctx, client, startMsg(start))
			if s.toolCall() == nil {
				t.Fatalf("no tool call: %v", s.status)
			}
			id := s.events[0].GetStarted().GetCompletionId()
			if leave {
				leaveNow()
				return id, func() ([]*completionv1.CompletionEvent, *status.Status, bool) { return nil, nil, true }
			}
			return id, func() ([]*completionv1.CompletionEvent, *status.Status, bool) {
				s.until(func(*completionv1.CompletionEvent) bool { return false })
				return s.events, statusOf(s.status), false
			}
		}
	}
	return []cancelCase{
		{"stream", streaming(0, false), abortedStreaming},
		{"resumable stream, its caller gone", streaming(time.Minute, true), abortedStreaming},
		{"session awaiting tools", awaitingTools(0, false), abortedTools},
		{"resumable session awaiting tools, its caller gone", awaitingTools(time.Minute, true), abortedTools},
	}
}

// checkCancelled checks what a Cancel of id answered and what everybody
// saw of the end: the Cancel's answer (not already ended, reason,
// CANCELLED, the result's seq); the own caller's stream (the contract,
// the terminal reason, its status agreeing); an attacher that followed
// the completion live; and, once the Cancel answered, the end in the log
// at once (an Attach after result_seq - 1 is the result alone).
func checkCancelled(t *testing.T, ctx context.Context, client completionv1.CompletionClient, id string, reason completionv1.TransitionReason,
	resp *completionv1.CancelResponse, st *status.Status, own ownEnd, attached func() ([]*completionv1.CompletionEvent, *status.Status)) {
	t.Helper()
	if st.Code() != codes.OK {
		t.Fatalf("Cancel: %v", st)
	}
	if resp.GetAlreadyEnded() || resp.GetReason() != reason || codes.Code(resp.GetCode()) != codes.Canceled || resp.GetResultSeq() == 0 {
		t.Fatalf("Cancel answered %v; want %v, CANCELLED, not already ended", resp, reason)
	}
	tail, ts := attachAll(ctx, client, id, resp.GetResultSeq()-1)
	if len(tail) != 1 || tail[0].GetResult().GetReason() != reason {
		t.Fatalf("after the Cancel answered, the log's end is %v (%v), want the result %v", tail, ts, reason)
	}
	checkStatusAgrees(t, reason, ts)
	ends := map[string]func() ([]*completionv1.CompletionEvent, *status.Status){"attacher": attached}
	if evs, s, gone := own(); !gone {
		ends["own caller"] = func() ([]*completionv1.CompletionEvent, *status.Status) { return evs, s }
	}
	for who, end := range ends {
		evs, s := end()
		res := checkContract(t, evs, s)
		if res.GetReason() != reason || s.Code() != codes.Canceled {
			t.Errorf("%s: ended %v, %v; want %v, CANCELLED", who, res.GetReason(), s, reason)
		}
		if tr := evs[len(evs)-2].GetTransition(); !strings.Contains(tr.GetMessage(), errCancelRequested.Error()) {
			t.Errorf("%s: the terminal transition says %q, not that a Cancel ended it", who, tr.GetMessage())
		}
	}
}

// attachFrom starts following id from its first event and returns what
// it received once it ends.
func attachFrom(ctx context.Context, client completionv1.CompletionClient, id string) func() ([]*completionv1.CompletionEvent, *status.Status) {
	type end struct {
		evs []*completionv1.CompletionEvent
		st  *status.Status
	}
	done := make(chan end, 1)
	go func() {
		evs, st := attachAll(ctx, client, id, 0)
		done <- end{evs, st}
	}()
	return func() ([]*completionv1.CompletionEvent, *status.Status) {
		e := <-done
		return e.evs, e.st
	}
}

// TestCancel: Cancel ends a running Stream or Session as its caller's
// cancel does, whether its caller is there or not: its caller and its
// attachers see the end and its status, and the Cancel answers once the
// end is in the log.
func TestCancel(t *testing.T) {
	for _, tc := range cancelCases() {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			id, own := tc.start(t, ctx, e.client)
			attached := attachFrom(ctx, e.client, id)
			resp, st := callCancel(ctx, e.client, id)
			checkCancelled(t, ctx, e.client, id, tc.reason, resp, st, own, attached)
		})
	}
}

// TestCancelEnded: cancelling a completion that has ended changes
// nothing: OK, already ended, how it ended — COMPLETED, or the end an
// earlier Cancel gave it — and its result's seq.
func TestCancelEnded(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	evs, st := e.streamAll(t, prompt("hello", nil))
	if st.Code() != codes.OK {
		t.Fatal(st)
	}
	done := evs[0].GetStarted().GetCompletionId()
	id, own := cancelCases()[0].start(t, ctx, e.client)
	if _, st := callCancel(ctx, e.client, id); st.Code() != codes.OK {
		t.Fatal(st)
	}
	cancelled, _, _ := own()
	for _, tc := range []struct {
		name   string
		id     string
		reason completionv1.TransitionReason
		code   codes.Code
		seq    uint64
	}{
		{"completed", done, completed, codes.OK, evs[len(evs)-1].GetSeq()},
		{"cancelled already", id, abortedStreaming, codes.Canceled, cancelled[len(cancelled)-1].GetSeq()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // and again: nothing changes
				resp, st := callCancel(ctx, e.client, tc.id)
				if st.Code() != codes.OK {
					t.Fatalf("Cancel: %v", st)
				}
				want := &completionv1.CancelResponse{AlreadyEnded: true, Reason: tc.reason, Code: int32(tc.code), ResultSeq: tc.seq}
				if !proto.Equal(resp, want) {
					t.Fatalf("Cancel answered %v, want %v", resp, want)
				}
			}
		})
	}
}

// TestCancelRefusals: a bad id is INVALID_ARGUMENT with a field
// violation, small, before anything is looked up; another key's
// completion is NOT_FOUND exactly as an unknown id — and is not
// cancelled —; without a key, UNAUTHENTICATED.
func TestCancelRefusals(t *testing.T) {
	e, _ := authEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ops, narrow := bearer(ctx, "Bearer ops-secret-key"), bearer(ctx, "Bearer narrow-secret-key")
	theirs, own := cancelCases()[0].start(t, ops, e.client)
	const unknown = "cmpl_000000000000000000000000"
	notFound := func(id string) *status.Status {
		_, st := callCancel(ops, e.client, id)
		return st
	}(unknown)
	if notFound.Code() != codes.NotFound || errorInfo(notFound).GetReason() != reasonCompletionNotFound {
		t.Fatalf("an unknown id: %v, want NOT_FOUND with ErrorInfo %s", notFound, reasonCompletionNotFound)
	}
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		id    string
		code  codes.Code
		field string
	}{
		{"empty id", ops, "", codes.InvalidArgument, "completion_id"},
		{"a 1 MB id", ops, "cmpl_" + strings.Repeat("a", 1<<20), codes.InvalidArgument, "completion_id"},
		{"over the bound", ops, "cmpl_" + strings.Repeat("0", 60), codes.InvalidArgument, "completion_id"},
		{"wrong shape", ops, "completion-1", codes.InvalidArgument, "completion_id"},
		{"upper-case hex", ops, "cmpl_" + strings.Repeat("A", 24), codes.InvalidArgument, "completion_id"},
		{"a byte short", ops, unknown[:len(unknown)-1], codes.InvalidArgument, "completion_id"},
		{"unknown id", ops, unknown, codes.NotFound, ""},
		{"another key's completion", narrow, theirs, codes.NotFound, ""},
		{"no key", ctx, theirs, codes.Unauthenticated, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, st := callCancel(tc.ctx, e.client, tc.id)
			if st.Code() != tc.code || resp != nil {
				t.Fatalf("Cancel: %v, %v; want %v", resp, st, tc.code)
			}
			if n := proto.Size(st.Proto()); n > 1024 {
				t.Errorf("a status of %d bytes: the id is echoed", n)
			}
			if tc.field != "" {
				if v := badRequest(st).GetFieldViolations(); len(v) != 1 || v[0].GetField() != tc.field {
					t.Errorf("field violations %v, want one of %s", v, tc.field)
				}
			}
			if tc.code == codes.NotFound {
				// The same bytes as an unknown id's, but for the id quoted.
				got := st.Proto() // a copy
				got.Message = strings.Replace(got.GetMessage(), tc.id, unknown, 1)
				if !proto.Equal(got, notFound.Proto()) {
					t.Errorf("status %v, want exactly an unknown id's: %v", st.Proto(), notFound.Proto())
				}
			}
		})
	}
	// The other key's Cancel did not reach the completion: it still runs,
	// and its owner cancels it.
	resp, st := callCancel(ops, e.client, theirs)
	if st.Code() != codes.OK || resp.GetAlreadyEnded() || resp.GetReason() != abortedStreaming {
		t.Fatalf("the owner's Cancel: %v, %v; want the completion still running, then ABORTED_STREAMING", resp, st)
	}
	own()
}

// TestCancelAcrossReplicas: in a fleet sharing a real redis-server, a
// Cancel through replica B ends the completion replica A runs (A hears it
// through Redis), with the same ends for everybody as on one replica. When
// A died before it could hear it, B's Cancel waits for A's lease to lapse,
// takes the completion over, and the mark makes it end at once: the
// takeover rules apply, the cancel still wins.
func TestCancelAcrossReplicas(t *testing.T) {
	const ttl = time.Second // long enough for a busy CI machine to renew in time
	leases, addr := testLeases(t, true, ttl)
	fleet := inProcessFleet(t, 2, leases, addr)
	a, b := fleet[0], fleet[1]
	for _, tc := range cancelCases() {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			id, own := tc.start(t, ctx, a.client)
			attached := attachFrom(ctx, b.client, id)
			resp, st := callCancel(ctx, b.client, id)
			checkCancelled(t, ctx, b.client, id, tc.reason, resp, st, own, attached)
		})
	}
	t.Run("its replica died", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		req := slowRequest("sim", 10000, 20*time.Millisecond)
		st, err := a.client.Stream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id := recvUntilDelta(t, st)[0].GetStarted().GetCompletionId()
		a.kill()
		resp, s := callCancel(ctx, b.client, id)
		gone := func() ([]*completionv1.CompletionEvent, *status.Status, bool) { return nil, nil, true }
		checkCancelled(t, ctx, b.client, id, abortedStreaming, resp, s, gone, func() ([]*completionv1.CompletionEvent, *status.Status) {
			return attachAll(ctx, b.client, id, 0)
		})
		evs, _ := attachAll(ctx, b.client, id, 0)
		if replicaLost(evs) == nil {
			t.Errorf("no REPLICA_LOST transition: B did not take the completion over, %v", transitions(evs))
		}
	})
}

// TestCancelPending: a completion whose end does not come within the
// Cancel's wait (its upstream call ignores the cancellation) is
// UNAVAILABLE CANCEL_PENDING with RetryInfo; the cancel stands: once the
// call returns, the completion ends ABORTED_STREAMING, which the next
// Cancel answers.
func TestCancelPending(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	client, stuck, st, id, s := cancelStuck(t, ctx)
	if s.Code() != codes.Unavailable || errorInfo(s).GetReason() != reasonCancelPending || retryInfo(s) == nil {
		t.Fatalf("Cancel of a completion that does not end: %v, want UNAVAILABLE %s with RetryInfo", s, reasonCancelPending)
	}
	stuck.free()
	if _, end := recvAll(st.Recv); end.Code() != codes.Canceled {
		t.Fatalf("the stream ended %v, want CANCELLED", end)
	}
	resp, s := callCancel(ctx, client, id)
	if s.Code() != codes.OK || !resp.GetAlreadyEnded() || resp.GetReason() != abortedStreaming {
		t.Fatalf("Cancel again: %v, %v; want already ended ABORTED_STREAMING", resp, s)
	}
}

// cancelStuck starts a Stream whose upstream call ignores cancellation,
// on a server whose Cancel waits 50 ms, and cancels it: the client, the
// upstream (free it to let the call return), the Stream, its id and the
// Cancel's status.
func cancelStuck(t *testing.T, ctx context.Context) (completionv1.CompletionClient, *stuckProvider,
	completionv1.Completion_StreamClient, string, *status.Status) {
	t.Helper()
	stuck := newStuckProvider(t)
	cfg := DefaultConfig()
	for _, r := range cfg.Routes {
		r.Upstream = stuck
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.cancelWait = 50 * time.Millisecond
	g := NewGRPC(srv)
	conn := serveBufconn(t, g)
	t.Cleanup(func() {
		stuck.free() // before the stop, which waits for the handler
		conn.Close()
		g.Server.Stop()
		srv.Close()
	})
	client := completionv1.NewCompletionClient(conn)
	st, err := client.Stream(ctx, prompt("hello", nil))
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	id := first.GetStarted().GetCompletionId()
	<-stuck.entered
	_, s := callCancel(ctx, client, id)
	return client, stuck, st, id, s
}

// TestCancelIsNotLimited: a server at its in-flight cap, and a key at its
// concurrency limit, refuse a new completion but still answer Cancel
// (and ListRoutes), which start none: the caller can make room.
func TestCancelIsNotLimited(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits func(*Config)
		reason string
	}{
		{"in-flight cap", func(c *Config) { c.Limits.MaxInFlight, c.Limits.KeyMaxConcurrent = 1, 0 }, "OVERLOADED"},
		{"key concurrency", func(c *Config) { c.Limits.MaxInFlight, c.Limits.KeyMaxConcurrent = 0, 1 }, "KEY_CONCURRENCY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := gatedEnv(t, func(c *Config) { c.Auth = testKeys() }, tc.limits)
			conn := serveBufconn(t, e.grpc)
			t.Cleanup(func() { conn.Close() })
			client := completionv1.NewCompletionClient(conn)
			ctx := bearer(t.Context(), "Bearer ops-secret-key")
			st, err := client.Stream(ctx, prompt("hello", nil))
			if err != nil {
				t.Fatal(err)
			}
			id := recvUntilDelta(t, st)[0].GetStarted().GetCompletionId() // it runs, and holds
			second, err := client.Stream(ctx, prompt("hello", nil))
			if err == nil {
				_, err = second.Recv() // the refusal comes as the stream's status
			}
			if refused := status.Convert(err); errorInfo(refused).GetReason() != tc.reason {
				t.Fatalf("a second Stream: %v, want %s", refused, tc.reason)
			}
			if _, err := client.ListRoutes(ctx, &completionv1.ListRoutesRequest{}); err != nil {
				t.Errorf("ListRoutes: %v", err)
			}
			resp, s := callCancel(ctx, client, id)
			if s.Code() != codes.OK || resp.GetReason() != abortedStreaming {
				t.Fatalf("Cancel at the limit: %v, %v", resp, s)
			}
		})
	}
}
