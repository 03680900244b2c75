package service

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
)

// errCancelRequested is the cause of a completion ended by a Cancel call,
// here or carried by the fleet: the terminal transition's message says it.
var errCancelRequested = errors.New("cancelled by a Cancel call")

// errCancelWaitOver ends a Cancel's wait for the end it asked for.
var errCancelWaitOver = errors.New("the completion did not end within the cancel wait")

// defaultCancelWait is how long Cancel waits for the end it asked for,
// at least: a completion ends within milliseconds of its cancel (its
// upstream call is stopped, its wait cut), unless a provider ignores the
// cancellation.
const defaultCancelWait = 10 * time.Second

// cancelWaitFor is how long Cancel waits in a fleet with leases: long
// enough for a completion whose replica died before it heard the cancel
// to be taken over (its lease lapses within a lease; the Cancel looks
// every half lease, as a follower does) and ended by the replica that
// takes it over, or, never taken over, to be found lost with its process.
func cancelWaitFor(leases fleet.Leases) time.Duration {
	if leases == nil {
		return defaultCancelWait
	}
	return max(defaultCancelWait, 3*leases.TTL())
}

// The shape of a completion id (newID): what Cancel accepts.
const maxCompletionID = 64

var completionIDPattern = regexp.MustCompile(`^cmpl_[0-9a-f]{24}$`)

// checkCompletionID refuses an id no completion can have: empty, longer
// than maxCompletionID (not echoed), or not of newID's shape.
func checkCompletionID(field, id string) violations {
	var v violations
	switch {
	case id == "":
		v.add(field, "must not be empty")
	case len(id) > maxCompletionID:
		v.add(field, "is %d bytes, over the limit of %d", len(id), maxCompletionID)
	case !completionIDPattern.MatchString(id):
		v.add(field, "%s is not a completion id: \"cmpl_\" followed by 24 lowercase hex digits", quote(id))
	}
	return v
}

// Cancel ends a running completion as its caller's own cancel does
// (ABORTED_STREAMING, or ABORTED_TOOLS while a Session awaits its
// caller), and answers once the end is in the log, with how it ended. The
// refusals come in Attach's order: a bad id first; then the owner, before
// anything about the completion is told — another key's completion is
// NOT_FOUND exactly as an unknown id, so that ids cannot be probed —; an
// ended completion is answered as it ended, already_ended set.
//
// The cancel goes to the completion's context here when it runs here
// (cancellers), and through the fleet (Config.Redis) to the replica that
// runs it otherwise; the wait follows the log as Attach does, so that in a
// fleet a completion whose replica died is taken over (and, marked
// cancelled, ended at once by the replica that takes it over) or found
// lost. Past cancelWait, UNAVAILABLE CANCEL_PENDING: the cancel stands.
func (s *Server) Cancel(ctx context.Context, req *completionv1.CancelRequest) (*completionv1.CancelResponse, error) {
	id := req.GetCompletionId()
	if v := checkCompletionID("completion_id", id); len(v) > 0 {
		return nil, invalidArgument(v)
	}
	page, err := s.readOwned(ctx, id)
	if err != nil {
		return nil, err
	}
	after := page.Last // the end, which comes after
	if page.Ended {
		after = max(page.Last, 1) - 1 // the result, which is last
	} else if err := s.requestCancel(ctx, id); err != nil {
		return nil, err
	}
	return s.awaitEnd(ctx, id, after, page.Ended)
}

// readOwned reads the log of id for the caller of ctx, from where it
// starts: NOT_FOUND, the same status, for an unknown id and for another
// key's completion.
func (s *Server) readOwned(ctx context.Context, id string) (fleet.Page, error) {
	var page fleet.Page
	var err error
	from := uint64(0)
	for range 3 { // the head of a live log may move on between two reads
		page, err = s.log.Read(id, from)
		re, ok := errors.AsType[*fleet.RangeError](err)
		if !ok || re.First == 0 {
			break
		}
		from = re.First - 1
	}
	if err != nil {
		return fleet.Page{}, logStatus(err, id, from)
	}
	if c, ok := callerFrom(ctx); ok && c.Name != page.Meta.Owner {
		return fleet.Page{}, logStatus(fleet.ErrNotFound, id, 0)
	}
	return page, nil
}

