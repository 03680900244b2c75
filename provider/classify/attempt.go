package classify

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// Attempt is the bookkeeping of one upstream call: the context the SDK runs
// under, the limits that bound it, and what the upstream answered. Its
// Middleware sits between the SDK and the HTTP client, so it sees the wire
// and not the SDK's reading of it.
//
// An Attempt is used by one goroutine (the one running the SDK call and the
// stream); only its watchdog's timer runs beside it.
type Attempt struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	dog    *watchdog // nil when no limit is set

	prefill bool // the request carries an assistant prefill

	// start is when the attempt began, on now (time.Now; tests move it):
	// what a connection failure's Silence is measured from.
	start time.Time
	now   func() time.Time

	status  int         // response status; 0 until the headers came
	header  http.Header // response headers
	errBody []byte      // body of a response with status >= 400
	body    io.Reader   // body of a response with status < 400, for Drain
}

// Begin starts an attempt under ctx, bounded by limits. End must be called.
func Begin(ctx context.Context, limits provider.Timeouts) *Attempt {
	a := &Attempt{parent: ctx, now: time.Now}
	a.start = a.now()
	a.ctx, a.cancel = context.WithCancelCause(ctx)
	if limits != (provider.Timeouts{}) {
		a.dog = newWatchdog(limits, a.cancel)
	}
	return a
}

// Context is the context to run the upstream call under; it is cancelled
// when a limit passes, when End is called, and when the caller's is.
func (a *Attempt) Context() context.Context { return a.ctx }

// End stops the limits and cancels the attempt's context, which stops the
// HTTP call at once if it is still running.
func (a *Attempt) End() {
	if a.dog != nil {
		a.dog.stop()
	}
	a.cancel(context.Canceled)
}

// Prefilled records that the request carries an assistant prefill (the
// machine's, provider.Request.Prefill). Only then is a refusal of a final
// assistant message a FailPrefillRejected, which the recovery machine
// answers by restarting without prefill; without one, the conversation the
// caller sent is what was refused, and the same answer is a
// FailInvalidRequest.
func (a *Attempt) Prefilled() { a.prefill = true }

// Token records that the first token came (a text, thinking or tool-call
// delta), which ends the first-token limit.
func (a *Attempt) Token() {
	if a.dog != nil {
		a.dog.tokenCame()
	}
}

// Emitter wraps emit, the caller's chunk callback, so that the time spent in
// it is not taken for upstream silence: while it runs the idle limit is
// suspended, and afterwards it runs from the emit's end (see the Idle limit
// in provider.Timeouts). The total limit still applies. It costs a lock and
// a clock read per chunk, no timer reset.
func (a *Attempt) Emitter(emit func(provider.Chunk) error) func(provider.Chunk) error {
	if a.dog == nil {
		return emit
	}
	return func(c provider.Chunk) error {
		a.dog.emitStarted()
		defer a.dog.emitEnded()
		return emit(c)
	}
}

// Status is the response's status, or 0 before the headers came.
func (a *Attempt) Status() int { return a.status }

// Header is the response's headers, or nil before they came.
func (a *Attempt) Header() http.Header { return a.header }

// Middleware records the response of the SDK's HTTP call. An error body is
// read here, under the attempt's limits, and handed back to the SDK intact;
// a stream's body is wrapped so that its bytes reset the idle limit. Its
// signature is the option.Middleware of both SDKs.
func (a *Attempt) Middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil {
		return res, err
	}
	a.status, a.header = res.StatusCode, res.Header
	if a.dog != nil {
		a.dog.headersCame()
	}
	if res.StatusCode >= 400 {
		a.errBody = readErrorBody(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(a.errBody))
		return res, nil
	}
	if a.dog != nil {
		res.Body = &activityBody{ReadCloser: res.Body, dog: a.dog}
	}
	a.body = res.Body
	return res, nil
}

// drainLimit and drainWait bound Drain: what normally follows the end of an
// answer is a terminator of a few bytes ([DONE], the chunked encoding's last
// chunk), sent at once.
const (
	drainLimit = 4 << 10
	drainWait  = 50 * time.Millisecond
)

// errDrained is the cause of an attempt's context cancelled because Drain
// waited too long.
var errDrained = errors.New("classify: the body did not end after the answer")

// Drain reads what is left of a complete answer's body — the terminator the
// reader did not wait for — up to drainLimit bytes and for at most
// drainWait, so that net/http sees the body's end and keeps the connection
// for the next call instead of closing it. A body that goes on longer or
// stays silent is abandoned (its connection closed, as before); the answer
// is whole either way. Call it only once the answer is complete, before the
// stream is closed.
func (a *Attempt) Drain() {
	if a.body == nil || a.ctx.Err() != nil {
		return
	}
	t := time.AfterFunc(drainWait, func() { a.cancel(errDrained) })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, a.body, drainLimit)
}

// CallerErr is the caller's context error, nil while the caller waits.
func (a *Attempt) CallerErr() error { return a.parent.Err() }

// Interrupted returns what stopped the attempt from outside the wire: the
// caller's context error, as it is, or the timeout failure of a limit that
// passed. It is nil when neither happened.
func (a *Attempt) Interrupted(c *Classifier) error {
	if err := a.CallerErr(); err != nil {
		return err
	}
	if a.dog == nil {
		return nil
	}
	if phase := a.dog.firedPhase(); phase != recovery.TimeoutNone {
		return c.Timeout(phase, a.dog.limit(phase), a.status, a.header)
	}
	return nil
}

// Failure classifies an attempt that ended with err (nil for a stream that
// simply ended before its finish), in order: the caller's cancellation, a
// limit that passed, an error status, no response at all, a broken stream.
// A connection failure carries how long the upstream had been silent
// (recovery.Failure.Silence): a drop after seconds of silence marks a
// dead route, a quick reset does not.
func (a *Attempt) Failure(c *Classifier, err error) error {
	if stop := a.Interrupted(c); stop != nil {
		return stop
	}
	switch {
	case a.status >= 400:
		return a.settle(c.HTTP(a.status, a.header, a.errBody))
	case a.status == 0:
		f := c.Connection(err)
		f.Silence = max(0, a.now().Sub(a.start))
		return f
	}
	return c.Broken(a.status, a.header, err)
}

// StreamError classifies an error event inside the stream (data is the
// event's JSON), unless the caller or a limit stopped the attempt first.
func (a *Attempt) StreamError(c *Classifier, data []byte) error {
	if stop := a.Interrupted(c); stop != nil {
		return stop
	}
	return a.settle(c.InStream(a.status, a.header, data))
}

// settle adjusts what the classifier could not know about the request: a
// refused final assistant message is a refused prefill only when the
// request carried one.
func (a *Attempt) settle(f *recovery.Failure) *recovery.Failure {
	if f.Kind == recovery.FailPrefillRejected && !a.prefill {
		f.Kind = recovery.FailInvalidRequest
	}
	return f
}

// activityBody tells the watchdog about every read that brought bytes, pings
// and keep-alive comments included: silence on the wire is what Idle bounds.
type activityBody struct {
	io.ReadCloser
	dog *watchdog
}

// Read reads from the body and records the activity.
func (b *activityBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.dog.activity()
	}
	return n, err
}
