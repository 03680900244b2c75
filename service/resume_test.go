package service

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/provider"
)

// resumableStart is a Session start of script with a resume grace.
func resumableStart(script string, grace time.Duration, mut ...func(*completionv1.SessionStart)) *completionv1.SessionStart {
	st := sessionStart(script, mut...)
	st.Request.ResumeGrace = durationpb.New(grace)
	return st
}

func resumeMsg(id string, after uint64) *completionv1.SessionRequest {
	return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Resume{
		Resume: &completionv1.SessionResume{CompletionId: id, AfterSeq: after}}}
}

// last is the seq of the last event of evs, and the completion id of its first.
func last(evs []*completionv1.CompletionEvent) (id string, seq uint64) {
	return evs[0].GetStarted().GetCompletionId(), evs[len(evs)-1].GetSeq()
}

// finish reads s to its end, answering every tool call it receives, and
// checks the stream contract over before (what earlier streams of the same
// completion received) and s's events. It returns the result and status.
func finish(t *testing.T, before []*completionv1.CompletionEvent, s *sessionClient) (*completionv1.Result, *status.Status) {
	t.Helper()
	for call := s.toolCall(); call != nil; call = s.toolCall() {
		s.answer(call.GetId(), "42", false)
	}
	st := statusOf(s.status)
	if isEOF(s.status) {
		st = statusOf(nil)
	}
	return checkContract(t, append(slices.Clone(before), s.events...), st), st
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// TestSessionResumeTakesOver: a resume while the first stream is still
// connected takes control: the first stream ends ABORTED with ErrorInfo
// SESSION_TAKEN_OVER, the new one answers the pending call, and the two
// streams together carry the Session once.
func TestSessionResumeTakesOver(t *testing.T) {
	env := newTestEnv(t)
	a := env.session(t, resumableStart("tool_use", time.Minute))
	call := a.toolCall()
	id, seq := last(a.events)
	b := openSession(t, t.Context(), env.client, resumeMsg(id, seq))
	a.until(func(*completionv1.CompletionEvent) bool { return false })
	st := statusOf(a.status)
	if st.Code() != codes.Aborted || errorInfo(st).GetReason() != reasonTakenOver || retryInfo(st) != nil {
		t.Fatalf("the first stream ended %v %v, want ABORTED, SESSION_TAKEN_OVER, no RetryInfo", st, st.Details())
	}
	b.answer(call.GetId(), "42", false)
	if res, st := finish(t, a.events, b); st.Code() != codes.OK || res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN {
		t.Errorf("ended %v %v", st, res.GetStopReason())
	}
	if n := env.upstream.calls.Load(); n != 2 {
		t.Errorf("upstream calls = %d, want 2", n)
	}
}

// TestSessionResumeDropsResentAnswers: a caller that resumes cannot know
// whether its answer reached the server before its stream broke, so it
// sends it again: an answer to what was answered before it took control
// is dropped, not a protocol violation.
func TestSessionResumeDropsResentAnswers(t *testing.T) {
	env := newTestEnv(t)
	ctx, cut := context.WithCancel(t.Context())
	a := openSession(t, ctx, env.client, startMsg(resumableStart("tool_use", time.Minute)))
	call := a.toolCall()
	id, atCall := last(a.events)
	a.answer(call.GetId(), "42", false)
	a.until(func(ev *completionv1.CompletionEvent) bool { return ev.GetTransition() != nil }) // NEXT_TURN: the answer arrived
	cut()
	b := openSession(t, t.Context(), env.client, resumeMsg(id, atCall))
	b.answer(call.GetId(), "42", false) // what a caller that lost the rest would do
	if _, st := finish(t, a.events[:atCall], b); st.Code() != codes.OK {
		t.Errorf("status %v, want OK: a resent answer is no violation", st)
	}
}

// TestSessionTakesOnlyTheControllersMessages: the messages of a stream
// that lost control are dropped; the controller's are checked as ever.
func TestSessionTakesOnlyTheControllersMessages(t *testing.T) {
	results := func(ids ...string) *completionv1.SessionRequest {
		var rs []*completionv1.ToolResultBlock
		for _, id := range ids {
			rs = append(rs, &completionv1.ToolResultBlock{ToolUseId: id})
		}
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{Results: rs}}}
	}
	tests := []struct {
		name      string
		gen       uint64 // of the stream the message comes from; the controller is 2
		msg       *completionv1.SessionRequest
		more      bool     // the stream may send more
		taken     []string // the results that reach the driver
		violation bool
	}{
		{name: "from the controller", gen: 2, msg: results("new"), more: true, taken: []string{"new"}},
		{name: "from a displaced stream", gen: 1, msg: results("new")},
		{name: "resent after the takeover", gen: 2, msg: results("old"), more: true},
		{name: "resent with a new one", gen: 2, msg: results("old", "new"), more: true, taken: []string{"new"}},
		{name: "answered twice by the controller", gen: 2, msg: results("new", "new"), violation: true},
		{name: "a late resume", gen: 2, msg: resumeMsg("c", 0), violation: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cancelled := false
			s := newSession(func(error) { cancelled = true }, time.Minute, false)
			s.register(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_ToolCall{ToolCall: &completionv1.ToolCall{Id: "old"}}})
			s.takeControl(t.Context())
			if !s.takeFrom(1, results("old")) {
				t.Fatal("the first controller's answer was refused")
			}
			<-s.in
			s.register(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_ToolCall{ToolCall: &completionv1.ToolCall{Id: "new"}}})
			s.takeControl(t.Context())
			more := s.takeFrom(tt.gen, tt.msg)
			var taken []string
			if len(s.in) > 0 {
				for _, r := range (<-s.in).GetToolResults().GetResults() {
					taken = append(taken, r.GetToolUseId())
				}
			}
			if more != tt.more || !slices.Equal(taken, tt.taken) || (s.violation != "") != tt.violation || cancelled != tt.violation {
				t.Errorf("more %v, taken %v, violation %q; want %v, %v, violation %v", more, taken, s.violation, tt.more, tt.taken, tt.violation)
			}
		})
	}
}

