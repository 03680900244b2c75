package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// The fleet's promise at the level of processes: an event reaches Redis
// before it reaches a caller, and every caller receives every seq once and
// the whole answer, whatever befalls the replicas.

// rawClient is the generated client of p, its connection closed when t
// ends: the tests see every event and status as the wire carries them.
func rawClient(t *testing.T, p *proc) completionv1.CompletionClient {
	t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return completionv1.NewCompletionClient(conn)
}

// signal sends sig to p.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

// checkWhole fails t unless evs are seqs 1… once each, end with the
// result, and their text is want, with no word twice.
func checkWhole(t *testing.T, who string, evs []*completionv1.CompletionEvent, want string) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("%s: event %d has seq %d: every seq exactly once is broken", who, i, ev.GetSeq())
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].GetResult() == nil {
		t.Fatalf("%s: the last event is not the result", who)
	}
	if got := resultText(evs[len(evs)-1].GetResult()); got != want {
		t.Errorf("%s: answer %q, want %q", who, got, want)
	}
	if all := allText(evs); all != want {
		t.Errorf("%s: the deltas concatenate to %q, want %q (a word twice, or a discarded one kept)", who, all, want)
	}
}

// TestFleetPausedOwner: the replica that runs a resumable Stream is
// stopped (SIGSTOP) past its lease; an attacher through B makes B take the
// completion over; the owner wakes (SIGCONT) as its next token is due. Its
// write is fenced, and so the event is sent to nobody: its caller's
// stream ends UNAVAILABLE (no ErrorInfo: attach to follow it), the caller
// attaches through B after the last seq it received, and its answer is
// whole, as the attacher's is. Three rounds: the wake races with the
// owner's next token.
func TestFleetPausedOwner(t *testing.T) {
	bin := buildCompletiond(t)
	rs := redistest.Start(t)
	a, b := startReplica(t, bin, "A", rs), startReplica(t, bin, "B", rs)
	onA, onB := rawClient(t, a), rawClient(t, b)
	req := &completionv1.CompleteRequest{
		Route:       "sim",
		Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "Tell me about pauses."}}}}}},
		Metadata:    map[string]string{"sim.pace": "20ms", "sim.words": "150"},
		ResumeGrace: durationpb.New(30 * time.Second),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	whole, err := onB.Complete(ctx, &completionv1.CompleteRequest{Route: req.Route, Messages: req.Messages,
		Metadata: map[string]string{"sim.words": "150", "sim.pace": "1ms"}})
	if err != nil {
		t.Fatal(err)
	}
	want := resultText(whole.GetResult())

	for round := range 3 {
		st, err := onA.Stream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var mine []*completionv1.CompletionEvent
		for deltas := 0; deltas < 5+round*3; {
			ev, err := st.Recv()
			if err != nil {
				t.Fatalf("round %d, through A before the pause: %v", round, err)
			}
			mine = append(mine, ev)
			if ev.GetDelta() != nil {
				deltas++
			}
		}
		id := mine[0].GetStarted().GetCompletionId()
		a.signal(t, syscall.SIGSTOP)

		// The attacher through B, from the start: B takes the completion
		// over once A's lease lapsed. A wakes once B has sent a delta of
		// its own.
		at, err := onB.Attach(ctx, &completionv1.AttachRequest{CompletionId: id})
		if err != nil {
			t.Fatal(err)
		}
		var theirs []*completionv1.CompletionEvent
		for tookOver := false; ; {
			ev, err := at.Recv()
			if err != nil {
				a.signal(t, syscall.SIGCONT)
				t.Fatalf("round %d, the attacher through B: %v", round, err)
			}
			theirs = append(theirs, ev)
			tookOver = tookOver || ev.GetTransition().GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST
			if tookOver && ev.GetDelta() != nil {
				break
			}
		}
		a.signal(t, syscall.SIGCONT)

		rest, err := testkit.Drain(st)
		mine = append(mine, rest...)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("round %d: the paused owner's stream ended %v after %d more events, want UNAVAILABLE", round, err, len(rest))
		}
		last := mine[len(mine)-1].GetSeq()
		follow, err := onB.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: last})
		if err != nil {
			t.Fatal(err)
		}
		rest, err = testkit.Drain(follow)
		if err != nil {
			t.Fatalf("round %d: the caller's attach through B after seq %d: %v", round, last, err)
		}
		checkWhole(t, "the paused owner's caller", append(mine, rest...), want)
		rest, err = testkit.Drain(at)
		if err != nil {
			t.Fatalf("round %d: the attacher: %v", round, err)
		}
		checkWhole(t, "the attacher", append(theirs, rest...), want)
		t.Logf("round %d: the owner's caller received %d events from A, then seq %d… through B", round, len(mine), last+1)
	}
}

// TestFleetAttachAfterItsReplicaDied: a Stream without a resume grace runs
// on A, which is killed (SIGKILL) as a token arrives; an Attach through B
// (after the last seq the caller saw, and one from the start) ends
// promptly with FAILED_PRECONDITION and COMPLETION_LOST — the completion
// ended with its replica — rather than following a log that looks live in
// Redis until the caller's deadline. The start retried under its
// idempotency key through B then starts it anew, rather than attach to
// it while its log is kept.
func TestFleetAttachAfterItsReplicaDied(t *testing.T) {
	bin := buildCompletiond(t)
	rs := redistest.Start(t)
	a, b := startReplica(t, bin, "A", rs), startReplica(t, bin, "B", rs)
	onB := rawClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &completionv1.CompleteRequest{
		Route:          "sim",
		Messages:       []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "Tell me about endings."}}}}}},
		Metadata:       map[string]string{"sim.pace": "20ms", "sim.words": "500"},
		IdempotencyKey: "endings",
	}
	st, err := rawClient(t, a).Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*completionv1.CompletionEvent
	for deltas := 0; deltas < 5; {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.GetDelta() != nil {
			deltas++
		}
	}
	id, last := evs[0].GetStarted().GetCompletionId(), evs[len(evs)-1].GetSeq()
	a.kill()
	killed := time.Now()
	for _, after := range []uint64{last, 0} {
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		at, err := onB.Attach(actx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: after})
		if err != nil {
			t.Fatal(err)
		}
		_, err = testkit.Drain(at)
		acancel()
		if status.Code(err) != codes.FailedPrecondition || errorReason(err) != "COMPLETION_LOST" {
			t.Fatalf("attach after seq %d through B: %v (reason %q), want FAILED_PRECONDITION COMPLETION_LOST", after, err, errorReason(err))
		}
		t.Logf("attach after seq %d: %s, %v after SIGKILL (lease %s)", after, status.Convert(err).Message(), time.Since(killed).Round(time.Millisecond), fleetLeaseTTL)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	retry, err := onB.Stream(rctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := retry.Recv()
	if err != nil || ev.GetStarted() == nil || ev.GetStarted().GetCompletionId() == id {
		t.Fatalf("the start retried under its idempotency key through B: %v %v, want a new completion (the lost one is %s)", ev, err, id)
	}
}

// errorReason is the ErrorInfo reason of err's status, if it has one.
func errorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
