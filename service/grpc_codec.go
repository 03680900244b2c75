package service

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// A request whose bytes do not decode (malformed protobuf, a string field
// that is not UTF-8) is the caller's fault, but grpc-go's server reports a
// codec's error as INTERNAL, for unary and streaming handlers alike, before
// any interceptor of a unary call runs. So this server's codec does not
// fail on the requests of this service: it empties the message and marks
// it, and the handlers refuse a marked message like any invalid one —
// INVALID_ARGUMENT naming "request" (validate), a Session's first message
// that is not a start, or a later one that is empty. Every other message,
// and every message sent, goes through grpc-go's codec untouched.
//
// The codec is this server's alone (codecOption, set by NewGRPC): the
// process's registered "proto" codec stays grpc-go's, which every other
// gRPC client and server of the binary (the OTLP exporter's among them)
// keeps using.

// wireCodec is the codec of the server NewGRPC assembles: grpc-go's proto
// codec, as registered when the package was loaded, wrapped by
// requestCodec.
var wireCodec encoding.CodecV2 = requestCodec{encoding.GetCodecV2(grpcproto.Name)}

// codecOption makes wireCodec the codec of one server, without registering
// it for the process. It is used whatever content subtype a caller names,
// as grpc-go's "proto" codec was: grpc-go falls back to "proto" for a
// subtype it has no codec for, and the binary registers no other.
func codecOption() grpc.ServerOption { return grpc.ForceServerCodecV2(wireCodec) }

// requestCodec is grpc-go's proto codec, but for the decoding errors of the
// service's requests, and for the events a Stream sends already encoded
// (encodedEvent, see wireLog).
type requestCodec struct{ encoding.CodecV2 }

// Marshal encodes v; an encodedEvent is its bytes, as they are.
func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedEvent); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// Unmarshal decodes data into v; a request of this service that does not
// decode is emptied and marked malformed instead of failing the call.
func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	switch m := v.(type) {
	case *completionv1.CompleteRequest:
		markMalformed(m, err)
		return nil
	case *completionv1.SessionRequest:
		markMalformed(m, err)
		return nil
	}
	return err
}

// malformedField is the unknown field that marks a request that did not
// decode; it holds the decoding error. A caller who sends it is refused.
const malformedField = protowire.MaxValidNumber

// maxDecodeError bounds the decoding error a refusal repeats.
const maxDecodeError = 200

func markMalformed(m proto.Message, err error) {
	proto.Reset(m)
	b := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(b, clip(err.Error(), maxDecodeError)))
}

// malformed returns the decoding error of a request the codec marked.
func malformed(m proto.Message) (string, bool) {
	raw := m.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return "", false
		}
		raw = raw[n:]
		if num == malformedField && typ == protowire.BytesType {
			why, n := protowire.ConsumeBytes(raw)
			if n < 0 {
				return "", false
			}
			return clip(string(why), maxDecodeError), true
		}
		if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
			return "", false
		}
		raw = raw[n:]
	}
	return "", false
}
