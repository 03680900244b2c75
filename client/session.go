package client

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// SessionHandler answers a Session's requests. Its functions run on the
// goroutine that reads the stream, one at a time, in the order the events
// arrive.
type SessionHandler struct {
	// Tool runs one tool call. A call arrives only once the attempt that
	// made it is settled, so running it at once is safe. The result's
	// tool_use_id is filled in when empty; an error is sent to the model
	// as an is_error result carrying its message. Required when the request
	// offers tools.
	Tool func(ctx context.Context, call *completionv1.ToolCall) (*completionv1.ToolResultBlock, error)
	// StopHook judges a final answer (SessionStart.stop_hook); nil allows
	// every answer. An error cancels the session.
	StopHook func(ctx context.Context, req *completionv1.StopHookRequest) (*completionv1.StopHookVerdict, error)
	// Event, when set, sees every event before it is answered. An error
	// cancels the session (see [Cancel]).
	Event func(ev *completionv1.CompletionEvent) error
}

// CancelError asks RunSession to cancel the session: returned by a
// SessionHandler function, it sends a Cancel with its reason (the
// completion then ends ABORTED_TOOLS or ABORTED_STREAMING) instead of an
// answer. Any other error of Event or StopHook cancels too, with the
// error's text as the reason; a Tool's other errors are results.
type CancelError struct {
	// Reason is recorded in the terminal transition.
	Reason string
}

// Cancel returns a *CancelError with reason.
func Cancel(reason string) error { return &CancelError{Reason: reason} }

func (e *CancelError) Error() string { return "session cancelled: " + e.Reason }

// TextTool adapts a tool that answers with text to SessionHandler.Tool.
func TextTool(run func(ctx context.Context, call *completionv1.ToolCall) (string, error)) func(context.Context, *completionv1.ToolCall) (*completionv1.ToolResultBlock, error) {
	return func(ctx context.Context, call *completionv1.ToolCall) (*completionv1.ToolResultBlock, error) {
		text, err := run(ctx, call)
		return &completionv1.ToolResultBlock{Text: text}, err
	}
}

// RunSession runs a Session to its end: it sends start, answers every tool
// call and stop-hook request with h, and returns the fold, with an *Error
// when the completion did not end COMPLETED. A Session started with a
// resume_grace survives a dropped connection: RunSession opens a new
// Session stream that resumes it after the last event received, and sends
// again the answers the server may not have received (it drops those it
// has), so the handler sees every event once.
func (c *Client) RunSession(ctx context.Context, start *completionv1.SessionStart, h SessionHandler, opts ...grpc.CallOption) (*Fold, error) {
	if start.GetRequest().GetIdempotencyKey() == "" {
		start = proto.CloneOf(start)
		start.Request = withIdempotencyKey(start.GetRequest())
	}
	s := &session{c: c, ctx: ctx, opts: opts, h: h, grace: start.GetRequest().GetResumeGrace().AsDuration(), start: start}
	err := s.open(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}})
	if err == nil {
		err = s.run()
	}
	return &s.fold, err
}

// session is one RunSession.
type session struct {
	c      *Client
	ctx    context.Context
	opts   []grpc.CallOption
	h      SessionHandler
	start  *completionv1.SessionStart // with its idempotency key: sent again after a drop before started
	grace  time.Duration              // the request's resume_grace; 0: a drop ends the session
	stream grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent]
	fold   Fold
	// unconfirmed are the answers (and a cancel) sent since the last
	// transition: the server waits for answers before it decides
	// anything, so a transition after them says they arrived.
	unconfirmed []*completionv1.SessionRequest
	// cancelled is set once a Cancel is sent: nothing is answered after it.
	cancelled bool
	drop      drop
	resumes   int
}

// open starts a Session stream whose first message is first.
func (s *session) open(first *completionv1.SessionRequest) error {
	stream, err := s.c.rpc.Session(s.ctx, s.opts...)
	if err != nil {
		return AsError(err)
	}
	s.stream = stream
	_ = s.stream.Send(first) // a failed send shows as Recv's error
	return nil
}

// run reads and answers the stream until it ends, resuming after drops.
func (s *session) run() error {
	for {
		err := s.follow()
		if errors.Is(err, io.EOF) && s.fold.Done() {
			return nil
		}
		resume := s.resume
		switch {
		case restartable(s.ctx, err, &s.fold):
			resume = s.restart
		case s.grace <= 0 || !dropped(s.ctx, err, &s.fold):
			return failure(err, &s.fold)
		}
		if rerr := resume(err); rerr != nil {
			if errors.Is(rerr, errWindowOver) {
				return failure(err, &s.fold)
			}
			return failure(rerr, &s.fold)
		}
	}
}

