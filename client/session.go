package client

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

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
// when the completion did not end COMPLETED.
func (c *Client) RunSession(ctx context.Context, start *completionv1.SessionStart, h SessionHandler, opts ...grpc.CallOption) (*Fold, error) {
	stream, err := c.rpc.Session(ctx, opts...)
	if err != nil {
		return nil, AsError(err)
	}
	s := &session{ctx: ctx, stream: stream, h: h}
	return &s.fold, s.run(start)
}

// session is one RunSession.
type session struct {
	ctx    context.Context
	stream grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent]
	h      SessionHandler
	fold   Fold
	// received is set once Recv has reported the stream's end.
	received bool
	// cancelled is set once a Cancel is sent: nothing is answered after it.
	cancelled bool
}

func (s *session) run(start *completionv1.SessionStart) error {
	if err := s.send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}}); err != nil {
		return s.end(err)
	}
	for {
		ev, err := s.stream.Recv()
		if err != nil {
			s.received = true
			return s.end(err)
		}
		if !s.fold.Add(ev) || s.cancelled {
			continue
		}
		if err := s.handle(ev); err != nil {
			return s.end(err)
		}
	}
}

// end types the stream's end: nil after a COMPLETED result. A Send that
// fails with io.EOF only says the server has ended the stream: the events
// still on their way and the status that Recv reports tell how.
func (s *session) end(err error) error {
	for errors.Is(err, io.EOF) && !s.received {
		var ev *completionv1.CompletionEvent
		if ev, err = s.stream.Recv(); err == nil {
			s.fold.Add(ev)
			err = io.EOF
			continue
		}
		s.received = true
	}
	if errors.Is(err, io.EOF) && s.fold.Done() {
		return nil
	}
	return failure(err, &s.fold)
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
	return s.send(req)
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

func (s *session) send(req *completionv1.SessionRequest) error { return s.stream.Send(req) }
