package classify

import (
	"context"
	"sync"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// watchdog enforces provider.Timeouts on one attempt by cancelling its
// context when a limit passes. Nothing waits on it: one timer (time.AfterFunc,
// whose function runs only when it fires) is armed for the earliest deadline
// and re-checks the deadlines when it fires, so wire activity only records a
// time and costs no timer reset. Stopped, it leaves no goroutine behind.
//
// Idle times the upstream's silence, not the caller's: while a chunk is
// being emitted (the caller may block on back-pressure, and nothing is read
// from the wire meanwhile) the idle limit cannot fire, and it runs again from
// the end of the emit — idle is measured from the later of the last bytes and
// the last emit's end. The first token is recorded before its chunk is
// emitted, so the first-token limit never times an emit either. Total always
// runs.
type watchdog struct {
	limits provider.Timeouts
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	start   time.Time
	headers bool      // response headers came
	token   bool      // the first token came
	last    time.Time // last bytes on the wire, or the end of the last emit
	emits   bool      // a chunk is being emitted: idle is suspended
	timer   *time.Timer
	armed   time.Time // when the timer is set to fire; zero when idle
	fired   recovery.TimeoutPhase
	done    bool
}

// errTimedOut is the cause a watchdog cancels its attempt with.
type errTimedOut recovery.TimeoutPhase

// Error says that a limit stopped the attempt; the failure says which.
func (errTimedOut) Error() string { return "attempt timed out" }

// newWatchdog starts watching now; cancel stops the attempt.
func newWatchdog(limits provider.Timeouts, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{limits: limits, cancel: cancel, start: time.Now()}
	w.last = w.start
	w.mu.Lock()
	w.arm()
	w.mu.Unlock()
	return w
}

// headersCame records the response headers; the idle limit starts here.
func (w *watchdog) headersCame() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.headers, w.last = true, time.Now()
	w.arm()
}

// tokenCame records the first token.
func (w *watchdog) tokenCame() {
	w.mu.Lock()
	w.token = true
	w.mu.Unlock()
}

// activity records bytes on the wire, which resets the idle limit.
func (w *watchdog) activity() {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

// emitStarted records that a chunk is being handed to the caller; the idle
// limit is suspended until emitEnded.
func (w *watchdog) emitStarted() {
	w.mu.Lock()
	w.emits = true
	w.mu.Unlock()
}

// emitEnded records that the caller took the chunk: the idle limit runs
// again from now. The timer is touched only if it is not set for an earlier
// deadline already (it was not, when it fired during the emit).
func (w *watchdog) emitEnded() {
	w.mu.Lock()
	w.emits, w.last = false, time.Now()
	w.arm()
	w.mu.Unlock()
}

// stop ends the watch; the limits no longer apply.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// firedPhase is the limit that stopped the attempt, or TimeoutNone.
func (w *watchdog) firedPhase() recovery.TimeoutPhase {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// limit is the configured duration of phase.
func (w *watchdog) limit(phase recovery.TimeoutPhase) time.Duration {
	switch phase {
	case recovery.TimeoutHeaders:
		return w.limits.Headers
	case recovery.TimeoutFirstToken:
		return w.limits.FirstToken
	case recovery.TimeoutIdle:
		return w.limits.Idle
	case recovery.TimeoutTotal:
		return w.limits.Total
	}
	return 0
}

// next is the earliest pending deadline and its phase; ties go to the
// earlier phase. Called with mu held.
func (w *watchdog) next() (recovery.TimeoutPhase, time.Time) {
	phase, at := recovery.TimeoutNone, time.Time{}
	consider := func(p recovery.TimeoutPhase, d time.Duration, from time.Time, pending bool) {
		if d <= 0 || !pending {
			return
		}
		if t := from.Add(d); phase == recovery.TimeoutNone || t.Before(at) {
			phase, at = p, t
		}
	}
	consider(recovery.TimeoutHeaders, w.limits.Headers, w.start, !w.headers)
	consider(recovery.TimeoutFirstToken, w.limits.FirstToken, w.start, !w.token)
	consider(recovery.TimeoutIdle, w.limits.Idle, w.last, w.headers && !w.emits)
	consider(recovery.TimeoutTotal, w.limits.Total, w.start, true)
	return phase, at
}

// arm sets the timer for the earliest deadline, unless it is already set to
// fire sooner (fire re-arms when it finds that deadline moved). Called with
// mu held.
func (w *watchdog) arm() {
	phase, at := w.next()
	if phase == recovery.TimeoutNone || w.done {
		return
	}
	if !w.armed.IsZero() && !at.Before(w.armed) {
		return
	}
	w.armed = at
	d := time.Until(at)
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
		return
	}
	w.timer.Reset(d)
}

// fire runs on the timer: it stops the attempt if a deadline has passed and
// otherwise re-arms for the next one.
func (w *watchdog) fire() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.armed = time.Time{}
	phase, at := w.next()
	if phase == recovery.TimeoutNone || time.Now().Before(at) {
		w.arm()
		w.mu.Unlock()
		return
	}
	w.fired, w.done = phase, true
	w.mu.Unlock()
	w.cancel(errTimedOut(phase))
}