// TestSessionResumeRefusals: what a resume that cannot take control gets.
func TestSessionResumeRefusals(t *testing.T) {
	e, _ := authEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ops := bearer(ctx, "Bearer ops-secret-key")
	streamed, _ := e.streamAllCtx(t, ops, resumable(time.Minute))
	plain := openSession(t, ops, e.client, startMsg(sessionStart("")))
	plainRes, _ := finish(t, nil, plain)
	ended := openSession(t, ops, e.client, startMsg(resumableStart("", time.Minute)))
	endedRes, _ := finish(t, nil, ended)
	if plainRes == nil || endedRes == nil || len(streamed) == 0 {
		t.Fatal("the completions to resume did not end")
	}
	endedID, endedLast := last(ended.events)
	tests := []struct {
		name   string
		ctx    context.Context
		id     string
		after  uint64
		want   codes.Code
		field  string // of the field violation, for INVALID_ARGUMENT
		events int
	}{
		{name: "unknown id", ctx: ops, id: "cmpl_nope", want: codes.NotFound},
		{name: "empty id", ctx: ops, want: codes.InvalidArgument, field: "resume.completion_id"},
		{name: "beyond the last", ctx: ops, id: endedID, after: endedLast + 1, want: codes.OutOfRange},
		{name: "another key", ctx: bearer(ctx, "Bearer narrow-secret-key"), id: endedID, want: codes.PermissionDenied},
		{name: "a Stream", ctx: ops, id: streamed[0].GetStarted().GetCompletionId(), want: codes.InvalidArgument, field: "resume.completion_id"},
		{name: "a Session without a grace", ctx: ops, id: plain.events[0].GetStarted().GetCompletionId(), want: codes.InvalidArgument, field: "resume.completion_id"},
		{name: "an ended Session replays", ctx: ops, id: endedID, after: 1, want: codes.OK, events: len(ended.events) - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSession(t, tt.ctx, e.client, resumeMsg(tt.id, tt.after))
			s.until(func(*completionv1.CompletionEvent) bool { return false })
			st := statusOf(s.status)
			if isEOF(s.status) {
				st = statusOf(nil)
			}
			if st.Code() != tt.want || len(s.events) != tt.events {
				t.Fatalf("got %d events, %v; want %d events, %v", len(s.events), st, tt.events, tt.want)
			}
			if tt.field != "" && !hasViolation(st.Details(), tt.field) {
				t.Errorf("status %v lacks a violation of %s", st.Details(), tt.field)
			}
		})
	}
}

