package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/driver"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/recovery"
)

// Ownership and takeover in a fleet (Config.Leases, over a shared Log).
//
// The replica that starts a Stream with a resume grace acquires the
// completion's lease, renews it at a third of its length (ownership), and
// writes the completion's events only while it may (the outbox's fence).
// The log's meta keeps what a takeover needs: the encoded request and the
// replica's name.
//
// Takeover is lazy: it happens when a caller attaches. A replica serving an
// Attach of a live completion with a request in its meta checks the lease
// at once and then every half lease while the log is silent; when nobody
// holds it (the owner died: it stopped renewing), the replica acquires it
// (a larger fencing token), rebuilds the completion from the log
// (foldLog), and runs it on from there with recovery.Takeover: the
// transition that follows is STREAM_RESUME (a route that takes a prefill
// continues the kept text, no token repeated) or RETRY (a clean restart,
// the partial answer discarded), with ERROR_KIND_REPLICA_LOST; seq goes on
// from the log's last. The attacher, following the log, sees it all. A
// completion nobody attaches to is not taken over: with nobody attached
// its resume grace would have ended it anyway, and the next Attach, on
// any replica, takes it over then.
//
// A Redis outage is not a death: the owner's lease lapses for want of a
// store, but nobody can take the completion over without one, so it goes
// on (ownership.running), its log apart in memory; once Redis answers its
// log is published again and its lease taken back (PairLog.reshare). If
// another replica was granted the lease meanwhile (a partition), the owner
// finishes the completion for its own callers and never shares it.
//
// A Session started with a resume grace is taken over the same way, from
// its log and its last checkpoint (driver.Checkpoint: the machine's state
// where it holds what the events do not show — the conversation with
// the caller's answers, the calls the caller runs): lost while it awaited
// its caller, it awaits again (the caller resumes through any replica and
// answers there); lost mid-turn, the turn goes on as a Stream's would.
// A Session resume that reaches a replica that does not run it waits for
// the lease to lapse and takes the Session over (resumeSession).
//
// Not taken over: completions without a resume grace (their caller, gone
// with the replica, was all they had).

// errLeaseLostCause cancels a completion whose replica lost its lease.
var errLeaseLostCause = errors.New("this replica lost the completion's lease")

// own makes this replica the owner of the completion of sp, starting here,
// under the lease a admit acquired for it, and fences its writes with it
// (sp.Fence); or, when its log opens with its first event (a.opening), has
// sp.Open open it and take its lease then. The owner holds no Ownership
// when the completion has no lease (no leases, or they did not answer).
// cancel stops the completion if the lease is lost. (Ownership is the
// lease's; a resume grace keeps a completion running, holds.)
func (s *Server) own(ctx context.Context, sp *driver.Spec, a acquired, cancel context.CancelCauseFunc) *owner {
	w := &owner{}
	switch {
	case a.opening != nil:
		s.ownWhenOpen(ctx, sp, a.opening, w, cancel)
	case a.lease != nil:
		o := s.ownLease(sp.ID, *a.lease, a.from, cancel)
		w.o.Store(o)
		sp.Fence = o.Running
	}
	return w
}

// ownWhenOpen has the completion of sp open its log with its first event
// (sp.Open, on the driver's goroutine that writes it ahead) under the
// lease that open takes: its Ownership starts then, and its request joins
// the shared log beside the completion (fleet.Opening.JoinRequest). Until
// then, nothing is fenced: nothing is written before the open.
func (s *Server) ownWhenOpen(ctx context.Context, sp *driver.Spec, op *fleet.Opening, w *owner, cancel context.CancelCauseFunc) {
	id := sp.ID
	sp.Fence = w.running
	sp.Open = func(first *completionv1.CompletionEvent) func() {
		from := time.Now() // the clock of fleet.Ownership, which synctest fakes in tests
		l, err := op.Open(first)
		if l == nil {
			s.unleased(ctx, id, err)
			return nil
		}
		w.o.Store(s.ownLease(id, *l, from, cancel))
		return op.JoinRequest
	}
}

// owner is the Ownership of a completion this replica runs, once it has
// one: at its start, or when its log opens (ownWhenOpen).
type owner struct {
	o atomic.Pointer[fleet.Ownership]
}

