package service

import (
	"maps"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/recovery"
)

// FuzzValidate feeds arbitrary wire bytes, through the server's codec, to
// the validation and conversion that run before any upstream call: whatever
// a caller sends, the codec must not fail the call, validation must not
// panic, its refusal must be a small INVALID_ARGUMENT, and a request it
// accepts must convert cleanly.
func FuzzValidate(f *testing.F) {
	seeds := []*completionv1.CompleteRequest{prompt("hi", map[string]string{"sim.faults": "cut=3"}), faults("overload*3")}
	withTools := prompt("x", nil)
	withTools.Tools = []*completionv1.Tool{{Name: "t"}}
	withTools.OutputJsonSchema = `{"type":"object"}`
	seeds = append(seeds, withTools, withImage(prompt("img", nil)), conversation(8, 30, true, nil))
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x08, 0xff})
	cfg := DefaultConfig()
	cfg.fillDefaults()
	codec := wireCodec // the codec the server decodes requests with
	f.Fuzz(func(t *testing.T, data []byte) {
		var req completionv1.CompleteRequest
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &req); err != nil {
			t.Fatalf("the server's codec failed the call: %v", err)
		}
		v, _ := cfg.validate(&req)
		if len(v) > 0 {
			st := status.Convert(invalidArgument(v))
			if st.Code() != codes.InvalidArgument || proto.Size(st.Proto()) > maxStatusBytes {
				t.Fatalf("refusal %v of %d bytes", st.Code(), proto.Size(st.Proto()))
			}
			return
		}
		if why, bad := malformed(&req); bad {
			t.Fatalf("validation accepted a request that did not decode: %s", why)
		}
		msgs := convert.ToMessages(req.GetMessages())
		if len(msgs) != len(req.GetMessages()) {
			t.Fatalf("converted %d of %d messages", len(msgs), len(req.GetMessages()))
		}
		_ = convert.ToTools(req.GetTools())
		if _, pv := cfg.tighten(req.GetPolicy(), 0); len(pv) > 0 {
			t.Fatalf("validation passed but tighten refused: %v", pv)
		}
	})
}

// FuzzSessionWire feeds a Session's later messages, as arbitrary wire bytes
// through the server's codec, to the protocol check: a session that sent
// two tool calls and one stop-hook request. Each message is one length byte
// and that many bytes. Whatever arrives, the check must accept only answers
// to what was asked and not yet answered, mark them answered, refuse
// anything else (a second start, a late resume, an empty or undecodable
// message), and its violation must end in a small INVALID_ARGUMENT.
func FuzzSessionWire(f *testing.F) {
	msg := func(m *completionv1.SessionRequest) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return append([]byte{byte(len(b))}, b...)
	}
	results := func(ids ...string) []byte {
		var rs []*completionv1.ToolResultBlock
		for _, id := range ids {
			rs = append(rs, &completionv1.ToolResultBlock{ToolUseId: id, Text: "ok"})
		}
		return msg(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{Results: rs}}})
	}
	verdict := func(id string, v completionv1.Verdict) []byte {
		return msg(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{
			StopHookVerdict: &completionv1.StopHookVerdict{HookId: id, Verdict: v}}})
	}
	start := msg(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: &completionv1.SessionStart{}}})
	resume := msg(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Resume{Resume: &completionv1.SessionResume{CompletionId: "c"}}})
	cancel := msg(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Cancel{Cancel: &completionv1.Cancel{}}})
	for _, seed := range [][]byte{
		results("call_1"),
		append(results("call_1", "call_2"), verdict("hook_1", completionv1.Verdict_VERDICT_BLOCK)...),
		append(results("call_1"), results("call_1")...),
		results("call_9"),
		verdict("hook_1", 7),
		start, resume, cancel, {0}, {2, 0x08, 0xff},
	} {
		f.Add(seed)
	}
	codec := wireCodec // the codec the server decodes requests with
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &session{calls: map[string]bool{"call_1": false, "call_2": false}, hooks: map[string]bool{"hook_1": false}}
		for len(data) > 0 {
			n := min(int(data[0]), len(data)-1)
			chunk := data[1 : 1+n]
			data = data[1+n:]
			var m completionv1.SessionRequest
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(chunk)}, &m); err != nil {
				t.Fatalf("the server's codec failed the call: %v", err)
			}
			calls, hooks := maps.Clone(s.calls), maps.Clone(s.hooks)
			bad := s.check(&m)
			if bad != "" {
				st := endStatus(ending{result: &recovery.Result{Reason: recovery.AbortedStreaming}, violation: bad})
				if st.Code() != codes.InvalidArgument || proto.Size(st.Proto()) > maxStatusBytes {
					t.Fatalf("violation %q ends %v, %d bytes", bad, st.Code(), proto.Size(st.Proto()))
				}
				return // the session ends
			}
			checkAccepted(t, &m, calls, hooks, s)
		}
	})
}

// checkAccepted asserts what the check may accept, given what was asked and
// answered before it (calls, hooks), and what it must have recorded.
func checkAccepted(t *testing.T, m *completionv1.SessionRequest, calls, hooks map[string]bool, s *session) {
	t.Helper()
	if _, bad := malformed(m); bad {
		t.Fatal("accepted a message that did not decode")
	}
	switch r := m.GetRequest().(type) {
	case nil, *completionv1.SessionRequest_Start, *completionv1.SessionRequest_Resume:
		t.Fatalf("accepted %v", m)
	case *completionv1.SessionRequest_ToolResults:
		seen := map[string]bool{}
		for _, res := range r.ToolResults.GetResults() {
			id := res.GetToolUseId()
			if answered, known := calls[id]; !known || answered || seen[id] {
				t.Fatalf("accepted a result for call %q (known %v, answered %v, twice %v)", id, known, answered, seen[id])
			}
			seen[id] = true
			if !s.calls[id] {
				t.Fatalf("call %q answered but not recorded", id)
			}
		}
	case *completionv1.SessionRequest_StopHookVerdict:
		id := r.StopHookVerdict.GetHookId()
		if answered, known := hooks[id]; !known || answered || !s.hooks[id] {
			t.Fatalf("accepted a verdict for hook %q (known %v, answered %v)", id, known, answered)
		}
		if v := r.StopHookVerdict.GetVerdict(); v < completionv1.Verdict_VERDICT_ALLOW || v > completionv1.Verdict_VERDICT_PREVENT {
			t.Fatalf("accepted verdict %v", v)
		}
	}
	for id, answered := range calls {
		if answered && !s.calls[id] {
			t.Fatalf("call %q answered, then not", id)
		}
	}
}
