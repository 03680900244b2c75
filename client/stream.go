package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Reconnect says how a Stream attaches again after its connection dropped.
// It applies to a Stream whose request has a resume_grace (the server keeps
// the completion running that long without a caller) and to Attach streams.
type Reconnect struct {
	// Backoff is the pause before the first attach; it doubles on each
	// failed one, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Window bounds how long after a drop the stream keeps trying, and is
	// further bounded by the request's resume_grace.
	Window time.Duration
}

// DefaultReconnect returns the policy a Client starts with: 50 ms doubling
// to 1 s, for up to 30 s.
func DefaultReconnect() Reconnect {
	return Reconnect{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, Window: 30 * time.Second}
}

// delay is the pause before attach number try (1-based).
func (r Reconnect) delay(try int) time.Duration {
	d := r.Backoff
	for i := 1; i < try && d < r.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.MaxBackoff)
}

// Stream is one completion's events, from Client.Stream or Client.Attach.
// It is not safe for concurrent use.
type Stream struct {
	c          *Client
	ctx        context.Context
	opts       []grpc.CallOption
	rpc        grpc.ServerStreamingClient[completionv1.CompletionEvent]
	grace      time.Duration // the request's resume_grace; 0: a drop ends the stream
	attachOnly bool          // made by Client.Attach: may attach again within Reconnect.Window

	fold     Fold
	err      error // the stream's end, once known: io.EOF or an *Error
	drop     drop  // the drop being healed; zero while events flow
	attaches int   // attaches in all
}

// drop is a dropped connection being healed.
type drop struct {
	at    time.Time // when it dropped; zero while events flow
	tries int       // attaches since
}

// pause waits before the next attach after d, and reports false, without
// waiting, once the window since the drop would be over by then.
func (r Reconnect) pause(ctx context.Context, d *drop, window time.Duration) error {
	now := time.Now()
	if d.at.IsZero() {
		d.at = now
	}
	d.tries++
	wait := r.delay(d.tries)
	if now.Add(wait).After(d.at.Add(window)) {
		return errWindowOver
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errWindowOver: the reconnect window is over; the drop's own error stands.
var errWindowOver = errors.New("reconnect window over")

// Recv returns the next event. It returns io.EOF after the result of a
// completion that ended COMPLETED, and an *Error (with the Fold's result,
// when it came) for every other end. An event already received (repeated
// by an attach) is never returned twice.
func (s *Stream) Recv() (*completionv1.CompletionEvent, error) {
	if s.err != nil {
		return nil, s.err
	}
	for {
		ev, err := s.rpc.Recv()
		if err == nil {
			if s.fold.Add(ev) {
				s.drop = drop{}
				return ev, nil
			}
			continue
		}
		if s.resumable(err) {
			if err = s.reattach(err); err == nil {
				continue
			}
		}
		s.err = s.end(err)
		return nil, s.err
	}
}

// Events yields the events, then, when the stream did not end COMPLETED,
// one (nil, *Error).
func (s *Stream) Events() iter.Seq2[*completionv1.CompletionEvent, error] {
	return func(yield func(*completionv1.CompletionEvent, error) bool) {
		for {
			ev, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Wait reads the stream to its end and returns the fold, with the *Error
// when it did not end COMPLETED.
func (s *Stream) Wait() (*Fold, error) {
	for _, err := range s.Events() {
		if err != nil {
			return &s.fold, err
		}
	}
	return &s.fold, nil
}

// Fold is the answer folded from the events received so far.
func (s *Stream) Fold() *Fold { return &s.fold }

// Attaches counts the times the stream attached again after a drop.
func (s *Stream) Attaches() int { return s.attaches }

func (s *Stream) end(err error) error {
	if errors.Is(err, io.EOF) && s.fold.Done() {
		return io.EOF
	}
	return failure(err, &s.fold)
}

// resumable reports whether err is a dropped connection of a completion
// that may be attached to again.
func (s *Stream) resumable(err error) bool {
	return (s.attachOnly || s.grace > 0) && dropped(s.ctx, err, &s.fold)
}

// dropped reports whether err, ending a stream of f's completion, is a
// lost connection rather than the server's word: the server's status only
// ever follows the result, and a completion without an id has nothing to
// attach to.
func dropped(ctx context.Context, err error, f *Fold) bool {
	if f.Done() || f.CompletionID() == "" || ctx.Err() != nil {
		return false
	}
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Unavailable
}

// reattach waits its backoff and calls Attach after the last seq folded.
// It gives up, returning cause, once the window since the drop is over.
func (s *Stream) reattach(cause error) error {
	window := s.c.reconnect.Window
	if !s.attachOnly {
		window = min(window, s.grace)
	}
	if err := s.c.reconnect.pause(s.ctx, &s.drop, window); err != nil {
		if errors.Is(err, errWindowOver) {
			return cause
		}
		return err
	}
	rpc, err := s.c.rpc.Attach(s.ctx, &completionv1.AttachRequest{CompletionId: s.fold.CompletionID(), AfterSeq: s.fold.LastSeq()}, s.opts...)
	if err != nil {
		return err
	}
	s.rpc = rpc
	s.attaches++
	return nil
}
