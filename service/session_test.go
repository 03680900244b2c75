package service

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// sessionClient drives one Session from the caller's side.
type sessionClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent]
	events []*completionv1.CompletionEvent
	status error
}

func (e *testEnv) session(t *testing.T, start *completionv1.SessionStart) *sessionClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return openSession(t, ctx, e.client, startMsg(start))
}

// openSession opens a Session on client under ctx, waiting for the
// connection to be ready, and sends first.
func openSession(t *testing.T, ctx context.Context, client completionv1.CompletionClient, first *completionv1.SessionRequest) *sessionClient {
	t.Helper()
	st, err := client.Session(ctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	s := &sessionClient{t: t, stream: st}
	s.send(first)
	return s
}

func startMsg(start *completionv1.SessionStart) *completionv1.SessionRequest {
	return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}}
}

func (s *sessionClient) send(m *completionv1.SessionRequest) {
	s.t.Helper()
	if err := s.stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
		s.t.Fatal(err)
	}
}

// until reads events until pred matches one (returned) or the stream ends (nil).
func (s *sessionClient) until(pred func(*completionv1.CompletionEvent) bool) *completionv1.CompletionEvent {
	s.t.Helper()
	for s.status == nil {
		ev, err := s.stream.Recv()
		if err != nil {
			s.status = err
			return nil
		}
		s.events = append(s.events, ev)
		if pred(ev) {
			return ev
		}
	}
	return nil
}

func (s *sessionClient) toolCall() *completionv1.ToolCall {
	return s.until(func(ev *completionv1.CompletionEvent) bool { return ev.GetToolCall() != nil }).GetToolCall()
}

func (s *sessionClient) hookRequest() *completionv1.StopHookRequest {
	return s.until(func(ev *completionv1.CompletionEvent) bool { return ev.GetStopHookRequest() != nil }).GetStopHookRequest()
}

func (s *sessionClient) answer(id, text string, halt bool) {
	s.send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{
		Results: []*completionv1.ToolResultBlock{{ToolUseId: id, Text: text, Halt: halt}}}}})
}

func (s *sessionClient) verdict(id string, v completionv1.Verdict, msg string) {
	s.send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{
		StopHookVerdict: &completionv1.StopHookVerdict{HookId: id, Verdict: v, Message: msg}}})
}

func (s *sessionClient) cancel() {
	s.send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Cancel{Cancel: &completionv1.Cancel{Reason: "user hit stop"}}})
}

// end reads to the end and checks the stream contract.
func (s *sessionClient) end() (*completionv1.Result, codes.Code) {
	s.t.Helper()
	s.until(func(*completionv1.CompletionEvent) bool { return false })
	st := statusOf(s.status)
	if errors.Is(s.status, io.EOF) {
		st = statusOf(nil)
	}
	res := checkContract(s.t, s.events, st)
	return res, st.Code()
}

func sessionStart(script string, mut ...func(*completionv1.SessionStart)) *completionv1.SessionStart {
	st := &completionv1.SessionStart{Request: faults(script)}
	st.Request.Tools = []*completionv1.Tool{{Name: "search", Description: "searches"}}
	for _, m := range mut {
		m(st)
	}
	return st
}

func TestSessionToolLoopCompletes(t *testing.T) {
	env := newTestEnv(t)
	s := env.session(t, sessionStart("tool_use,tool_use"))
	for range 2 {
		call := s.toolCall()
		if call.GetName() != "search" || call.GetId() == "" {
			t.Fatalf("tool call %v", call)
		}
		s.answer(call.GetId(), "42", false)
	}
	res, code := s.end()
	if code != codes.OK || res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN {
		t.Fatalf("ended %v with %v", code, res.GetStopReason())
	}
	if got := transitions(s.events); !slices.Equal(got, []string{"NEXT_TURN", "NEXT_TURN", "COMPLETED"}) {
		t.Errorf("transitions %v", got)
	}
	if last := s.events[len(s.events)-1]; last.GetTurn() != 3 {
		t.Errorf("the answer came in turn %d, want 3", last.GetTurn())
	}
}

func TestSessionMaxTurns(t *testing.T) {
	env := newTestEnv(t)
	s := env.session(t, sessionStart("tool_use*5", func(st *completionv1.SessionStart) { st.MaxTurns = 2 }))
	for range 2 {
		if call := s.toolCall(); call != nil {
			s.answer(call.GetId(), "more", false)
		}
	}
	res, code := s.end()
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_MAX_TURNS || code != codes.ResourceExhausted {
		t.Errorf("ended %v / %v, want MAX_TURNS / ResourceExhausted", res.GetReason(), code)
	}
}

func TestSessionCancelDuringTools(t *testing.T) {
	env := newTestEnv(t)
	s := env.session(t, sessionStart("tool_use"))
	s.toolCall() // sent once the attempt that made it is settled: the model has finished
	s.cancel()
	res, code := s.end()
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_TOOLS || code != codes.Canceled {
		t.Errorf("ended %v / %v, want ABORTED_TOOLS / Canceled", res.GetReason(), code)
	}
}

func TestSessionCancelDuringStreamingStopsTheUpstream(t *testing.T) {
	env := newTestEnv(t)
	start := sessionStart("")
	start.Request.Metadata = map[string]string{sim.MetaPace: "20ms", sim.MetaWords: "5000"}
	s := env.session(t, start)
	s.until(func(ev *completionv1.CompletionEvent) bool { return ev.GetDelta() != nil })
	began := time.Now()
	s.cancel()
	res, code := s.end()
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_STREAMING || code != codes.Canceled {
		t.Errorf("ended %v / %v, want ABORTED_STREAMING / Canceled", res.GetReason(), code)
	}
	if countDeltas(s.events) > 1000 || time.Since(began) > 5*time.Second {
		t.Errorf("the upstream went on after the cancel: %d deltas", countDeltas(s.events))
	}
}

