package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/driver"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// errTakenOver is the cause that ends a controlling stream when a newer
// caller resumes its Session.
var errTakenOver = errors.New("another caller resumed the Session")

// sessionStream is the server's side of a Session RPC.
type sessionStream = grpc.BidiStreamingServer[completionv1.SessionRequest, completionv1.CompletionEvent]

// sessionResumable runs a Session started with a resume grace. Its
// completion runs on a goroutine of its own, on a context detached from the
// RPC's (it keeps the deadline and is still cancelled when the server
// aborts), so that it outlives the stream that started it: the events go to
// the log, which that stream follows as every later controller does
// (controlFrom). Once nobody is connected for the grace, the completion is
// cancelled (ABORTED_STREAMING or ABORTED_TOOLS); the caller wait applies
// whether anybody is connected or not.
//
// The handler returns when the completion ends, or at once when another
// caller takes control: until then it keeps the completion counted in the
// server's limits, as a Stream with a grace does.
func (s *Server) sessionResumable(stream sessionStream, start *completionv1.SessionStart, schema *jsonschema.Schema, grace time.Duration) error {
	ctx, cancel := s.detachedContext(stream.Context())
	sess := newSession(cancel, s.cfg.CallerWait, start.GetStopHook())
	sp, lease, err := s.sessionSpec(ctx, start, schema, sess, func(*completionv1.CompletionEvent) error { return nil })
	if err != nil {
		claimFrom(ctx).forget(ctx, s)
		cancel(context.Canceled)
		return err
	}
	sp.Observe = sess.register // before the log: a caller may answer what it reads there
	o := s.own(ctx, &sp, lease, cancel)
	c := driver.New(sp)
	leave, end := s.holds.start(c.ID(), grace, cancel)
	s.sessions.add(c.ID(), sess)
	rpc, release := withoutDeadline(stream.Context())
	defer release()
	ctl := sess.takeControl(rpc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel(context.Canceled)
		defer end()
		defer s.disown(c.ID(), o)
		s.runDetached(ctx, c)
	}()
	err = s.controlFromStart(stream, sess, ctl, leave)
	select {
	case <-done:
	case <-ctl.displaced:
	}
	return err
}

// withoutDeadline is ctx, cancelled when ctx is, but not when ctx's
// deadline passes. The stream that started a resumable Session follows it
// past the RPC's deadline, which is the completion's too: the completion
// ends then, and the stream sends that end (ABORTED_*, DEADLINE_EXCEEDED
// with ErrorInfo) as a Stream's handler would, unless its transport has
// gone, which fails the send. release stops watching ctx.
func withoutDeadline(ctx context.Context) (_ context.Context, release func()) {
	out, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel(context.Cause(ctx))
		}
	})
	return out, func() {
		stop()
		cancel(context.Canceled)
	}
}

// runDetached runs a resumable Session's completion, which no RPC's panic
// recovery covers: a panic is logged, as the recovery interceptor would,
// rather than end the process, and ends the log with an empty result and
// INTERNAL, so that its followers end too. The Session leaves the
// registry once its log has ended, so that a resume then finds the end
// there.
func (s *Server) runDetached(ctx context.Context, c *driver.Completion) {
	defer s.sessions.remove(c.ID())
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.ErrorContext(ctx, "panic in a resumable Session's completion", "panic", p, "completion_id", c.ID())
			c.Abort(encodeStatus(internalStatus()))
		}
	}()
	_, _ = c.Run(ctx)
}

// resumeSession serves a Session stream whose first message is a resume:
// the refusals of Attach, then INVALID_ARGUMENT for a completion that is
// not a resumable Session. A Session that has ended is replayed as Attach
// would; a running one is taken over.
func (s *Server) resumeSession(stream sessionStream, r *completionv1.SessionResume) error {
	id, after := r.GetCompletionId(), r.GetAfterSeq()
	if id == "" {
		return invalidArgument(violations{{Field: "resume.completion_id", Description: "must not be empty"}})
	}
	sess := s.sessions.get(id) // before the read: a Session leaves the registry only once its log has ended
	page, err := s.readFor(stream.Context(), id, after)
	if err != nil {
		return err
	}
	if !page.Meta.Resumable {
		return invalidArgument(violations{{Field: "resume.completion_id",
			Description: "not a Session started with a resume_grace: watch it with Attach"}})
	}
	if page.Ended {
		return s.follow(stream.Context(), id, after, page, stream.Send)
	}
	if sess == nil {
		return s.resumeElsewhere(stream, id, after, page)
	}
	leave := s.holds.join(id)
	return s.controlFrom(stream, sess, sess.takeControl(stream.Context()), after, page, leave)
}

