package service

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/fleet"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

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

// BenchmarkEventLogMemory measures what the in-memory event log holds for
// a completion it retains: the heap per completion of 1 000 tokens
// (bytes/1k-tokens, after a GC), and the encoded size it accounts against
// --event-log-bytes (encoded-bytes/1k-tokens). Each completion is what
// the outbox logs for a plain answer: started, 1 000 text deltas, usage,
// the terminal transition and the result, whose message repeats the text.
func BenchmarkEventLogMemory(b *testing.B) {
	const completions, tokens = 20, 1000
	var heap, encoded int64
	for range b.N {
		l := fleet.NewMemLog(config.EventLogLimits{MaxCompletions: completions, MaxEvents: 2 * tokens, MaxBytes: 1 << 30}, time.Now)
		before := heapAfterGC()
		for i := range completions {
			logAnswer(l, fmt.Sprintf("cmpl_%024d", i), tokens)
		}
		heap += heapAfterGC() - before
		encoded += l.Bytes
		runtime.KeepAlive(l)
	}
	per := float64(b.N * completions * tokens / 1000)
	b.ReportMetric(float64(heap)/per, "bytes/1k-tokens")
	b.ReportMetric(float64(encoded)/per, "encoded-bytes/1k-tokens")
}

func heapAfterGC() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// logAnswer logs, through an outbox as the driver does, a completion of
// id answering tokens words.
func logAnswer(l fleet.Log, id string, tokens int) {
	_ = l.Open(id, fleet.Meta{Owner: "bench"})
	out := newOutbox(func(*completionv1.CompletionEvent) error { return nil }, false)
	out.log, out.id = l, id
	out.event(0, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{
		CompletionId: id, Route: "sim", Model: "sim-1", Provider: "sim"}}})
	var text strings.Builder
	for i := range tokens {
		word := fmt.Sprintf(" tok%d", i%10)
		text.WriteString(word)
		_ = out.output(1, 1, completionv1.DeltaKind_DELTA_KIND_TEXT, word)
	}
	out.event(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Usage{Usage: &completionv1.Usage{InputTokens: 12, OutputTokens: int64(tokens)}}})
	out.event(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{
		Reason: completionv1.TransitionReason_TRANSITION_REASON_COMPLETED, Terminal: true}}})
	out.end(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{
		Reason:  completionv1.TransitionReason_TRANSITION_REASON_COMPLETED,
		Message: &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{convert.TextBlock(text.String())}},
	}}}, nil)
}