// requestCancel asks for completion id to end: at once when it runs here,
// and through the fleet's Redis, which also marks it for a replica that
// takes it over later. A Redis that does not answer is UNAVAILABLE unless
// the completion ran here.
func (s *Server) requestCancel(ctx context.Context, id string) error {
	here := s.cancels.cancel(id, errCancelRequested)
	if s.bus == nil {
		return nil
	}
	if _, err := s.bus.Request(ctx, id); err != nil && !here {
		return logStatus(fleet.ErrUnavailable, id, 0)
	}
	return nil
}

// awaitEnd follows the log of id after after until its result, within
// cancelWait, and answers how the completion ended.
func (s *Server) awaitEnd(ctx context.Context, id string, after uint64, already bool) (*completionv1.CancelResponse, error) {
	wctx, cancel := context.WithTimeoutCause(ctx, s.cancelWait, errCancelWaitOver)
	defer cancel()
	page, err := s.log.Read(id, after)
	if err != nil {
		return nil, logStatus(err, id, after)
	}
	var result *completionv1.CompletionEvent
	end := s.follow(wctx, id, after, page, func(ev *completionv1.CompletionEvent) error {
		if ev.GetResult() != nil {
			result = ev
		}
		return nil
	})
	if result == nil {
		if ctx.Err() == nil && errors.Is(context.Cause(wctx), errCancelWaitOver) {
			return nil, cancelPendingStatus(id, s.cancelWait)
		}
		return nil, end
	}
	return &completionv1.CancelResponse{AlreadyEnded: already, Reason: result.GetResult().GetReason(),
		Code: int32(status.Code(end)), ResultSeq: result.GetSeq()}, nil
}

// cancelKey is the context key of a completion context's cancel
// (completionContextCause).
type cancelKey struct{}

// watchCancel registers completion id, about to run on ctx (a completion
// context), as one Cancel may end here, and returns the function that
// unregisters it. A completion taken over (takeover) whose fleet mark
// says a Cancel asked for its end is cancelled at once: it ends the way
// the replica that died would have ended it.
func (s *Server) watchCancel(ctx context.Context, id string, takeover bool) (unwatch func()) {
	cancel, ok := ctx.Value(cancelKey{}).(context.CancelCauseFunc)
	if !ok {
		return func() {}
	}
	unwatch = s.cancels.add(id, cancel)
	if takeover && s.bus != nil {
		if marked, err := s.bus.Requested(ctx, id); err == nil && marked {
			cancel(errCancelRequested)
		}
	}
	return unwatch
}

// cancellers are the completions that run here, by id, each with its
// context's cancel. An id usually has one; a replica that runs a
// completion it lost the lease of (finishing it for its own callers) may
// also run the one it took back.
type cancellers struct {
	mu sync.Mutex
	m  map[string][]*canceller
}

type canceller struct{ cancel context.CancelCauseFunc }

// add registers cancel for id and returns the function, idempotent, that
// unregisters it.
func (c *cancellers) add(id string, cancel context.CancelCauseFunc) func() {
	e := &canceller{cancel: cancel}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]*canceller{}
	}
	c.m[id] = append(c.m[id], e)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			rest := c.m[id][:0]
			for _, x := range c.m[id] {
				if x != e {
					rest = append(rest, x)
				}
			}
			if len(rest) == 0 {
				delete(c.m, id)
			} else {
				c.m[id] = rest
			}
		})
	}
}

// cancel cancels every run of id here with cause, and reports whether
// one ran here.
func (c *cancellers) cancel(id string, cause error) bool {
	c.mu.Lock()
	runs := append([]*canceller(nil), c.m[id]...)
	c.mu.Unlock()
	for _, e := range runs {
		e.cancel(cause)
	}
	return len(runs) > 0
}

// heard is a cancel the fleet carried here (fleet.RedisCancels): every
// replica hears it, and the one that runs id ends it.
func (c *cancellers) heard(id string) { c.cancel(id, errCancelRequested) }

// ids are the completions that run here.
func (c *cancellers) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.m))
	for id := range c.m {
		out = append(out, id)
	}
	return out
}
