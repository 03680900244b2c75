package service

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// FuzzSessionCheck plays arbitrary sequences of what a Session sees — tool
// calls and stop-hook requests the server sends, messages the caller sends,
// well-formed or arbitrary wire bytes — through session.check. It must
// never panic, and it must find a violation exactly where the protocol has
// one: a second start, a resume after the first message, an empty message,
// a result for a call nobody made or answered already, a verdict nobody
// asked for, answered already, or not one of ALLOW, BLOCK, PREVENT.
//
// The script is read two bytes at a time: an operation and its argument.
func FuzzSessionCheck(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 2, 0},       // a call, its result
		{0, 0, 2, 0, 2, 0}, // a second result for it
		{2, 1},             // a result for a call nobody made
		{1, 0, 3, 0x10},    // a hook request, an ALLOW verdict
		{1, 0, 3, 0x30, 3, 0x10},
		{3, 0x50},       // a verdict nobody asked for
		{1, 1, 3, 0x71}, // a verdict that is not one of the three
		{4, 0}, {5, 0}, {6, 0},
		{0, 0, 0, 1, 2, 0x40}, // two calls, one message answering both
		{7, 4, 0x0a, 0x02, 0x0a, 0x00},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		s := &session{stream: sendOnly{}, calls: map[string]bool{}, hooks: map[string]bool{}}
		m := protocolModel{calls: map[string]bool{}, hooks: map[string]bool{}}
		for len(script) > 0 {
			op, arg := script[0], byte(0)
			if len(script) > 1 {
				arg = script[1]
			}
			script = script[min(2, len(script)):]
			var msg *completionv1.SessionRequest
			switch op % 8 {
			case 0: // the server sends a tool call
				id := callIDs[arg%4]
				if err := s.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_ToolCall{ToolCall: &completionv1.ToolCall{Id: id}}}); err != nil {
					t.Fatal(err)
				}
				m.calls[id] = false
				continue
			case 1: // the server asks for a verdict
				id := hookIDs[arg%4]
				if err := s.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_StopHookRequest{StopHookRequest: &completionv1.StopHookRequest{HookId: id}}}); err != nil {
					t.Fatal(err)
				}
				m.hooks[id] = false
				continue
			case 2: // results for one to four calls, two bits of arg each
				var rs []*completionv1.ToolResultBlock
				for i := range 1 + int(arg>>6) {
					rs = append(rs, &completionv1.ToolResultBlock{ToolUseId: callIDs[(arg>>(2*i))%4]})
				}
				msg = &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{Results: rs}}}
			case 3: // a verdict: hook in the low bits, verdict value in the high ones
				msg = &completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{StopHookVerdict: &completionv1.StopHookVerdict{
					HookId: hookIDs[arg%4], Verdict: completionv1.Verdict(arg >> 4)}}}
			case 4:
				msg = &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: &completionv1.SessionStart{}}}
			case 5:
				msg = &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Cancel{Cancel: &completionv1.Cancel{}}}
			case 6:
				msg = &completionv1.SessionRequest{}
			case 7: // arg bytes of the script as wire bytes
				n := min(int(arg), len(script))
				msg = &completionv1.SessionRequest{}
				err := proto.Unmarshal(script[:n], msg)
				script = script[n:]
				if err != nil {
					continue
				}
			}
			got, want := s.check(msg), m.check(msg)
			if (got != "") != want {
				t.Fatalf("check(%v) = %q; the protocol says violation=%t", msg, got, want)
			}
		}
	})
}

var (
	callIDs = [4]string{"toolu_1", "toolu_2", "toolu_3", ""}
	hookIDs = [4]string{"hook_1", "hook_2", "hook_3", ""}
)

// protocolModel is the Session protocol as the API documents it: what was
// asked of the caller, and what it answered.
type protocolModel struct {
	calls, hooks map[string]bool // id → answered
}

// check reports whether msg breaks the protocol, and records what it answers.
func (m protocolModel) check(msg *completionv1.SessionRequest) bool {
	switch r := msg.GetRequest().(type) {
	case nil, *completionv1.SessionRequest_Start, *completionv1.SessionRequest_Resume:
		return true
	case *completionv1.SessionRequest_ToolResults:
		for _, res := range r.ToolResults.GetResults() {
			answered, known := m.calls[res.GetToolUseId()]
			if !known || answered {
				return true
			}
			m.calls[res.GetToolUseId()] = true
		}
	case *completionv1.SessionRequest_StopHookVerdict:
		v := r.StopHookVerdict
		answered, known := m.hooks[v.GetHookId()]
		if !known || answered {
			return true
		}
		switch v.GetVerdict() {
		case completionv1.Verdict_VERDICT_ALLOW, completionv1.Verdict_VERDICT_BLOCK, completionv1.Verdict_VERDICT_PREVENT:
		default:
			return true
		}
		m.hooks[v.GetHookId()] = true
	}
	return false
}

// sendOnly is a Session stream whose sends succeed; nothing else is used.
type sendOnly struct {
	grpc.BidiStreamingServer[completionv1.SessionRequest, completionv1.CompletionEvent]
}

func (sendOnly) Send(*completionv1.CompletionEvent) error { return nil }