// running is the completion's fence: its lease is still this replica's,
// or it has none.
func (w *owner) running() bool {
	o := w.o.Load()
	return o == nil || o.Running()
}

// ownLease makes the completion id run under lease l, acquired at from;
// the caller fences its writes with the Ownership's Running.
func (s *Server) ownLease(id string, l fleet.Lease, from time.Time, cancel context.CancelCauseFunc) *fleet.Ownership {
	lost := func() bool {
		if s.log.KeptHere(id) {
			// The shared log lacks what this replica ran on its own while
			// the store was away: its callers here are served to the end,
			// and the replica that took the lease runs its own.
			s.cfg.Logger.Warn("lease lost while the completion was logged here only: it goes on for this replica's callers",
				"completion_id", id, "replica", s.cfg.Replica)
			return false
		}
		cancel(errLeaseLostCause)
		return true
	}
	stale := func() {
		s.cfg.Logger.Warn("lease not renewed in time, the store does not answer: the completion goes on here, and is taken back or handed over when the store answers",
			"completion_id", id, "replica", s.cfg.Replica)
	}
	o := fleet.Own(s.cfg.Leases, l, from, s.log.Fenced(), lost, stale)
	s.log.Fence(id, l)
	s.owned.add(id, o)
	return o
}

// disown ends the ownership of completion id that w holds, if any,
// releasing its lease. It runs once the completion's Run has returned,
// when its log's open (and so w) is done.
func (s *Server) disown(id string, w *owner) {
	if o := w.o.Load(); o != nil {
		s.dropOwnership(id, o)
	}
}

// dropOwnership ends ownership o of completion id, releasing its lease.
func (s *Server) dropOwnership(id string, o *fleet.Ownership) {
	s.owned.remove(id)
	if s.log.Unfence(id) {
		o.EndReleased()
		return
	}
	o.End()
}

// owned are the ownerships this replica holds, by completion id.
type owned struct {
	mu     sync.Mutex
	m      map[string]*fleet.Ownership
	halted bool
}

func (w *owned) add(id string, o *fleet.Ownership) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*fleet.Ownership{}
	}
	if w.halted {
		o.Halt()
	}
	w.m[id] = o
}

// has reports whether this replica holds an ownership of completion id.
func (w *owned) has(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[id]
	return ok
}

func (w *owned) remove(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

// Halt stops every ownership, as the replica's death would: no more
// writes, no more renewals, no release.
func (w *owned) halt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.halted = true
	for _, o := range w.m {
		o.Halt()
	}
}

// Halt makes the server behave as if its process had been killed: it writes
// nothing more to the log, renews and releases no lease, and its
// completions stop. Tests of in-process fleets kill a replica with it (and
// stop its gRPC server); the fleet test kills a real process.
func (s *Server) halt() {
	s.owned.halt()
	if s.presence != nil {
		s.presence.Halt()
	}
	s.abort()
}

// instance names this process in the fleet (Meta.Instance); "" without
// leases.
func (s *Server) instance() string {
	if s.presence == nil {
		return ""
	}
	return s.presence.Instance()
}

