package service

import (
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
)

// encodedEvent is a CompletionEvent already encoded: the server's codec
// (requestCodec) sends its bytes as they are.
type encodedEvent struct{ b []byte }

// wireLog encodes each event of one Stream once, for the in-memory event
// log and for the wire. The log encodes every event it keeps, and the
// stream's codec encoded it again right after: for a short answer that was
// a tenth of what its handler spent, and one encoding per token. The
// outbox logs an event, then sends it, on one goroutine; so the event just
// logged is the one sent next, and its send reuses the log's bytes.
type wireLog struct {
	*fleet.MemLog
	stream grpc.ServerStream
	last   *completionv1.CompletionEvent // the event logged last
	enc    encodedEvent                  // its encoding
}

// newWireLog returns the wireLog of stream over mem, or nil without it:
// the server's log is another (a fleet's log encodes for Redis on its own).
func newWireLog(mem *fleet.MemLog, stream grpc.ServerStream) *wireLog {
	if mem == nil {
		return nil
	}
	return &wireLog{MemLog: mem, stream: stream}
}

// Append implements fleet.Log.
func (w *wireLog) Append(id string, ev *completionv1.CompletionEvent) error {
	w.add(id, ev, nil, false)
	return nil
}

// End implements fleet.Log.
func (w *wireLog) End(id string, before []*completionv1.CompletionEvent, result *completionv1.CompletionEvent, status []byte) error {
	for _, ev := range before {
		w.add(id, ev, nil, false)
	}
	w.add(id, result, status, true)
	return nil
}

func (w *wireLog) add(id string, ev *completionv1.CompletionEvent, status []byte, end bool) {
	b, err := proto.Marshal(ev)
	if err != nil {
		w.last, w.enc.b = nil, nil
		return // cannot happen: the service builds every event
	}
	w.last, w.enc.b = ev, b
	w.MemLog.AddEncoded(id, ev.GetSeq(), b, status, end)
}

// send sends ev on the stream: the log's encoding when ev is the event
// logged last, else ev itself. grpc-go encodes a message before SendMsg
// returns, so enc may change for the next event.
func (w *wireLog) send(ev *completionv1.CompletionEvent) error {
	if ev == w.last {
		return w.stream.SendMsg(&w.enc)
	}
	return w.stream.SendMsg(ev)
}