// TestAttachEndsWithTheCompletionsStatus: Attach, and a Session resume of
// an ended Session, end with the very status the completion's own stream
// ended with: code, message and details.
func TestAttachEndsWithTheCompletionsStatus(t *testing.T) {
	env := newTestEnv(t)
	noFallback := func(script string) *completionv1.CompleteRequest {
		r := faults(script)
		r.Policy = &completionv1.Policy{MaxRetries: ptr(int32(0)), DisableFallback: true}
		return r
	}
	tests := []struct {
		name string
		req  *completionv1.CompleteRequest
		want codes.Code
	}{
		{"completed", faults("ok"), codes.OK},
		{"content filter", faults("content_filter"), codes.FailedPrecondition},
		{"outage, retryable", noFallback("server_error"), codes.Unavailable},
		{"rate limited over the ceiling", noFallback("rate_limit=10m"), codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, session := range []bool{false, true} {
				own, attached := ownAndAttached(t, env, tt.req, session)
				if own.Code() != tt.want {
					t.Fatalf("session %v: the stream ended %v, want %v", session, own, tt.want)
				}
				if !proto.Equal(own.Proto(), attached.Proto()) {
					t.Errorf("session %v: attach ended %v %v, the stream %v %v", session, attached, attached.Details(), own, own.Details())
				}
			}
		})
	}
}

// ownAndAttached runs req as a Stream (or a resumable Session) to its end
// and returns its status, and the status of an Attach (or a Session resume)
// that replays it.
func ownAndAttached(t *testing.T, env *testEnv, req *completionv1.CompleteRequest, session bool) (own, attached *status.Status) {
	t.Helper()
	req = proto.Clone(req).(*completionv1.CompleteRequest)
	if !session {
		evs, st := env.streamAll(t, req)
		_, attached = attachAll(t.Context(), env.client, evs[0].GetStarted().GetCompletionId(), 0)
		return st, attached
	}
	req.ResumeGrace = durationpb.New(time.Minute)
	s := openSession(t, t.Context(), env.client, startMsg(&completionv1.SessionStart{Request: req}))
	_, own = finish(t, nil, s)
	id, _ := last(s.events)
	r := openSession(t, t.Context(), env.client, resumeMsg(id, 0))
	_, attached = finish(t, nil, r)
	return own, attached
}

// TestSessionGraceExpiry: a resumable Session nobody reconnects to within
// its grace is cancelled where it is — its upstream call stopped while
// streaming, no further call while it awaits a tool result — and its log
// ends with the matching terminal transition and CANCELLED.
func TestSessionGraceExpiry(t *testing.T) {
	tests := []struct {
		name   string
		script string
		until  func(*completionv1.CompletionEvent) bool
		want   string
	}{
		{"streaming", "", func(ev *completionv1.CompletionEvent) bool { return ev.GetDelta() != nil }, "ABORTED_STREAMING"},
		{"awaiting a tool result", "tool_use", func(ev *completionv1.CompletionEvent) bool { return ev.GetToolCall() != nil }, "ABORTED_TOOLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, g := gatedEnv(t)
			g.after = 1000 // the tool call is not held
			if tt.want == "ABORTED_STREAMING" {
				g.after = 3
			}
			ctx, cut := context.WithCancel(t.Context())
			s := openSession(t, ctx, e.client, startMsg(resumableStart(tt.script, 10*time.Millisecond)))
			s.until(tt.until)
			cut()
			if tt.want == "ABORTED_STREAMING" {
				<-g.cancelled // the upstream call was cancelled
			}
			id, _ := last(s.events)
			evs := waitEnded(t, e.grpc.Completion.log, id)
			if tr := transitions(evs); len(tr) == 0 || tr[len(tr)-1] != tt.want {
				t.Fatalf("transitions %v, want ending %s", tr, tt.want)
			}
			if n := e.upstream.calls.Load(); n != 1 {
				t.Errorf("upstream calls = %d, want 1", n)
			}
			if _, st := attachAll(t.Context(), e.client, id, 0); st.Code() != codes.Canceled || errorInfo(st).GetReason() != tt.want {
				t.Errorf("attach ended %v, want CANCELLED with %s", st, tt.want)
			}
		})
	}
}

// TestSessionCallerWaitWhileNobodyIsConnected: the caller wait bounds a
// resumable Session's wait for a tool result whether or not anybody is
// connected: with a long grace and nobody there, it ends ABORTED_TOOLS,
// DEADLINE_EXCEEDED.
func TestSessionCallerWaitWhileNobodyIsConnected(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.CallerWait = 50 * time.Millisecond })
	ctx, cut := context.WithCancel(t.Context())
	s := openSession(t, ctx, env.client, startMsg(resumableStart("tool_use", time.Minute)))
	s.toolCall()
	cut()
	id, _ := last(s.events)
	waitEnded(t, env.grpc.Completion.log, id)
	if _, st := attachAll(t.Context(), env.client, id, 0); st.Code() != codes.DeadlineExceeded || errorInfo(st).GetReason() != "ABORTED_TOOLS" {
		t.Errorf("attach ended %v, want DEADLINE_EXCEEDED with ABORTED_TOOLS", st)
	}
}