// leaseCheck returns a channel that wakes a follower of page, read from
// the log of a live completion, when its owner should be looked at: the
// completion's lease if it may be taken over, or else the presence of the
// process that runs it on another replica (Meta.Instance); at once the
// first time, then every fleet.Timing.CheckEvery of silence; nil when
// there is nothing to look at. stop releases the timer.
func (s *Server) leaseCheck(page fleet.Page, first bool) (wake <-chan time.Time, stop func()) {
	if s.cfg.Leases == nil || page.Ended ||
		len(page.Meta.Request) == 0 && (page.Meta.Instance == "" || page.Meta.Instance == s.instance()) {
		return nil, func() {}
	}
	d := fleet.TimingOf(s.cfg.Leases).CheckEvery()
	if first {
		d = 0
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// takeOver takes completion id over if its lease has lapsed: it acquires
// the lease, rebuilds the completion from the log and runs it on, on this
// replica, detached from any RPC. It returns the function that counts the
// calling follower out of the completion's holders (nil when it did not
// take the completion over), or the error that makes this replica unable
// to continue it (its log or request does not make sense here): the
// follower ends with it rather than wait for an end that will not come.
// A store that does not answer is not such an error: the follower looks
// again at its next check. A takeover that fails once the lease was found
// free is counted (fleet.TakeoverFailed, takeoverFailure).
func (s *Server) takeOver(ctx context.Context, id string) (leave func(), err error) {
	ls := s.cfg.Leases
	if _, held, err := ls.Holder(ctx, id); err != nil || held || s.owned.has(id) {
		// Held by a replica, or run by this one still: its lease lapsed
		// while this process was paused, or with the store away, and the
		// run renews it or stops once it finds it lost (a log kept here
		// only goes on for its callers here, who read what it writes).
		// Taking it over here too would make two writers of one log.
		return nil, nil
	}
	if s.redis != nil && s.redis.Settling(ctx) {
		// Redis failed over or restarted moments ago: the lease may have
		// lapsed in the outage of a completion that ended, its end lost,
		// which its replica publishes again at its next PING. The
		// follower looks again at its next check.
		s.cfg.Logger.DebugContext(ctx, "takeover deferred: a new Redis process serves the logs, the owner may publish the end it lost", "completion_id", id)
		return nil, nil
	}
	from := time.Now() // the clock of fleet.Ownership, which synctest fakes in tests
	l, err := ls.Acquire(ctx, id, s.cfg.Replica)
	if err != nil {
		// Another replica (or the owner, renewing) was granted the lease:
		// no failure. Any other error is the store's.
		if !errors.Is(err, fleet.ErrLeaseHeld) && ctx.Err() == nil {
			fleet.TakeoverFailed(s.cfg.Redis, fleet.TakeoverStoreUnavailable)
		}
		return nil, nil
	}
	sp, cctx, cancel, err := s.rebuild(id)
	if err != nil {
		_ = ls.Release(context.WithoutCancel(ctx), l)
		if reason, failed := takeoverFailure(err); failed {
			fleet.TakeoverFailed(s.cfg.Redis, reason)
		}
		if errors.Is(err, errNothingToTake) {
			return nil, nil
		}
		s.cfg.Logger.WarnContext(ctx, "takeover failed", "completion_id", id, "error", err.Error())
		if errors.Is(err, fleet.ErrUnavailable) {
			return nil, nil
		}
		return nil, err
	}
	o := s.ownLease(id, l, from, cancel)
	sp.Fence = o.Running
	c := driver.New(sp)
	s.cfg.Logger.InfoContext(ctx, "took a completion over", "completion_id", id, "from_replica", sp.TakenFrom,
		"replica", s.cfg.Replica, "lease_token", l.Token, "after_seq", sp.AfterSeq)
	leave, end := s.holds.start(id, sp.Request.GetResumeGrace().AsDuration(), cancel)
	sess, _ := sp.Caller.(*session)
	if sess != nil {
		s.sessions.add(id, sess) // a resume here takes control of it
	}
	go func() {
		defer cancel(context.Canceled)
		defer end()
		defer s.dropOwnership(id, o)
		if sess != nil {
			s.runDetached(cctx, c)
			return
		}
		defer func() {
			if p := recover(); p != nil {
				s.cfg.Logger.ErrorContext(cctx, "panic in a completion taken over", "panic", p, "completion_id", id)
			}
		}()
		_, _ = c.Run(cctx)
	}()
	return leave, nil
}

// lookAtOwner looks at the owner of live completion id, whose log's meta
// is meta, for a follower: a completion that may be taken over is
// (takeOver, whose leave and error it returns); one that may not is gone
// once the process that ran it is (Presence), which misses counts: the
// follower ends with completionLostStatus at the second miss in a row, a
// check apart, so that a presence the store lost for a moment and its
// process takes back at its next renewal ends nobody's follow.
func (s *Server) lookAtOwner(ctx context.Context, id string, meta fleet.Meta, misses *int) (leave func(), err error) {
	if len(meta.Request) > 0 {
		l, err := s.takeOver(ctx, id)
		if err != nil {
			return nil, takeoverFailedStatus(id, err)
		}
		return l, nil
	}
	switch present, err := fleet.Present(ctx, s.cfg.Leases, meta.Instance); {
	case err != nil || present:
		*misses = 0
	default:
		if *misses++; *misses >= 2 {
			return nil, completionLostStatus(id, meta.Replica)
		}
	}
	return nil, nil
}

var (
	// errNothingToTake: the log ended (or is gone) by the time it was read.
	errNothingToTake = errors.New("nothing to take over")
	// errLogGone, an errNothingToTake: the log was gone (expired or
	// evicted) by the time it was read.
	errLogGone = fmt.Errorf("%w: the log is gone", errNothingToTake)
)

// errEndLost: the log holds the completion's terminal transition but not
// its result. This version writes the two in one write (fleet.Log.End,
// and one write when it publishes a log again); an older replica wrote
// them apart, and may have died between. The completion finished, so it
// is not run again: its followers end with the takeover's failure.
var errEndLost = errors.New("the completion finished, but its log lost its result")

// isTerminal reports whether ev is a terminal transition.
func isTerminal(ev *completionv1.CompletionEvent) bool {
	return ev.GetTransition().GetTerminal()
}

// takeoverFailure is the reason of completiond.takeovers.failed for err,
// with which rebuild failed, or false when it is no failure: the log ended
// meanwhile.
func takeoverFailure(err error) (fleet.TakeoverFailure, bool) {
	switch {
	case errors.Is(err, errLogGone):
		return fleet.TakeoverLogMissing, true
	case errors.Is(err, errNothingToTake):
		return "", false
	case errors.Is(err, fleet.ErrUnavailable):
		return fleet.TakeoverStoreUnavailable, true
	}
	return fleet.TakeoverCannotContinue, true
}

// rebuild reads the whole log of id and its last checkpoint, and specifies
// the completion that continues it, with its context: a Stream, or a
// Session with its caller's side (which the caller controls by resuming).
func (s *Server) rebuild(id string) (driver.Spec, context.Context, context.CancelCauseFunc, error) {
	ckSeq, ckData, ck, err := s.readCheckpoint(id)
	if err != nil {
		return driver.Spec{}, nil, nil, err
	}
	evs, meta, first, err := s.readWhole(id)
	if err != nil {
		return driver.Spec{}, nil, nil, err
	}
	if slices.ContainsFunc(evs, isTerminal) {
		return driver.Spec{}, nil, nil, errEndLost
	}
	req, start, err := decodeLogged(meta)
	if err != nil {
		return driver.Spec{}, nil, nil, err
	}
	v, schema := s.cfg.validate(req)
	if len(v) > 0 {
		return driver.Spec{}, nil, nil, fmt.Errorf("the logged request is no longer valid here: %v", v)
	}
	ctx, cancel := s.completionContextCause(context.Background())
	sp, _, err := s.specify(ctx, id, req, schema, start, func(*completionv1.CompletionEvent) error { return nil })
	if err != nil {
		cancel(err)
		return driver.Spec{}, nil, nil, err
	}
	base, after := 0, evs
	var snap *recovery.Snapshot
	if ck != nil {
		base, snap = ck.Machine.Attempt, &ck.Machine
		for len(after) > 0 && after[0].GetSeq() <= ckSeq {
			after = after[1:] // the checkpoint's already
		}
		if sp.Held, err = ck.HeldEvents(); err != nil {
			cancel(err)
			sp.Release() // admitted, never run: counted out and unregistered here
			return driver.Spec{}, nil, nil, err
		}
	}
	if start != nil {
		sess := newSession(cancel, s.cfg.CallerWait, start.GetStopHook())
		s.asSession(ctx, &sp, start, sess)
		sp.Observe = sess.register
		sess.recall(evs, ck)
		sp.Hooks = sess.hooksSent()
	}
	fold, started := foldLog(after, sp.Route, base)
	fold.Base, fold.Incomplete = snap, first > ckSeq+1
	sp.Prior, sp.TakenFrom = &fold, meta.Replica
	if len(evs) > 0 {
		sp.AfterSeq = evs[len(evs)-1].GetSeq()
		if evs[0].GetSeq() == 1 {
			started = evs[0].GetStarted()
		}
	}
	if started != nil {
		sp.Started = started
	}
	s.log.Adopt(id, meta, evs, ckSeq, ckData)
	return sp, ctx, cancel, nil
}

// readCheckpoint reads the last checkpoint of id, if its log keeps one:
// its seq, its data and what it decodes to.
func (s *Server) readCheckpoint(id string) (uint64, []byte, *driver.Checkpoint, error) {
	seq, data, err := s.log.Checkpoint(id)
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return 0, nil, nil, errLogGone
	case err != nil:
		return 0, nil, nil, fmt.Errorf("read the checkpoint: %w", err)
	case data == nil:
		return 0, nil, nil, nil
	}
	ck, err := driver.DecodeCheckpoint(data)
	if err != nil {
		return 0, nil, nil, err
	}
	return seq, data, &ck, nil
}

// readWhole reads every event the log of a live completion id keeps, its
// meta, and the seq of its first event kept (1 unless the oldest were
// dropped, --event-log-events).
func (s *Server) readWhole(id string) ([]*completionv1.CompletionEvent, fleet.Meta, uint64, error) {
	var evs []*completionv1.CompletionEvent
	var meta fleet.Meta
	first := uint64(1)
	for after := uint64(0); ; {
		page, err := s.log.Read(id, after)
		if errors.Is(err, fleet.ErrNotFound) {
			return nil, meta, 0, errLogGone
		}
		var head *fleet.RangeError
		if errors.As(err, &head) && after == 0 && head.First > 1 {
			after, first = head.First-1, head.First
			continue
		}
		if err != nil {
			return nil, meta, 0, fmt.Errorf("read the log: %w", err)
		}
		if page.Ended {
			return nil, meta, 0, errNothingToTake
		}
		meta = page.Meta
		if len(page.Events) == 0 {
			return evs, meta, first, nil
		}
		evs = append(evs, page.Events...)
		after = page.Events[len(page.Events)-1].GetSeq()
	}
}

// decodeLogged decodes what a takeover runs again: a Stream's request, or
// a Session's start (Resumable) and its request.
func decodeLogged(meta fleet.Meta) (*completionv1.CompleteRequest, *completionv1.SessionStart, error) {
	if meta.Resumable {
		start := &completionv1.SessionStart{}
		if err := proto.Unmarshal(meta.Request, start); err != nil {
			return nil, nil, fmt.Errorf("decode the Session's start: %w", err)
		}
		if start.GetMaxTurns() < 0 {
			return nil, nil, fmt.Errorf("the logged Session's max_turns is negative")
		}
		return start.GetRequest(), start, nil
	}
	req := &completionv1.CompleteRequest{}
	if err := proto.Unmarshal(meta.Request, req); err != nil {
		return nil, nil, fmt.Errorf("decode the request: %w", err)
	}
	return req, nil, nil
}

// foldLog reads the logged events of a live completion into the core's
// fold (recovery.PriorFold), which rebuilds what the machine had decided:
// the attempts kept and voided, the route, the in-flight attempt's text.
// base is the attempt of the checkpoint the events follow (0: none). It
// also returns the Started event, when the events hold it.
func foldLog(evs []*completionv1.CompletionEvent, route func(name string) *config.Route, base int) (recovery.Prior, *completionv1.Started) {
	fold := recovery.NewPriorFold(base)
	var started *completionv1.Started
	for _, ev := range evs {
		a, t := int(ev.GetAttempt()), int(ev.GetTurn())
		switch e := ev.GetEvent().(type) {
		case *completionv1.CompletionEvent_Started:
			fold.Started(a, t, e.Started.GetRoute())
			if base == 0 || a > base {
				started = e.Started
			}
		case *completionv1.CompletionEvent_Delta:
			if e.Delta.GetKind() == completionv1.DeltaKind_DELTA_KIND_TEXT {
				fold.Text(a, t, e.Delta.GetText())
			} else {
				fold.Other(a, t)
			}
		case *completionv1.CompletionEvent_Usage:
			u := e.Usage
			fold.Usage(a, t, recovery.Usage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(),
				CacheReadInputTokens: u.GetCacheReadInputTokens(), CacheCreationInputTokens: u.GetCacheCreationInputTokens()})
		case *completionv1.CompletionEvent_Transition:
			tr := e.Transition
			discarded := make([]int, len(tr.GetDiscardedAttempts()))
			for i, d := range tr.GetDiscardedAttempts() {
				discarded[i] = int(d)
			}
			fold.Transition(a, t, discarded, tr.GetToRoute(), int(tr.GetMaxTokens()))
		default:
			fold.Other(a, t)
		}
	}
	return fold.Prior(func(name string) (recovery.Route, bool) {
		if r := route(name); r != nil {
			return r.Spec, true
		}
		return recovery.Route{}, false
	}), started
}
