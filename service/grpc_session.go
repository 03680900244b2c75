package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/driver"
	"github.com/completiond/completiond/recovery"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Causes of a Session's cancellation, read back when the status is chosen.
var (
	errCallerCancelled = errors.New("caller sent cancel")
	errProtocol        = errors.New("session protocol violation")
)

// Session runs a multi-turn completion with client-run tools and stop hooks.
// Its first message, the start or a resume, must arrive within
// Config.SessionStartWait: a Session that stays silent longer ends
// DEADLINE_EXCEEDED, as one whose caller does not answer a tool call in
// time does. A start with a resume grace runs as sessionResumable says; a
// resume takes control of such a Session (grpc_resume.go).
func (s *Server) Session(stream grpc.BidiStreamingServer[completionv1.SessionRequest, completionv1.CompletionEvent]) error {
	first, err := s.recvStart(stream)
	notFirst := violations{{Field: "start", Description: "the first message must be start or resume"}}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return invalidArgument(notFirst)
		}
		return err
	}
	if r := first.GetResume(); r != nil {
		return s.resumeSession(stream, r)
	}
	start := first.GetStart()
	if start == nil {
		return invalidArgument(notFirst)
	}
	v, schema := s.cfg.validateFor(stream.Context(), start.GetRequest())
	if n := start.GetMaxTurns(); n < 0 {
		v.add("max_turns", "must not be negative, got %d", n)
	}
	if len(v) > 0 {
		return invalidArgument(v)
	}
	claim, err := s.claimKey(stream.Context(), start.GetRequest(), requestDigest(start, start.GetRequest()))
	if a, ok := errors.AsType[*errAttach](err); ok {
		return s.attachSession(stream, a.id)
	}
	if err != nil {
		return err
	}
	stream = claimStream{stream, withClaim(stream.Context(), claim)} // for admit
	if g := start.GetRequest().GetResumeGrace().AsDuration(); g > 0 {
		return s.sessionResumable(stream, start, schema, g)
	}
	ctx, cancel := s.completionContextCause(stream.Context())
	defer cancel(context.Canceled)
	sess := newSession(cancel, s.cfg.CallerWait, start.GetStopHook())
	sess.stream = stream
	sp, _, err := s.sessionSpec(ctx, start, schema, sess, sess.send)
	if err != nil {
		claim.forget(ctx, s)
		return err
	}
	c := driver.New(sp)
	go sess.read()
	_, _ = c.Run(ctx) // a caller gone meanwhile receives nothing: the status concluded stands, in the log too
	return c.Conclusion().Err
}

// sessionSpec is the spec of the completion of a Session whose caller's
// side is sess. Its status also says whether the caller broke the protocol
// or did not answer in time.
func (s *Server) sessionSpec(ctx context.Context, start *completionv1.SessionStart, schema *jsonschema.Schema, sess *session, send func(*completionv1.CompletionEvent) error) (driver.Spec, acquired, error) {
	sp, lease, err := s.specify(ctx, "", start.GetRequest(), schema, start, send)
	if err != nil {
		return driver.Spec{}, acquired{}, err
	}
	s.asSession(ctx, &sp, start, sess)
	return sp, lease, nil
}

// asSession makes sp the spec of the completion of the Session started by
// start, whose caller's side is sess.
func (s *Server) asSession(ctx context.Context, sp *driver.Spec, start *completionv1.SessionStart, sess *session) {
	sp.Machine.Session = true
	sp.Machine.StopHook = sp.Machine.StopHook || start.GetStopHook()
	sp.Caller = sess
	sess.id = sp.ID
	sp.Conclude = func(r *recovery.Result) driver.Conclusion {
		e := s.ending(ctx, r)
		if kb, ok := sp.Budget.(*keyBudget); ok {
			e.budgetEnd = kb.end()
		}
		sess.mu.Lock()
		e.violation, e.callerTimedOut = sess.violation, sess.timedOut
		sess.mu.Unlock()
		return conclusion(endStatus(e))
	}
}

