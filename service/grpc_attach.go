package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
)

// errAbandoned is the cause of a completion cancelled because nobody
// attached to it within its resume grace.
var errAbandoned = errors.New("nobody attached within the resume grace")

// Attach replays a completion's events after after_seq from the event log,
// then follows the log until the result, and ends with the status the
// completion's own stream ended with. While it is attached, a completion
// started with a resume grace keeps running. A draining server still
// answers it.
func (s *Server) Attach(req *completionv1.AttachRequest, stream grpc.ServerStreamingServer[completionv1.CompletionEvent]) error {
	id, after := req.GetCompletionId(), req.GetAfterSeq()
	if id == "" {
		return invalidArgument(violations{{Field: "completion_id", Description: "must not be empty"}})
	}
	return s.attach(stream.Context(), id, after, stream.Send)
}

// attach is Attach's service of completion id after after to send, for
// the caller of ctx: also a start whose idempotency key an identical
// start holds (attachStart).
func (s *Server) attach(ctx context.Context, id string, after uint64, send func(*completionv1.CompletionEvent) error) error {
	page, err := s.readFor(ctx, id, after)
	if err != nil {
		return err
	}
	defer s.holds.join(id)()
	return s.follow(ctx, id, after, page, send)
}

// readFor reads the log of id after after for the caller of ctx:
// PERMISSION_DENIED when another key started the completion, whatever
// after is — the owner is checked before the range, so that no other key
// learns how far the completion has got —, else NOT_FOUND and
// OUT_OF_RANGE as logStatus says.
func (s *Server) readFor(ctx context.Context, id string, after uint64) (fleet.Page, error) {
	page, err := s.log.Read(id, after)
	if errors.Is(err, fleet.ErrOutOfRange) {
		if denied := s.checkOwner(ctx, id, err); denied != nil {
			return fleet.Page{}, denied
		}
	}
	if err != nil {
		return fleet.Page{}, logStatus(err, id, after)
	}
	if c, ok := callerFrom(ctx); ok && c.Name != page.Meta.Owner {
		return fleet.Page{}, notOwnerStatus(id)
	}
	return page, nil
}

// checkOwner is readFor's check of the owner of id when its read was out
// of range (rangeErr): it reads the log where it starts, which a
// RangeError names. nil when the caller of ctx may see id; otherwise the
// refusal, the same as when the range was right, or the error of a log
// that cannot say whose id is.
func (s *Server) checkOwner(ctx context.Context, id string, rangeErr error) error {
	c, ok := callerFrom(ctx)
	if !ok {
		return nil
	}
	for range 3 { // the head of a live log may move on between two reads
		from := uint64(0)
		if re, ok := errors.AsType[*fleet.RangeError](rangeErr); ok && re.First > 0 {
			from = re.First - 1
		}
		page, err := s.log.Read(id, from)
		if err == nil {
			if page.Meta.Owner != c.Name {
				return notOwnerStatus(id)
			}
			return nil
		}
		if !errors.Is(err, fleet.ErrOutOfRange) {
			return logStatus(err, id, from)
		}
		rangeErr = err
	}
	return notOwnerStatus(id) // whose it is cannot be told: say nothing more
}

// follow sends page, read from the log of id after after, then every
// event appended after it, until the log ends; it returns the status the
// completion ended with, as the log keeps it. A follower whose ctx ends
// First ends SESSION_TAKEN_OVER when a newer caller took its Session
// over, and with the context's status otherwise.
//
// In a fleet (Config.Leases), a follower of a live completion whose
// replica died takes it over (takeover.go): it looks at the lease at once
// and then every half lease while the log is silent. A completion that is
// never taken over (no resume grace) ends the follower with
// COMPLETION_LOST once the process that ran it is gone (lookAtOwner).
func (s *Server) follow(ctx context.Context, id string, after uint64, page fleet.Page, send func(*completionv1.CompletionEvent) error) error {
	first, leave, misses := true, func() {}, 0
	defer func() { leave() }()
	for {
		for _, ev := range page.Events {
			if err := send(ev); err != nil {
				return err
			}
			after = ev.GetSeq()
		}
		if page.Done() {
			return loggedStatus(page.Status)
		}
		wake, stop := s.leaseCheck(page, first)
		first = false
		done := false
		select {
		case <-page.More:
		case <-wake:
			l, err := s.lookAtOwner(ctx, id, page.Meta, &misses)
			if err != nil {
				return err
			}
			if l != nil {
				leave() // never set before: a completion is taken over once per follower
				leave = l
			}
		case <-ctx.Done():
			done = true
		}
		stop()
		if done {
			if errors.Is(context.Cause(ctx), errTakenOver) {
				return takenOverStatus()
			}
			return contextStatus(ctx.Err())
		}
		var err error
		if page, err = s.log.Read(id, after); err != nil {
			return logStatus(err, id, after)
		}
	}
}

// holds keeps the completions started with a resume grace alive while
// somebody is attached to them: the caller that started one, an attacher,
// or a stream that resumed a Session. When the last one leaves, a timer of the grace starts; if it
// fires before anybody attaches, the completion is cancelled (errAbandoned).
// No goroutine waits per completion: the timer is a time.AfterFunc.
type holds struct {
	mu sync.Mutex
	m  map[string]*hold
}

type hold struct {
	callers int
	grace   time.Duration
	timer   *time.Timer
	cancel  context.CancelCauseFunc
}

// start holds completion id, with its starting caller attached, and returns
// the function to call when that caller leaves and the one to call when the
// completion ends.
func (h *holds) start(id string, grace time.Duration, cancel context.CancelCauseFunc) (leave, end func()) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*hold{}
	}
	h.m[id] = &hold{callers: 1, grace: grace, cancel: cancel}
	h.mu.Unlock()
	return h.leaver(id), func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if c := h.m[id]; c != nil && c.timer != nil {
			c.timer.Stop()
		}
		delete(h.m, id)
	}
}

// join counts an attacher of id, if id is held, and returns the function
// to call when it leaves.
func (h *holds) join(id string) (leave func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.m[id]
	if c == nil {
		return func() {}
	}
	c.callers++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	return h.leaver(id)
}

// leaver returns a function, idempotent, that counts one caller of id out.
func (h *holds) leaver(id string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			c := h.m[id]
			if c == nil {
				return
			}
			if c.callers--; c.callers == 0 {
				c.timer = time.AfterFunc(c.grace, func() { c.cancel(errAbandoned) })
			}
		})
	}
}
