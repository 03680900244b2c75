package service

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// BenchmarkAttachLatency measures the time from an Attach call (or a
// Session resume) to the first replayed event, over bufconn, for a
// retained completion of 1 000 tokens: replaying from the start, and only
// its last event. ns/op is that latency; the rest of each replay is read
// outside the timer.
func BenchmarkAttachLatency(b *testing.B) {
	client := benchServer(b, config.SimRoutes(sim.New(sim.Config{})), "sim")
	req := prompt("Benchmark attach.", map[string]string{sim.MetaWords: "1000", sim.MetaPace: "0s"})
	id, lastSeq := benchCompletion(b, client, req, false)
	sessionID, sessionLast := benchCompletion(b, client, req, true)
	attach := func(ctx context.Context, id string, after uint64) (func() (*completionv1.CompletionEvent, error), error) {
		st, err := client.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: after})
		if err != nil {
			return nil, err
		}
		return st.Recv, nil
	}
	resume := func(ctx context.Context, id string, after uint64) (func() (*completionv1.CompletionEvent, error), error) {
		st, err := client.Session(ctx)
		if err != nil {
			return nil, err
		}
		return st.Recv, st.Send(resumeMsg(id, after))
	}
	for _, bb := range []struct {
		name  string
		open  func(context.Context, string, uint64) (func() (*completionv1.CompletionEvent, error), error)
		id    string
		after uint64
	}{
		{"Attach/from-start", attach, id, 0},
		{"Attach/last-event", attach, id, lastSeq - 1},
		{"SessionResume/from-start", resume, sessionID, 0},
		{"SessionResume/last-event", resume, sessionID, sessionLast - 1},
	} {
		b.Run(bb.name, func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithCancel(context.Background())
				recv, err := bb.open(ctx, bb.id, bb.after)
				if err != nil {
					b.Fatal(err)
				}
				if ev, err := recv(); err != nil || ev.GetSeq() != bb.after+1 {
					b.Fatalf("first event %v, %v", ev, err)
				}
				b.StopTimer() // read the rest, so that no replay still runs in the next iteration
				if _, st := recvAll(recv); st.Err() != nil {
					b.Fatal(st.Err())
				}
				cancel()
				b.StartTimer()
			}
		})
	}
}

// benchCompletion runs req to its end, as a Stream or as a resumable
// Session, and returns its id and last seq.
func benchCompletion(b *testing.B, client completionv1.CompletionClient, req *completionv1.CompleteRequest, session bool) (string, uint64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recv func() (*completionv1.CompletionEvent, error)
	if session {
		st, err := client.Session(ctx, grpc.WaitForReady(true))
		if err != nil {
			b.Fatal(err)
		}
		start := &completionv1.SessionStart{Request: proto.Clone(req).(*completionv1.CompleteRequest)}
		start.Request.ResumeGrace = durationpb.New(time.Minute)
		if err := st.Send(startMsg(start)); err != nil {
			b.Fatal(err)
		}
		recv = st.Recv
	} else {
		st, err := client.Stream(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		recv = st.Recv
	}
	evs, st := recvAll(recv)
	if st.Err() != nil || len(evs) == 0 || evs[len(evs)-1].GetResult() == nil {
		b.Fatalf("the completion to attach to ended %v after %d events", st, len(evs))
	}
	return last(evs)
}
