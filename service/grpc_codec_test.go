package service

import (
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
)

// TestCodecIsThisServersOnly: assembling a server registers no codec. The
// process's "proto" codec, which every other gRPC client and server of the
// binary uses (the OTLP exporter's among them), is still grpc-go's own:
// it refuses an encodedEvent, which is not a proto message. The server
// NewGRPC assembles still sends a Stream's events encoded once (with the
// in-memory log every event goes out as an encodedEvent, which grpc-go's
// codec could not send): the Stream here keeps its contract, and
// TestStreamSendsWhatItLogs checks the bytes sent are those logged.
// TestUndecodableRequestsAreInvalidArgument checks the server still
// decodes with wireCodec.
func TestCodecIsThisServersOnly(t *testing.T) {
	e := newTestEnv(t) // a server assembled by NewGRPC, as the binary does

	c := encoding.GetCodecV2(grpcproto.Name)
	if _, ok := c.(requestCodec); ok {
		t.Fatal(`the process's "proto" codec is the server's requestCodec: it was registered process-wide`)
	}
	if typ := reflect.TypeOf(c); typ.Kind() != reflect.Pointer || typ.Elem().PkgPath() != "google.golang.org/grpc/encoding/proto" {
		t.Fatalf(`the process's "proto" codec is %v, not grpc-go's own`, typ)
	}
	if _, err := c.Marshal(&encodedEvent{b: []byte{0x08, 0x01}}); err == nil {
		t.Error(`the process's "proto" codec sent an encodedEvent: it is not grpc-go's own`)
	}
	if rc, ok := wireCodec.(requestCodec); !ok || rc.CodecV2 != c {
		t.Errorf("the server's codec %T does not wrap grpc-go's proto codec", wireCodec)
	}

	evs, st := e.streamAll(t, prompt("hello", nil))
	if checkContract(t, evs, st); st.Code() != codes.OK {
		t.Fatalf("a Stream through the assembled server ended %v", st)
	}
}