// resumeElsewhere serves a resume of a live Session that does not run on
// this replica. In a fleet whose log keeps the Session's start, the
// replica that ran it may be dead: this one waits for its lease to lapse
// (checking at once, then every quarter lease), takes the Session over and
// gives the stream control of it. A lease still held after a lease and a
// half is being renewed — its replica is alive —: UNAVAILABLE, so that the
// caller resumes again (through the load balancer, it reaches that
// replica). Without a fleet it is UNAVAILABLE at once.
func (s *Server) resumeElsewhere(stream sessionStream, id string, after uint64, page fleet.Page) error {
	ctx := stream.Context()
	unavailable := notRunningHereStatus(id)
	if s.cfg.Leases == nil || len(page.Meta.Request) == 0 {
		return unavailable
	}
	tm := fleet.TimingOf(s.cfg.Leases)
	giveUp := s.cfg.Now().Add(tm.TakeoverWait())
	for {
		leave, err := s.takeOver(ctx, id)
		if err != nil {
			return takeoverFailedStatus(id, err)
		}
		if page, err = s.readFor(ctx, id, after); err != nil {
			if leave != nil {
				leave()
			}
			return err
		}
		if leave != nil || page.Ended {
			if sess := s.sessions.get(id); sess != nil && leave != nil && !page.Ended {
				return s.controlFrom(stream, sess, sess.takeControl(ctx), after, page, leave)
			}
			if leave != nil {
				defer leave()
			}
			return s.follow(ctx, id, after, page, stream.Send)
		}
		if s.cfg.Now().After(giveUp) {
			return unavailable
		}
		t := time.NewTimer(tm.TakeoverPoll())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return contextStatus(ctx.Err())
		}
	}
}

// controlFromStart serves the stream that started sess, from the first
// event of its log.
func (s *Server) controlFromStart(stream sessionStream, sess *session, ctl *controller, leave func()) error {
	page, err := s.log.Read(sess.id, 0)
	if err != nil {
		leave()
		return logStatus(err, sess.id, 0)
	}
	return s.controlFrom(stream, sess, ctl, 0, page, leave)
}

// controlFrom serves the stream that controls sess: its messages go to the
// Session while it is in control, and it receives the Session's events
// from page on, until the Session ends (with the Session's status), a
// newer caller takes control (SESSION_TAKEN_OVER) or the stream ends.
// leave counts the stream out of the Session's holders.
func (s *Server) controlFrom(stream sessionStream, sess *session, ctl *controller, after uint64, page fleet.Page, leave func()) error {
	defer leave()
	defer ctl.cancel(context.Canceled)
	go sess.readFrom(stream, ctl.gen)
	return s.follow(ctl.ctx, sess.id, after, page, stream.Send)
}

// control is who controls a resumable Session: the newest stream that
// started or resumed it. Only its messages are taken.
type control struct {
	mu      sync.Mutex // held while a message is taken, so that none is taken from a stream displaced meanwhile
	gen     uint64
	current *controller
	// resent are the ids of the calls and hook requests answered before
	// the current stream took control: an answer to one of them is one the
	// new caller could not know arrived, and is dropped, not a violation.
	resent map[string]bool
}

// controller is one stream's control of a Session.
type controller struct {
	gen       uint64
	ctx       context.Context // the stream's, cancelled with errTakenOver when it is displaced
	cancel    context.CancelCauseFunc
	displaced chan struct{} // closed when a newer stream takes control
}

// takeControl gives control of s to the stream of rpc, displacing the
// stream that had it.
func (s *session) takeControl(rpc context.Context) *controller {
	ctx, cancel := context.WithCancelCause(rpc)
	ctl := &controller{ctx: ctx, cancel: cancel, displaced: make(chan struct{})}
	c := &s.control
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.current; old != nil {
		old.cancel(errTakenOver)
		close(old.displaced)
	}
	c.gen++
	ctl.gen, c.current = c.gen, ctl
	c.resent = s.answered() // under c.mu: no message is taken meanwhile
	return ctl
}

// readFrom takes the messages of the stream of generation gen while it
// controls the Session. Unlike read, the stream's end does not end the
// Session's input: a later resume may answer, within the caller wait.
func (s *session) readFrom(stream sessionStream, gen uint64) {
	for {
		msg, err := stream.Recv()
		if err != nil || !s.takeFrom(gen, msg) {
			return
		}
	}
}

// takeFrom takes msg from the stream of generation gen, if it is still in
// control, without the answers it resends; it reports whether that stream
// may send more.
func (s *session) takeFrom(gen uint64, msg *completionv1.SessionRequest) bool {
	s.control.mu.Lock()
	defer s.control.mu.Unlock()
	if s.control.gen != gen {
		return false
	}
	if msg = dropResent(msg, s.control.resent); msg == nil {
		return true
	}
	return s.take(msg)
}

// answered lists the calls and hook requests answered so far.
func (s *session) answered() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := map[string]bool{}
	for id, done := range s.calls {
		if done {
			ids["call:"+id] = true
		}
	}
	for id, done := range s.hooks {
		if done {
			ids["hook:"+id] = true
		}
	}
	return ids
}

// dropResent is msg without the answers whose ids resent marks answered,
// or nil when nothing is left to take.
func dropResent(msg *completionv1.SessionRequest, resent map[string]bool) *completionv1.SessionRequest {
	switch m := msg.GetRequest().(type) {
	case *completionv1.SessionRequest_ToolResults:
		var keep []*completionv1.ToolResultBlock
		for _, r := range m.ToolResults.GetResults() {
			if !resent["call:"+r.GetToolUseId()] {
				keep = append(keep, r)
			}
		}
		switch {
		case len(keep) == 0 && len(m.ToolResults.GetResults()) > 0:
			return nil
		case len(keep) < len(m.ToolResults.GetResults()):
			return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{
				ToolResults: &completionv1.ToolResults{Results: keep}}}
		}
	case *completionv1.SessionRequest_StopHookVerdict:
		if resent["hook:"+m.StopHookVerdict.GetHookId()] {
			return nil
		}
	}
	return msg
}

// sessions are the resumable Sessions that run, by completion id.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func (r *sessions) add(id string, s *session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*session{}
	}
	r.m[id] = s
}

func (r *sessions) get(id string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

func (r *sessions) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
}