// follow reads the stream to its end and returns what Recv reported
// (io.EOF for OK). A Send that fails only says the stream is gone: the
// events still on their way and Recv's status tell how.
func (s *session) follow() error {
	for {
		ev, err := s.stream.Recv()
		if err != nil {
			return err
		}
		if !s.fold.Add(ev) {
			continue
		}
		s.drop = drop{}
		if ev.GetTransition() != nil {
			s.unconfirmed = nil
		}
		if !s.cancelled {
			_ = s.handle(ev)
		}
	}
}

// resume waits its backoff after the drop cause, then opens a stream that
// resumes the session after the last event folded and sends the
// unconfirmed answers again.
func (s *session) resume(cause error) error {
	if err := s.c.reconnect.pause(s.ctx, &s.drop, min(s.c.reconnect.Window, s.grace), cause); err != nil {
		return err
	}
	err := s.open(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Resume{
		Resume: &completionv1.SessionResume{CompletionId: s.fold.CompletionID(), AfterSeq: s.fold.LastSeq()}}})
	if err != nil {
		return err
	}
	s.resumes++
	for _, req := range s.unconfirmed {
		_ = s.stream.Send(req)
	}
	return nil
}

// restart waits its backoff after the drop cause, before the started
// event, then opens a stream that sends the start again, with the same
// idempotency key: the server attaches it to the Session the first one
// began, if it did.
func (s *session) restart(cause error) error {
	if err := s.c.reconnect.pause(s.ctx, &s.drop, s.c.reconnect.Window, cause); err != nil {
		return err
	}
	return s.open(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: s.start}})
}

// handle shows ev to the Event callback, then sends what ev asks of the
// caller, if anything, or the Cancel a callback asked for. After a Cancel
// the loop only reads the stream to its end.
func (s *session) handle(ev *completionv1.CompletionEvent) error {
	req, err := s.answer(ev)
	if err != nil {
		s.cancelled = true
		req = &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Cancel{Cancel: &completionv1.Cancel{Reason: cancelReason(err)}}}
	}
	if req == nil {
		return nil
	}
	s.unconfirmed = append(s.unconfirmed, req)
	return s.stream.Send(req)
}

// answer is the message ev asks for (nil when none), or the error of a
// callback that cancels.
func (s *session) answer(ev *completionv1.CompletionEvent) (*completionv1.SessionRequest, error) {
	if s.h.Event != nil {
		if err := s.h.Event(ev); err != nil {
			return nil, err
		}
	}
	switch e := ev.GetEvent().(type) {
	case *completionv1.CompletionEvent_ToolCall:
		res, err := s.runTool(e.ToolCall)
		if err != nil {
			return nil, err
		}
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{
			ToolResults: &completionv1.ToolResults{Results: []*completionv1.ToolResultBlock{res}}}}, nil
	case *completionv1.CompletionEvent_StopHookRequest:
		verdict, err := s.judge(e.StopHookRequest)
		if err != nil {
			return nil, err
		}
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{StopHookVerdict: verdict}}, nil
	}
	return nil, nil
}

func cancelReason(err error) string {
	if c, ok := errors.AsType[*CancelError](err); ok {
		return c.Reason
	}
	return err.Error()
}

// runTool runs the Tool callback; only a *CancelError is returned as an
// error, any other becomes an is_error result.
func (s *session) runTool(call *completionv1.ToolCall) (*completionv1.ToolResultBlock, error) {
	if s.h.Tool == nil {
		return &completionv1.ToolResultBlock{ToolUseId: call.GetId(), Text: "this caller runs no tools", IsError: true}, nil
	}
	res, err := s.h.Tool(s.ctx, call)
	if _, ok := errors.AsType[*CancelError](err); ok {
		return nil, err
	}
	if err != nil {
		return &completionv1.ToolResultBlock{ToolUseId: call.GetId(), Text: err.Error(), IsError: true}, nil
	}
	if res == nil {
		res = &completionv1.ToolResultBlock{}
	}
	if res.GetToolUseId() == "" {
		res.ToolUseId = call.GetId()
	}
	return res, nil
}

func (s *session) judge(req *completionv1.StopHookRequest) (*completionv1.StopHookVerdict, error) {
	if s.h.StopHook == nil {
		return &completionv1.StopHookVerdict{HookId: req.GetHookId(), Verdict: completionv1.Verdict_VERDICT_ALLOW}, nil
	}
	v, err := s.h.StopHook(s.ctx, req)
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = &completionv1.StopHookVerdict{Verdict: completionv1.Verdict_VERDICT_ALLOW}
	}
	if v.GetHookId() == "" {
		v.HookId = req.GetHookId()
	}
	return v, nil
}
