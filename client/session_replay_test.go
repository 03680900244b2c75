package client

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// TestSessionReplay drives RunSession over each Session transcript's
// events and checks that it sends exactly what the recorded caller sent,
// in order, each after the event it answered. The handler answers from
// the transcript, as the Python and TypeScript replay tests do.
func TestSessionReplay(t *testing.T) {
	for _, file := range transcriptFiles(t) {
		tr := readTranscript(t, file)
		if tr.RPC != "Session" {
			continue
		}
		t.Run(tr.Name, func(t *testing.T) {
			want := decodeSent(t, tr)
			fake := &replayStream{events: decodeEvents(t, tr), status: decodeStatus(t, tr.Status)}
			c := &Client{rpc: replayClient{stream: fake}, reconnect: DefaultReconnect()}
			start := &completionv1.SessionStart{}
			if err := protojson.Unmarshal(tr.Request, start); err != nil {
				t.Fatal(err)
			}
			fold, err := c.RunSession(context.Background(), start, handlerFrom(want))
			if got := FromStatus(status.Convert(err)); (got == nil) != (tr.Status.Code == 0) {
				t.Errorf("RunSession returned %v, transcript status %v", err, tr.Status.Code)
			}
			if fold.LastSeq() != tr.Expect.LastSeq {
				t.Errorf("folded to seq %d, want %d", fold.LastSeq(), tr.Expect.LastSeq)
			}
			if len(fake.sent) != len(want)+1 || fake.sent[0].req.GetStart() == nil {
				t.Fatalf("sent %d messages, want start and %d", len(fake.sent), len(want))
			}
			for i, w := range want {
				got := fake.sent[i+1]
				if !proto.Equal(got.req, w.req) || got.afterSeq != w.afterSeq {
					t.Errorf("message %d: sent %v after seq %d, want %v after seq %d", i+1, got.req, got.afterSeq, w.req, w.afterSeq)
				}
			}
		})
	}
}

type sentMessage struct {
	afterSeq uint64
	req      *completionv1.SessionRequest
}

func decodeSent(t *testing.T, tr transcript) []sentMessage {
	t.Helper()
	var out []sentMessage
	for _, s := range tr.Sent {
		req := &completionv1.SessionRequest{}
		unwire(t, s.Wire, req)
		out = append(out, sentMessage{s.AfterSeq, req})
	}
	return out
}

// handlerFrom answers tool calls and stop hooks as the recorded caller
// did; a recorded cancel is the Event callback's Cancel on the event it
// followed.
func handlerFrom(sent []sentMessage) SessionHandler {
	results := map[string]*completionv1.ToolResultBlock{}
	verdicts := map[string]*completionv1.StopHookVerdict{}
	cancels := map[uint64]string{}
	for _, s := range sent {
		if c := s.req.GetCancel(); c != nil {
			cancels[s.afterSeq] = c.GetReason()
		}
		for _, r := range s.req.GetToolResults().GetResults() {
			results[r.GetToolUseId()] = r
		}
		if v := s.req.GetStopHookVerdict(); v != nil {
			verdicts[v.GetHookId()] = v
		}
	}
	return SessionHandler{
		Event: func(ev *completionv1.CompletionEvent) error {
			if reason, ok := cancels[ev.GetSeq()]; ok {
				return Cancel(reason)
			}
			return nil
		},
		Tool: func(_ context.Context, call *completionv1.ToolCall) (*completionv1.ToolResultBlock, error) {
			return proto.Clone(results[call.GetId()]).(*completionv1.ToolResultBlock), nil
		},
		StopHook: func(_ context.Context, req *completionv1.StopHookRequest) (*completionv1.StopHookVerdict, error) {
			return proto.Clone(verdicts[req.GetHookId()]).(*completionv1.StopHookVerdict), nil
		},
	}
}

// replayClient serves one replayStream as its Session.
type replayClient struct {
	completionv1.CompletionClient
	stream *replayStream
}

func (c replayClient) Session(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent], error) {
	return c.stream, nil
}

// replayStream yields recorded events, then the recorded status, and
// records what is sent, with the seq of the last event yielded before.
// A recorded cancel makes the server end the stream: once the caller has
// sent the recorded messages, the rest of the events still come.
type replayStream struct {
	grpc.ClientStream
	events []*completionv1.CompletionEvent
	status *status.Status
	next   int
	sent   []sentMessage
}

func (s *replayStream) Send(req *completionv1.SessionRequest) error {
	var seq uint64
	if s.next > 0 {
		seq = s.events[s.next-1].GetSeq()
	}
	s.sent = append(s.sent, sentMessage{seq, req})
	return nil
}

func (s *replayStream) Recv() (*completionv1.CompletionEvent, error) {
	if s.next < len(s.events) {
		s.next++
		return s.events[s.next-1], nil
	}
	if err := s.status.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

func (s *replayStream) CloseSend() error { return nil }
