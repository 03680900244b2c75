package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Reconnect says how a Stream attaches again after its connection dropped.
// It applies to a Stream whose request has a resume_grace (the server keeps
// the completion running that long without a caller) and to Attach streams.
//
// Each pause is drawn with full jitter, uniformly between 0 and the
// backoff of that try, so that the callers of a replica that died do not
// all come back to the survivors at the same instant; a status that
// carries RetryInfo (OVERLOADED: 1 s) makes the pause at least its delay.
type Reconnect struct {
	// Backoff is the most the pause before the first attach may be; it
	// doubles on each failed one, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Window bounds how long after a drop the stream keeps trying, and is
	// further bounded by the request's resume_grace.
	Window time.Duration
	// Rand returns the fraction, in [0, 1), of the backoff a pause waits;
	// nil: math/rand/v2's Float64. Tests set it.
	Rand func() float64
}

// DefaultReconnect returns the policy a Client starts with: pauses of up
// to 50 ms, doubling to 1 s, for up to 30 s.
func DefaultReconnect() Reconnect {
	return Reconnect{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, Window: 30 * time.Second}
}

// delay is the backoff of attach number try (1-based): the longest its
// pause may be.
func (r Reconnect) delay(try int) time.Duration {
	d := r.Backoff
	for i := 1; i < try && d < r.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.MaxBackoff)
}

// wait is the pause before attach number try after a drop whose status
// asked for floor (its RetryInfo delay; 0 without): a random part of the
// backoff, at least floor.
func (r Reconnect) wait(try int, floor time.Duration) time.Duration {
	random := r.Rand
	if random == nil {
		random = rand.Float64
	}
	return max(time.Duration(random()*float64(r.delay(try))), floor)
}

// Stream is one completion's events, from Client.Stream or Client.Attach.
// It is not safe for concurrent use.
type Stream struct {
	c          *Client
	ctx        context.Context
	opts       []grpc.CallOption
	rpc        grpc.ServerStreamingClient[completionv1.CompletionEvent]
	grace      time.Duration                 // the request's resume_grace; 0: a drop ends the stream
	attachOnly bool                          // made by Client.Attach: may attach again within Reconnect.Window
	start      *completionv1.CompleteRequest // the start, with its idempotency key, sent again after a drop before started; nil for Attach

	fold     Fold
	err      error // the stream's end, once known: io.EOF or an *Error
	drop     drop  // the drop being healed; zero while events flow
	attaches int   // attaches in all
	restarts int   // starts sent again in all
}

// drop is a dropped connection being healed.
type drop struct {
	at    time.Time // when it dropped; zero while events flow
	tries int       // attaches since
}

// pause waits before the next attach after d, which cause ended, and
// returns errWindowOver, without waiting, once the window since the drop
// would be over by then.
func (r Reconnect) pause(ctx context.Context, d *drop, window time.Duration, cause error) error {
	now := time.Now()
	if d.at.IsZero() {
		d.at = now
	}
	d.tries++
	wait := r.wait(d.tries, retryDelay(cause))
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
		} else if s.start != nil && restartable(s.ctx, err, &s.fold) {
			if err = s.restart(err); err == nil {
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

// Restarts counts the times the start was sent again after a drop before
// its started event.
func (s *Stream) Restarts() int { return s.restarts }

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

// dropped reports whether err, ending a stream of f's completion, is one
// to reconnect after (the rule of docs/clients.md, which the three client
// libraries share, pinned by clients/testdata/reconnect.json): before the
// result and once the completion has an id, an end without a status (the
// stream cut) or UNAVAILABLE, with or without ErrorInfo — a transport
// drop, a replica that lost the completion's lease, Redis away, an attach
// refused as OVERLOADED. The server's word on the completion itself only
// ever follows the result; before it, UNAVAILABLE is about this
// connection or replica, and the completion's log, which an attach
// replays, is the truth. Every other code is final; so is the caller's
// own cancellation.
func dropped(ctx context.Context, err error, f *Fold) bool {
	if f.Done() || f.CompletionID() == "" || ctx.Err() != nil {
		return false
	}
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Unavailable
}

// restartable reports whether err, ending a start that f is the fold of,
// is one to send the start again after (clients/testdata/reconnect.json,
// restart): before the started event, a transport drop — the stream cut,
// or UNAVAILABLE without ErrorInfo. A refusal (any ErrorInfo) is the
// server's word and stands; so does the caller's own cancellation.
func restartable(ctx context.Context, err error, f *Fold) bool {
	if f.CompletionID() != "" || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, io.EOF) {
		return true
	}
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return false
		}
	}
	return true
}

// restart waits its backoff and sends the start again, with the same
// idempotency key: the server attaches it to the completion the first
// one began, if it did. It gives up, returning cause, once
// Reconnect.Window since the drop is over.
func (s *Stream) restart(cause error) error {
	if err := s.c.reconnect.pause(s.ctx, &s.drop, s.c.reconnect.Window, cause); err != nil {
		if errors.Is(err, errWindowOver) {
			return cause
		}
		return err
	}
	rpc, err := s.c.rpc.Stream(s.ctx, s.start, s.opts...)
	if err != nil {
		return err
	}
	s.rpc = rpc
	s.restarts++
	return nil
}

// retryDelay is the RetryInfo delay of err's status, 0 without one.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// reattach waits its backoff and calls Attach after the last seq folded.
// It gives up, returning cause, once the window since the drop is over.
func (s *Stream) reattach(cause error) error {
	window := s.c.reconnect.Window
	if !s.attachOnly {
		window = min(window, s.grace)
	}
	if err := s.c.reconnect.pause(s.ctx, &s.drop, window, cause); err != nil {
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