// recvStart receives a Session's first message, waiting at most
// SessionStartWait, and no longer than the server runs: a drain that times
// out ends a Session that has not started UNAVAILABLE. The receive runs on
// a goroutine of its own, which ends when the handler returns (gRPC then
// ends the stream, and Recv with it).
func (s *Server) recvStart(stream grpc.BidiStreamingServer[completionv1.SessionRequest, completionv1.CompletionEvent]) (*completionv1.SessionRequest, error) {
	type received struct {
		msg *completionv1.SessionRequest
		err error
	}
	got := make(chan received, 1)
	go func() {
		msg, err := stream.Recv()
		got <- received{msg, err}
	}()
	timer := time.NewTimer(s.cfg.SessionStartWait)
	defer timer.Stop()
	select {
	case r := <-got:
		return r.msg, r.err
	case <-timer.C:
		return nil, startTimeoutStatus(s.cfg.SessionStartWait)
	case <-s.aborted.Done():
		return nil, abortedBeforeStartStatus()
	}
}

// session is the caller's side of a Session: it reads the caller's messages
// and answers the driver's requests for tool results and verdicts. A
// resumable Session reads them from whichever stream controls it
// (grpc_resume.go); the others from their one stream.
type session struct {
	stream      grpc.BidiStreamingServer[completionv1.SessionRequest, completionv1.CompletionEvent] // nil when resumable
	id          string                                                                              // the completion's
	cancel      context.CancelCauseFunc
	wait        time.Duration
	in          chan *completionv1.SessionRequest // tool results and verdicts, in order
	hookEnabled bool

	mu        sync.Mutex
	calls     map[string]bool // tool calls sent to the caller: id → answered
	hooks     map[string]bool // stop-hook requests sent: id → answered
	hookSeq   int
	violation string
	timedOut  bool

	control control // who may answer, when resumable
}

func newSession(cancel context.CancelCauseFunc, wait time.Duration, hook bool) *session {
	return &session{cancel: cancel, wait: wait, in: make(chan *completionv1.SessionRequest, 16),
		calls: map[string]bool{}, hooks: map[string]bool{}, hookEnabled: hook}
}

// send registers what the caller may answer before the caller can see it.
func (s *session) send(ev *completionv1.CompletionEvent) error {
	s.register(ev)
	return s.stream.Send(ev)
}

// register records a tool call or stop-hook request ev as awaiting the
// caller's answer.
func (s *session) register(ev *completionv1.CompletionEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tc := ev.GetToolCall(); tc != nil {
		s.calls[tc.GetId()] = false
	}
	if hr := ev.GetStopHookRequest(); hr != nil {
		s.hooks[hr.GetHookId()] = false
	}
}

// recall sets up the caller's side of a Session this replica takes over
// from its log evs and last checkpoint ck (nil without one): the calls and
// stop-hook requests the log shows are known, and answered but for the
// calls ck awaits, so that a caller resending an answer after its resume
// is not taken for a violation; the hook ids go on from the last one.
func (s *session) recall(evs []*completionv1.CompletionEvent, ck *driver.Checkpoint) {
	hooks := 0
	for _, ev := range evs {
		s.register(ev)
		if ev.GetStopHookRequest() != nil {
			hooks++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.calls {
		s.calls[id] = true
	}
	for id := range s.hooks {
		s.hooks[id] = true
	}
	if ck == nil {
		s.hookSeq = hooks
		return
	}
	s.hookSeq = max(hooks, ck.Hooks)
	if ck.Machine.Phase == recovery.SnapshotAwaitTools {
		for _, c := range ck.Machine.Tools {
			s.calls[c.ID] = false
		}
	}
}

// read forwards the caller's messages until the stream ends. Cancels and
// violations take effect at once, whatever the driver is doing.
func (s *session) read() {
	defer close(s.in)
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			return // EOF: the caller will send nothing more; a waiting driver sees in closed
		}
		if !s.take(msg) {
			return
		}
	}
}

// take handles one message of the caller: a violation or a cancel takes
// effect at once; tool results and verdicts go to the driver. It reports
// whether the caller may send more.
func (s *session) take(msg *completionv1.SessionRequest) bool {
	if bad := s.check(msg); bad != "" {
		s.fail(bad)
		return false
	}
	if msg.GetCancel() != nil {
		s.cancel(errCallerCancelled)
		return false
	}
	select {
	case s.in <- msg:
		return true
	default:
		s.fail("too many messages nobody asked for")
		return false
	}
}

