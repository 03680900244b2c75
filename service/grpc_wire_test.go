package service

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// TestStreamSendsWhatItLogs runs Streams whose events are encoded once,
// for the log and the wire (wireLog), live and settled, clean and with a
// retry that discards output: the caller receives exactly the events the
// log keeps, which Attach replays, and the stream keeps its contract.
func TestStreamSendsWhatItLogs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		faults   string
		delivery completionv1.DeliveryMode
	}{
		{"clean", "", completionv1.DeliveryMode_DELIVERY_MODE_LIVE},
		{"cut and resumed", "rate_limit,cut=3", completionv1.DeliveryMode_DELIVERY_MODE_LIVE},
		{"settled", "cut=3", completionv1.DeliveryMode_DELIVERY_MODE_SETTLED},
		{"failed", "content_filter", completionv1.DeliveryMode_DELIVERY_MODE_LIVE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			req := faults(tc.faults)
			req.Delivery = tc.delivery
			evs, st := e.streamAll(t, req)
			checkContract(t, evs, st)
			logged := waitEnded(t, e.grpc.Completion.log, evs[0].GetStarted().GetCompletionId())
			if len(logged) != len(evs) {
				t.Fatalf("%d events sent, %d logged", len(evs), len(logged))
			}
			for i := range evs {
				if !proto.Equal(evs[i], logged[i]) {
					t.Errorf("event %d sent %v, logged %v", i, evs[i], logged[i])
				}
			}
		})
	}
}

// TestCodecSendsEncodedEvents: the server's codec sends an encodedEvent's
// bytes as they are, and encodes any other message as grpc-go's does.
// TestStreamSendsWhatItLogs sends encodedEvents through a server NewGRPC
// assembled.
func TestCodecSendsEncodedEvents(t *testing.T) {
	codec := wireCodec
	ev := &completionv1.CompletionEvent{Seq: 7, Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Text: "hi"}}}
	want, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		msg  any
	}{{"encoded", &encodedEvent{b: want}}, {"message", ev}} {
		data, err := codec.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Errorf("%s: codec sent %x, want %x", tc.name, got, want)
		}
	}
}