func TestSessionHaltingToolResult(t *testing.T) {
	env := newTestEnv(t)
	s := env.session(t, sessionStart("tool_use"))
	s.answer(s.toolCall().GetId(), "denied by policy", true)
	res, code := s.end()
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_HOOK_STOPPED || code != codes.Aborted {
		t.Errorf("ended %v / %v, want HOOK_STOPPED / Aborted", res.GetReason(), code)
	}
}

func TestSessionStopHookVerdicts(t *testing.T) {
	hook := func(st *completionv1.SessionStart) { st.StopHook = true }
	tests := []struct {
		name     string
		verdicts []completionv1.Verdict
		want     []string
		code     codes.Code
	}{
		{"allow", []completionv1.Verdict{completionv1.Verdict_VERDICT_ALLOW}, []string{"COMPLETED"}, codes.OK},
		{"block then allow", []completionv1.Verdict{completionv1.Verdict_VERDICT_BLOCK, completionv1.Verdict_VERDICT_ALLOW},
			[]string{"STOP_HOOK_BLOCKING", "COMPLETED"}, codes.OK},
		{"prevent", []completionv1.Verdict{completionv1.Verdict_VERDICT_PREVENT}, []string{"STOP_HOOK_PREVENTED"}, codes.Aborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			s := env.session(t, sessionStart("", hook))
			for _, v := range tt.verdicts {
				req := s.hookRequest()
				if req.GetAnswer().GetRole() != completionv1.Role_ROLE_ASSISTANT {
					t.Fatalf("hook request %v", req)
				}
				s.verdict(req.GetHookId(), v, "Cite a source.")
			}
			_, code := s.end()
			if got := transitions(s.events); !slices.Equal(got, tt.want) || code != tt.code {
				t.Errorf("transitions %v / %v, want %v / %v", got, code, tt.want, tt.code)
			}
		})
	}
}

func TestSchemaStopHookMakesTheModelCorrectItself(t *testing.T) {
	env := newTestEnv(t)
	req := prompt("Give me a status object.", map[string]string{sim.MetaReply + ".1": "Sure! Status: ok",
		sim.MetaReply + ".2": `{"status": "ok"}`})
	req.OutputJsonSchema = `{"type": "object", "required": ["status"], "properties": {"status": {"enum": ["ok", "down"]}}}`
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := transitions(evs); !slices.Equal(got, []string{"STOP_HOOK_BLOCKING", "COMPLETED"}) {
		t.Errorf("transitions %v", got)
	}
	if resultText(res) != `{"status": "ok"}` {
		t.Errorf("answer %q", resultText(res))
	}
}

func TestSchemaStopHookGivesUpTyped(t *testing.T) {
	env := newTestEnv(t)
	req := prompt("Give me a status object.", map[string]string{sim.MetaReply: "never JSON"})
	req.OutputJsonSchema = `{"type": "object"}`
	req.Policy = &completionv1.Policy{MaxStopHookBlocks: proto.Int32(2)}
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_STOP_HOOK_PREVENTED {
		t.Errorf("ended %v (%v), want STOP_HOOK_PREVENTED after the blocks", res.GetReason(), transitions(evs))
	}
}

func TestSessionSilentCallerEndsTyped(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.CallerWait = 50 * time.Millisecond })
	s := env.session(t, sessionStart("tool_use"))
	s.toolCall()
	res, code := s.end()
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_TOOLS || code != codes.DeadlineExceeded {
		t.Errorf("ended %v / %v, want ABORTED_TOOLS / DeadlineExceeded", res.GetReason(), code)
	}
}

func TestSessionProtocolViolations(t *testing.T) {
	tests := []struct {
		name string
		act  func(s *sessionClient)
	}{
		{"result for an unknown call", func(s *sessionClient) { s.toolCall(); s.answer("toolu_nope", "x", false) }},
		{"second start", func(s *sessionClient) {
			s.toolCall()
			s.send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: sessionStart("")}})
		}},
		{"verdict nobody asked for", func(s *sessionClient) {
			s.toolCall()
			s.verdict("hook_9", completionv1.Verdict_VERDICT_ALLOW, "")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			s := env.session(t, sessionStart("tool_use"))
			tt.act(s)
			_, code := s.end()
			if code != codes.InvalidArgument {
				t.Errorf("status %v, want InvalidArgument", code)
			}
		})
	}
}

func TestSessionMustStartWithStart(t *testing.T) {
	env := newTestEnv(t)
	st, err := env.client.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Cancel{Cancel: &completionv1.Cancel{}}})
	_, err = st.Recv()
	if statusOf(err).Code() != codes.InvalidArgument {
		t.Errorf("status %v, want InvalidArgument", err)
	}
}

func TestSessionTranscriptRecordsAbortedToolCalls(t *testing.T) {
	env := newTestEnv(t)
	s := env.session(t, sessionStart("tool_use"))
	call := s.toolCall() // sent once the model has finished
	s.cancel()
	res, _ := s.end()
	tr := res.GetTranscript()
	if len(tr) != 3 {
		t.Fatalf("transcript of %d messages, want user, assistant tool call, user error result: %v", len(tr), tr)
	}
	result := tr[2].GetContent()[0].GetToolResult()
	if result.GetToolUseId() != call.GetId() || !result.GetIsError() || !strings.Contains(result.GetText(), "aborted") {
		t.Errorf("last message %v, want an error result for %s", tr[2], call.GetId())
	}
}