// TestDrainStillAnswersAttach: a draining server refuses new completions
// (UNAVAILABLE, DRAINING, RetryInfo) but answers Attach and Session resume
// — of running and of ended completions — until its completions have
// ended; then the drain ends.
func TestDrainStillAnswersAttach(t *testing.T) {
	e, g := gatedEnv(t)
	done, _ := e.streamAll(t, faults("short=2")) // under the gate's 3 tokens
	ended := e.session(t, resumableStart("short=2", time.Minute))
	finish(t, nil, ended)
	seen := cutResumable(t, e)

	drained := startDrain(t, e)
	refusedWhileDraining(t, e)
	if _, st := attachAll(t.Context(), e.client, done[0].GetStarted().GetCompletionId(), 0); st.Code() != codes.OK {
		t.Errorf("attach to an ended Stream while draining: %v", st)
	}
	if _, st := finish(t, nil, openSession(t, t.Context(), e.client, resumeMsg(ended.events[0].GetStarted().GetCompletionId(), 0))); st.Code() != codes.OK {
		t.Errorf("resume of an ended Session while draining: %v", st)
	}
	select {
	case <-drained:
		t.Fatal("the drain ended while a completion ran")
	default:
	}
	id, seq := last(seen)
	at, err := e.client.Attach(t.Context(), &completionv1.AttachRequest{CompletionId: id, AfterSeq: seq - 1})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := at.Recv(); err != nil || ev.GetSeq() != seq { // attached
		t.Fatalf("attach to the running completion while draining: %v %v", ev, err)
	}
	close(g.open)
	rest, st := recvAll(at.Recv)
	if checkContract(t, append(seen, rest...), st); st.Code() != codes.OK {
		t.Errorf("the attacher of the running completion ended %v", st)
	}
	<-drained
}

// TestDrainTimeoutEndsAttachersTyped: a completion still running when the
// drain times out ends as ever — ABORTED_STREAMING, UNAVAILABLE with
// RetryInfo — and its attachers end with the same status.
func TestDrainTimeoutEndsAttachersTyped(t *testing.T) {
	e, _ := gatedEnv(t)
	seen := cutResumable(t, e)
	id, seq := last(seen)
	at, err := e.client.Attach(t.Context(), &completionv1.AttachRequest{CompletionId: id})
	if err != nil {
		t.Fatal(err)
	}
	first, err := at.Recv() // attached: the replay has begun
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	drained := make(chan struct{})
	go func() { e.grpc.Drain(ctx); close(drained) }()
	rest, st := recvAll(at.Recv)
	res := checkContract(t, append([]*completionv1.CompletionEvent{first}, rest...), st)
	if st.Code() != codes.Unavailable || retryInfo(st) == nil || res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_STREAMING {
		t.Errorf("the attacher ended %v (%v), want UNAVAILABLE with RetryInfo, ABORTED_STREAMING", st, res.GetReason())
	}
	if len(rest) < int(seq) {
		t.Errorf("the attacher got %d events after the first, want at least the %d replayed", len(rest), seq-1)
	}
	<-drained
}