// check returns a protocol violation in msg, or "".
func (s *session) check(msg *completionv1.SessionRequest) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m := msg.GetRequest().(type) {
	case *completionv1.SessionRequest_Start:
		return "start may be sent only once"
	case *completionv1.SessionRequest_Resume:
		return "resume may only be the first message"
	case *completionv1.SessionRequest_ToolResults:
		for _, r := range m.ToolResults.GetResults() {
			answered, known := s.calls[r.GetToolUseId()]
			switch {
			case !known:
				return fmt.Sprintf("tool result for unknown call %q", r.GetToolUseId())
			case answered:
				return fmt.Sprintf("second tool result for call %q", r.GetToolUseId())
			}
			s.calls[r.GetToolUseId()] = true
		}
	case *completionv1.SessionRequest_StopHookVerdict:
		answered, known := s.hooks[m.StopHookVerdict.GetHookId()]
		if !known || answered {
			return fmt.Sprintf("verdict for hook %q, which nobody asked for", m.StopHookVerdict.GetHookId())
		}
		if v := m.StopHookVerdict.GetVerdict(); convert.ToVerdict(v) == 0 {
			return fmt.Sprintf("verdict %v is not one of ALLOW, BLOCK, PREVENT", v)
		}
		s.hooks[m.StopHookVerdict.GetHookId()] = true
	case nil:
		return "empty message"
	}
	return ""
}

func (s *session) fail(why string) {
	s.mu.Lock()
	if s.violation == "" {
		s.violation = why
	}
	s.mu.Unlock()
	s.cancel(errProtocol)
}

// AwaitTools waits until every pending call has a result.
func (s *session) AwaitTools(ctx context.Context, a recovery.Action) recovery.Event {
	pending := map[string]bool{}
	for _, c := range a.ToolCalls {
		pending[c.ID] = true
	}
	var results []recovery.Block
	timer := time.NewTimer(s.wait)
	defer timer.Stop()
	for len(pending) > 0 {
		msg, ev, ok := s.next(ctx, timer, "tool results")
		if !ok {
			return ev
		}
		if msg.GetToolResults() == nil {
			s.fail("a verdict arrived while tool results were awaited")
			return cancelled("protocol violation")
		}
		for _, r := range msg.GetToolResults().GetResults() {
			if !pending[r.GetToolUseId()] {
				s.fail(fmt.Sprintf("tool result for call %q, which is not pending", r.GetToolUseId()))
				return cancelled("protocol violation")
			}
			delete(pending, r.GetToolUseId())
			results = append(results, convert.ToToolResult(r))
		}
	}
	return recovery.Event{Kind: recovery.EvToolResults, Results: results}
}

// hooksSent is how many stop-hook requests the Session has sent (or,
// after a takeover, its log and checkpoint say it had).
func (s *session) hooksSent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hookSeq
}

// AwaitStopHook asks the caller for a verdict when it registered as a hook.
func (s *session) AwaitStopHook(ctx context.Context, a recovery.Action, ask func(*completionv1.CompletionEvent) bool) recovery.Event {
	if !s.hookEnabled {
		return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: recovery.VerdictAllow}
	}
	s.mu.Lock()
	s.hookSeq++
	id := "hook_" + strconv.Itoa(s.hookSeq)
	s.mu.Unlock()
	req := &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_StopHookRequest{
		StopHookRequest: &completionv1.StopHookRequest{HookId: id, Answer: convert.FromMessage(a.Answer)}}}
	if !ask(req) {
		return cancelled("caller went away")
	}
	timer := time.NewTimer(s.wait)
	defer timer.Stop()
	msg, ev, ok := s.next(ctx, timer, "a stop-hook verdict")
	if !ok {
		return ev
	}
	v := msg.GetStopHookVerdict()
	if v == nil || v.GetHookId() != id {
		s.fail("tool results arrived while a stop-hook verdict was awaited")
		return cancelled("protocol violation")
	}
	return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: convert.ToVerdict(v.GetVerdict()), VerdictMessage: v.GetMessage()}
}

// next waits for the caller's next message, the caller's departure, or the wait limit.
func (s *session) next(ctx context.Context, timer *time.Timer, what string) (*completionv1.SessionRequest, recovery.Event, bool) {
	select {
	case msg, ok := <-s.in:
		if !ok {
			return nil, cancelled("caller closed its stream while " + what + " were awaited"), false
		}
		return msg, recovery.Event{}, true
	case <-ctx.Done():
		return nil, cancelled(context.Cause(ctx).Error()), false
	case <-timer.C:
		s.mu.Lock()
		s.timedOut = true
		s.mu.Unlock()
		return nil, cancelled(fmt.Sprintf("no %s within %s", what, s.wait)), false
	}
}

func cancelled(why string) recovery.Event {
	return recovery.Event{Kind: recovery.EvCancelled, Reason: why}
}