// cutResumable starts a Stream with a grace on e (gated: its upstream call
// holds after a few tokens), receives it to its first delta, and drops it.
func cutResumable(t *testing.T, e *testEnv) []*completionv1.CompletionEvent {
	t.Helper()
	ctx, cut := context.WithCancel(t.Context())
	defer cut()
	st, err := e.client.Stream(ctx, resumable(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return recvUntilDelta(t, st)
}

// startDrain drains e's server in the background, and returns once the
// drain refuses new completions (a Stream sent before that would run,
// and hold on the gated upstream), with a channel closed when Drain
// returns.
func startDrain(t *testing.T, e *testEnv) <-chan struct{} {
	t.Helper()
	drained := make(chan struct{})
	go func() { e.grpc.Drain(t.Context()); close(drained) }()
	r := &e.grpc.Completion.running
	select {
	case <-pollUntil(t.Context(), func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.draining }):
	case <-drained:
		t.Fatal("the drain ended while a completion ran")
	}
	return drained
}

// refusedWhileDraining checks that a new Stream, Complete and Session are
// refused UNAVAILABLE with ErrorInfo DRAINING and RetryInfo.
func refusedWhileDraining(t *testing.T, e *testEnv) {
	t.Helper()
	_, streamSt := e.streamAll(t, faults("ok"))
	_, err := e.client.Complete(t.Context(), faults("ok"))
	s := e.session(t, sessionStart(""))
	s.until(func(*completionv1.CompletionEvent) bool { return false })
	for name, st := range map[string]*status.Status{"Stream": streamSt, "Complete": statusOf(err), "Session": statusOf(s.status)} {
		if st.Code() != codes.Unavailable || errorInfo(st).GetReason() != reasonDraining || retryInfo(st) == nil {
			t.Errorf("%s while draining: %v %v, want UNAVAILABLE, DRAINING, RetryInfo", name, st, st.Details())
		}
	}
}

// TestResumableSessionLogFull: a resumable Session the event log has no
// room for is refused, since it could not be resumed; one without a grace
// runs unlogged.
func TestResumableSessionLogFull(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.EventLog.MaxCompletions = 1 })
	if err := env.grpc.Completion.log.Open("cmpl_running", fleet.Meta{}); err != nil { // a live log fills it
		t.Fatal(err)
	}
	s := env.session(t, resumableStart("", time.Minute))
	s.until(func(*completionv1.CompletionEvent) bool { return false })
	if st := statusOf(s.status); st.Code() != codes.Unavailable || errorInfo(st).GetReason() != reasonLogFull || retryInfo(st) == nil {
		t.Errorf("status %v, want UNAVAILABLE, EVENT_LOG_FULL, RetryInfo", st)
	}
	if _, code := env.session(t, sessionStart("")).end(); code != codes.OK {
		t.Errorf("a Session without a grace: %v, want OK", code)
	}
}

// TestResumableSessionRunsAsAPlainOne: with nobody leaving, a Session with
// a grace runs the same turns, with the same status, as one without.
func TestResumableSessionRunsAsAPlainOne(t *testing.T) {
	env := newTestEnv(t)
	hook := func(st *completionv1.SessionStart) { st.StopHook = true }
	for _, start := range []*completionv1.SessionStart{sessionStart("tool_use,tool_use"), sessionStart("", hook)} {
		plain := env.session(t, start)
		graced := proto.Clone(start).(*completionv1.SessionStart)
		graced.Request.ResumeGrace = durationpb.New(time.Minute)
		resumableRun := env.session(t, graced)
		var got [2][]string
		for i, s := range []*sessionClient{plain, resumableRun} {
			for ev := s.until(asks); ev != nil; ev = s.until(asks) {
				if c := ev.GetToolCall(); c != nil {
					s.answer(c.GetId(), "42", false)
				} else {
					s.verdict(ev.GetStopHookRequest().GetHookId(), completionv1.Verdict_VERDICT_ALLOW, "")
				}
			}
			_, st := finish(t, nil, s)
			got[i] = append(transitions(s.events), st.Code().String())
		}
		if !slices.Equal(got[0], got[1]) {
			t.Errorf("without a grace %v, with one %v", got[0], got[1])
		}
	}
}

// asks is an event that asks the caller for an answer.
func asks(ev *completionv1.CompletionEvent) bool {
	return ev.GetToolCall() != nil || ev.GetStopHookRequest() != nil
}

// panickingProvider panics in every call, as a bug in a provider would.
type panickingProvider struct{ provider.Provider }

func (panickingProvider) Stream(context.Context, *provider.Request, func(provider.Chunk) error) (provider.Finish, error) {
	panic("a bug in the provider")
}

// TestResumableSessionPanicEndsInternal: a panic in a resumable Session's
// completion, which runs outside any RPC, does not end the process: its
// stream (and anybody attached) ends INTERNAL.
func TestResumableSessionPanicEndsInternal(t *testing.T) {
	env := newTestEnv(t, func(c *Config) {
		for _, r := range c.Routes {
			r.Upstream = panickingProvider{r.Upstream}
		}
	})
	s := env.session(t, resumableStart("", time.Minute))
	s.until(func(*completionv1.CompletionEvent) bool { return false })
	if st := statusOf(s.status); st.Code() != codes.Internal {
		t.Fatalf("status %v, want INTERNAL", st)
	}
	if _, st := attachAll(t.Context(), env.client, s.events[0].GetStarted().GetCompletionId(), 0); st.Code() != codes.Internal {
		t.Errorf("attach ended %v, want INTERNAL", st)
	}
}
