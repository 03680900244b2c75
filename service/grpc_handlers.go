package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/driver"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/recovery"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// errShuttingDown is the cause of contexts cancelled by Drain.
var errShuttingDown = errors.New("server shutting down")

// Server implements completion.v1.Completion.
type Server struct {
	completionv1.UnimplementedCompletionServer
	cfg      Config
	obs      *telemetry.Observer
	breakers *guard.Breakers
	shared   *guard.RedisGate    // Config.Redis for the breakers and limits; nil without it
	budgets  *guard.Budgets      // the keys' spend against their budgets (auth.keys[].budget)
	refusals *telemetry.Refusals // counts and logs refusals; set by NewGRPC, nil before
	log      fleet.Log           // every completion's events, for Attach
	mem      *fleet.MemLog       // log when it is this process's memory alone, else nil
	holds    holds               // the completions kept running for a resume grace
	sessions sessions            // the resumable Sessions that run, by id, for Session resume
	running  running             // the completions that run, which a drain waits for
	owned    owned               // the leases held (Config.Leases), by completion id
	presence *fleet.Presence     // this process, to the fleet (Config.Leases); nil without leases
	cancels  cancellers          // the completions that run here, which Cancel may end (grpc_cancel.go)
	bus      *fleet.RedisCancels // a Cancel to the replica that runs the completion (Config.Redis); nil without Redis
	idem     fleet.Idempotency   // the idempotency keys' records (idem.go): Redis's with Config.Redis, else idemMem
	idemMem  *fleet.MemIdempotency
	// cancelWait is how long Cancel waits for the end (cancelWaitFor).
	cancelWait time.Duration

	aborted context.Context // done when in-flight completions must end
	abort   context.CancelFunc

	redis     *fleet.Health // whether Config.Redis answers; nil without Redis
	closeOnce sync.Once
	closers   []func()
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	cfg.fillDefaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	aborted, abort := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, aborted: aborted, abort: abort}
	if cfg.Redis != nil {
		// The one tracker of Redis: the event log, the shared breakers and
		// limits, and the health check all go by it.
		s.redis = fleet.NewHealth(cfg.Redis, cfg.RedisPing, cfg.Logger)
		s.shared = guard.NewRedisGate(cfg.Redis, s.redis, cfg.Logger)
		s.closers = append(s.closers, s.redis.Close)
	}
	s.breakers = guard.NewFleetBreakers(cfg.Breaker, s.shared)
	s.budgets = guard.NewBudgets(cfg.Now, s.shared)
	if s.redis != nil {
		// What this replica charged while Redis was away, or lost with it,
		// counts fleet-wide again.
		s.redis.WatchBack(s.budgets.Publish)
		s.redis.WatchReplaced(s.budgets.Publish)
	}
	s.obs = telemetry.NewObserver(cfg.Logger, cfg.Telemetry, s.breakers.States)
	mem := fleet.NewMemLog(cfg.EventLog, cfg.Now)
	switch {
	case cfg.Log != nil:
		s.log = cfg.Log
	case cfg.Redis != nil:
		rl := fleet.NewRedisLog(cfg.Redis, cfg.EventLog, cfg.Now)
		if cfg.Leases != nil {
			rl.LeaseTTL = cfg.Leases.TTL()
		}
		rl.CommitDelay = cfg.RedisCommitDelay
		local := fleet.RedisInstruments(cfg.Telemetry.MeterProvider, s.redis.Up)
		s.log = fleet.NewPairLog(mem, rl, s.redis, cfg.Logger, local)
		s.closers = append([]func(){rl.Close}, s.closers...) // the log's subscription before the PINGs
	default:
		s.log, s.mem = mem, mem
	}
	if cfg.Leases != nil {
		s.presence = fleet.NewPresence(cfg.Leases, fleet.NewInstance(cfg.Replica))
		s.closers = append([]func(){s.presence.Close}, s.closers...) // released while the store is still there
	}
	if cfg.Redis != nil {
		s.bus = fleet.NewRedisCancels(cfg.Redis, s.cancels.heard, s.cancels.ids)
		s.closers = append([]func(){s.bus.Close}, s.closers...)
	}
	s.cancelWait = cancelWaitFor(cfg.Leases)
	// A record points at a log: more records than logs kept would point at
	// logs gone.
	s.idemMem = fleet.NewMemIdempotency(cfg.EventLog.MaxCompletions, cfg.Now)
	s.idem = s.idemMem
	if cfg.Redis != nil {
		ri := fleet.NewRedisIdempotency(cfg.Redis, cfg.EventLog.MaxCompletions, cfg.Now, cfg.Logger)
		s.redis.WatchReplaced(ri.Restore) // a Redis back empty gets this replica's records back
		// The keys claimed here while Redis was away hold fleet-wide again.
		s.redis.WatchBack(func() bool { return ri.PublishFrom(s.idemMem) })
		s.idem = ri
	}
	return s, nil
}

// Limits are the limits the server enforces, its Auto ones resolved, and
// the memory limit they were resolved from (zero when none was Auto).
func (s *Server) Limits() (config.Limits, MemoryLimit) { return s.cfg.Limits, s.cfg.Memory }

// Close stops what the server runs in the background (with Config.Redis:
// its PINGs and its subscription to the log's changes). Drain calls it
// once the server has stopped; it may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		for _, c := range s.closers {
			c()
		}
	})
}

// Register registers the Completion service on g.
func (s *Server) Register(g grpc.ServiceRegistrar) { completionv1.RegisterCompletionServer(g, s) }

// Abort ends every in-flight completion: each ends with a terminal
// ABORTED_STREAMING transition and UNAVAILABLE, so that its caller may retry
// elsewhere. The server calls it when a graceful drain runs out of time.
func (s *Server) Abort() { s.abort() }

// Stream runs one completion and streams its events. With a resume grace,
// see streamResumable.
func (s *Server) Stream(req *completionv1.CompleteRequest, stream grpc.ServerStreamingServer[completionv1.CompletionEvent]) error {
	if g := req.GetResumeGrace().AsDuration(); g > 0 {
		return s.streamResumable(req, stream, g)
	}
	ctx, cancel := s.completionContext(stream.Context())
	defer cancel()
	send := stream.Send
	wire := newWireLog(s.mem, stream)
	if wire != nil {
		send = wire.send
	}
	sp, _, err := s.prepare(ctx, req, send)
	if a, ok := errors.AsType[*errAttach](err); ok {
		return s.attachStart(stream.Context(), a.id, stream.Send)
	}
	if err != nil {
		return err
	}
	if wire != nil {
		sp.Log = wire // each event encoded once, for the log and the wire
	}
	return s.serveCompletion(ctx, driver.New(sp))
}

// Complete runs one completion and answers with its aggregated result.
func (s *Server) Complete(ctx context.Context, req *completionv1.CompleteRequest) (*completionv1.CompleteResponse, error) {
	if req.GetResumeGrace().AsDuration() > 0 {
		return nil, invalidArgument(violations{{Field: "resume_grace", Description: "Complete cannot be resumed: use Stream"}})
	}
	ctx, cancel := s.completionContext(ctx)
	defer cancel()
	sp, _, err := s.prepare(ctx, req, func(*completionv1.CompletionEvent) error { return nil })
	if a, ok := errors.AsType[*errAttach](err); ok {
		return s.completeAttached(ctx, a.id)
	}
	if err != nil {
		return nil, err
	}
	c := driver.New(sp)
	if _, err := c.Run(ctx); err != nil {
		return nil, contextStatus(ctx.Err())
	}
	if err := c.Conclusion().Err; err != nil {
		return nil, err
	}
	return &completionv1.CompleteResponse{CompletionId: c.ID(), Result: c.Result(), Transitions: c.Transitions()}, nil
}

// streamResumable is Stream for a request with a resume grace: the
// completion runs on a context detached from the RPC's (it keeps the
// caller's deadline and is still cancelled when the server aborts), so that
// the caller's leaving does not cancel it. The outbox keeps numbering and
// logging the events while sends fail; once neither the caller nor an
// attacher is there for the grace, the completion is cancelled
// (ABORTED_STREAMING). The handler returns when the completion ends.
func (s *Server) streamResumable(req *completionv1.CompleteRequest, stream grpc.ServerStreamingServer[completionv1.CompletionEvent], grace time.Duration) error {
	rpc := stream.Context()
	ctx, cancel := s.detachedContext(rpc)
	defer cancel(context.Canceled)
	var gone atomic.Bool
	var leave func()
	send := func(ev *completionv1.CompletionEvent) error {
		if gone.Load() {
			return nil
		}
		if err := stream.Send(ev); err != nil {
			gone.Store(true)
			leave()
		}
		return nil
	}
	sp, lease, err := s.prepare(ctx, req, send)
	if a, ok := errors.AsType[*errAttach](err); ok {
		return s.attachStart(rpc, a.id, stream.Send)
	}
	if err != nil {
		return err
	}
	o := s.own(ctx, &sp, lease, cancel)
	defer s.disown(sp.ID, o)
	c := driver.New(sp)
	leave, end := s.holds.start(c.ID(), grace, cancel)
	defer end()
	stop := context.AfterFunc(rpc, func() {
		gone.Store(true)
		leave()
	})
	defer stop()
	return s.serveCompletion(ctx, c)
}

// detachedContext is the context of a completion that outlives its RPC's
// cancellation (a resume grace): it keeps the RPC's values and deadline,
// and is cancelled when the server aborts or by the returned function.
func (s *Server) detachedContext(rpc context.Context) (context.Context, context.CancelCauseFunc) {
	detached := context.WithoutCancel(rpc)
	cancelDeadline := func() {}
	if d, ok := rpc.Deadline(); ok {
		detached, cancelDeadline = context.WithDeadline(detached, d)
	}
	ctx, cancel := s.completionContextCause(detached)
	return ctx, func(cause error) {
		cancel(cause)
		cancelDeadline()
	}
}

// serveCompletion runs a prepared completion and returns the status it
// concluded.
func (s *Server) serveCompletion(ctx context.Context, c *driver.Completion) error {
	_, err := c.Run(ctx)
	if c.Fenced() {
		return lostLeaseStatus(c.ID())
	}
	if err != nil {
		return contextStatus(ctx.Err())
	}
	return c.Conclusion().Err
}

// ending is how a completion run under ctx ended: an abort caused by the
// server's own shutdown, or by the caller's deadline, is not the caller's
// cancellation. The cause tells them apart: the first to cancel ctx wins.
func (s *Server) ending(ctx context.Context, res *recovery.Result) ending {
	cause := context.Cause(ctx)
	return ending{result: res, shuttingDown: errors.Is(cause, errShuttingDown), deadlineExceeded: errors.Is(cause, context.DeadlineExceeded)}
}

// completionContext is ctx, also cancelled when the server aborts.
func (s *Server) completionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := s.completionContextCause(ctx)
	return ctx, func() { cancel(context.Canceled) }
}

// completionContextCause is completionContext with a cancel that records
// why. Aborting cancels it through a registered callback: no goroutine waits
// per completion.
//
// The context carries its cancel (cancelOf), so that admit registers the
// completion it runs as one Cancel may end before its log opens: no
// Cancel finds the log of a completion it cannot end.
func (s *Server) completionContextCause(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	ctx = context.WithValue(ctx, cancelKey{}, cancel)
	release := context.AfterFunc(s.aborted, func() { cancel(errShuttingDown) })
	return ctx, func(cause error) {
		release()
		cancel(cause)
	}
}

// prepare validates req and specifies the completion that will run it,
// with the lease admit acquired for it. A bad request is refused here,
// before any upstream call. A request whose idempotency key an identical
// start holds is an *errAttach: the caller attaches to that completion.
func (s *Server) prepare(ctx context.Context, req *completionv1.CompleteRequest, send func(*completionv1.CompletionEvent) error) (driver.Spec, acquired, error) {
	v, schema := s.cfg.validateFor(ctx, req)
	if len(v) > 0 {
		return driver.Spec{}, acquired{}, invalidArgument(v)
	}
	claim, err := s.claimKey(ctx, req, requestDigest(req, req))
	if err != nil {
		return driver.Spec{}, acquired{}, err
	}
	sp, lease, err := s.specify(withClaim(ctx, claim), "", req, schema, nil, send)
	if err != nil {
		claim.forget(ctx, s)
	}
	return sp, lease, err
}

// specify is the spec of a completion for a request that passed
// validation, whose output schema validation compiled: a new completion
// when id is "", else completion id, which this replica takes over (its
// log exists already). start is the Session's start when it is a
// Session's (req is then start's request), nil otherwise. It returns the
// lease admit acquired for a new resumable completion of a fleet replica.
func (s *Server) specify(ctx context.Context, id string, req *completionv1.CompleteRequest, schema *jsonschema.Schema, start *completionv1.SessionStart, send func(*completionv1.CompletionEvent) error) (driver.Spec, acquired, error) {
	policy, v := s.cfg.tighten(req.GetPolicy(), start.GetMaxTurns())
	if len(v) > 0 {
		return driver.Spec{}, acquired{}, invalidArgument(v)
	}
	routes, err := permit(ctx, req.GetFallbackRoutes(), s.cfg.Chain(req.GetRoute(), req.GetFallbackRoutes()))
	if err != nil {
		return driver.Spec{}, acquired{}, err
	}
	routes = recovery.Chain(policy, reasoned(routes, req.GetReasoning()))
	mc := recovery.Config{
		Policy: policy, System: req.GetSystem(), Messages: convert.ToMessages(req.GetMessages()),
		MaxTokens: int(req.GetMaxOutputTokens()), MaxTotalOutputTokens: int(req.GetMaxTotalOutputTokens()), TokenBudget: int(req.GetTokenBudget()),
		StopHook: schema != nil,
	}
	if d, ok := ctx.Deadline(); ok {
		mc.Deadline = d
	}
	mc.Routes = make([]recovery.Route, 0, len(routes))
	for _, r := range routes {
		mc.Routes = append(mc.Routes, r.Spec)
	}
	takeover := id != ""
	budget := s.keyBudget(ctx)
	if !takeover {
		if err := budget.refuse(ctx, s.refusals); err != nil {
			return driver.Spec{}, acquired{}, err
		}
		id = newID()
		if c := claimFrom(ctx); c != nil {
			id = c.rec.ID // the id its idempotency key maps to
		}
	}
	release, lease, err := s.admit(ctx, id, req, start, takeover)
	if err != nil {
		return driver.Spec{}, acquired{}, err
	}
	// A completion another replica may take over saves checkpoints: the
	// taking over replica continues from the last one.
	mc.Checkpoints = lease.lease != nil || lease.opening != nil || takeover
	return driver.Spec{
		ID: id, Request: req, Routes: routes, Machine: mc, Schema: schema,
		Caller: driver.Stateless{}, Key: CallerName(ctx), Observer: s.obs, Breakers: s.breakers, Now: s.cfg.Now, Rand: s.cfg.Rand,
		Conclude: func(r *recovery.Result) driver.Conclusion {
			e := s.ending(ctx, r)
			e.budgetEnd = budget.end()
			return conclusion(endStatus(e))
		},
		Budget:  budget.driver(),
		Release: release,
		Send:    send, Settled: req.GetDelivery() == completionv1.DeliveryMode_DELIVERY_MODE_SETTLED, Log: s.log,
	}, lease, nil
}

// Admit counts completion id as running and opens its log, or refuses it:
// UNAVAILABLE while the server drains, and when a resumable completion
// finds no room in the event log (a completion without a grace runs
// unlogged then). It registers the completion as one Cancel may end
// (watchCancel). The returned function counts it out and unregisters it.
//
// A resumable Stream or Session of a fleet replica (Config.Leases) first
// acquires the completion's lease, and only then logs its request (a
// Session's start), which is what makes it a completion another replica
// may take over: when the lease cannot be had (Redis does not answer), it
// runs as on a single replica, without a lease and never taken over (as
// its log degrades to memory).
func (s *Server) admit(ctx context.Context, id string, req *completionv1.CompleteRequest, start *completionv1.SessionStart, takeover bool) (func(), acquired, error) {
	if !s.running.enter() {
		return nil, acquired{}, drainingStatus()
	}
	unwatch := s.watchCancel(ctx, id, takeover) // before the log opens (completionContextCause)
	var once sync.Once
	release := func() {
		once.Do(func() {
			unwatch()
			s.running.exit()
		})
	}
	if takeover { // its log is open already
		return release, acquired{}, nil
	}
	resumable := req.GetResumeGrace().AsDuration() > 0
	meta := fleet.Meta{Owner: CallerName(ctx), Resumable: resumable && start != nil, Replica: s.cfg.Replica, Instance: s.instance()}
	var a acquired
	var err error
	if resumable && s.cfg.Leases != nil {
		if start != nil {
			meta.Request, _ = proto.Marshal(start) // what a takeover runs again
		} else {
			meta.Request, _ = proto.Marshal(req)
		}
		a, err = s.openResumable(ctx, id, meta, start)
	} else {
		err = s.log.Open(id, meta)
	}
	if err != nil && resumable {
		release()
		return nil, acquired{}, logFullStatus() // specify's caller forgets the claim
	}
	if c := claimFrom(ctx); c != nil && c.rec.ID == id {
		if err != nil { // unlogged: nobody could attach to it
			c.forget(ctx, s)
			return release, a, nil
		}
		c.opened(ctx, s)
		return s.releaseClaim(ctx, c, resumable, release), a, nil
	}
	return release, a, nil
}

// releaseClaim is release, which also keeps the record of claim c as
// long as the completion's log once it ends: or frees its key when the
// completion, without a resume grace, was cancelled by its caller's
// leaving, so that the caller's retry starts it afresh rather than
// attaching to an aborted one.
func (s *Server) releaseClaim(ctx context.Context, c *idemClaim, resumable bool, release func()) func() {
	return func() {
		if !resumable && errors.Is(context.Cause(ctx), context.Canceled) {
			c.forget(ctx, s)
		} else {
			c.ended(ctx, s)
		}
		release()
	}
}

// acquired is the lease admit acquired, at from (before it was asked);
// or the opening of a log that takes its lease with its first event.
type acquired struct {
	lease   *fleet.Lease
	from    time.Time
	opening *fleet.Opening
}

// openResumable opens the log of a new resumable completion id of a fleet
// replica, under its lease. A Stream's log opens with its first event
// (fleet.OpenAhead: the open goes to Redis beside the upstream call, not
// before it): nobody reads it before that event names the completion.
// Others open before the completion runs, since somebody reads their log
// at once, and a log whose lease nobody holds yet looks like one whose
// replica died, which a reader would take over: a Session's (the stream
// that starts it follows its log), and a start that claimed an idempotency
// key (its record says the log is open, c.opened, and the identical starts
// attach to it).
func (s *Server) openResumable(ctx context.Context, id string, meta fleet.Meta, start *completionv1.SessionStart) (acquired, error) {
	if c := claimFrom(ctx); start == nil && (c == nil || c.rec.ID != id) {
		op, err := fleet.OpenAhead(s.log, s.cfg.Leases, id, s.cfg.Replica, meta)
		if op != nil || err != nil {
			return acquired{opening: op}, err
		}
	}
	return s.openLeased(ctx, id, meta)
}

// openLeased opens the log of a new completion id under its lease
// (fleet.OpenLeased: one round trip where the log and the leases share a
// Redis), bounded as every call to the store for a lease is. Without a
// lease (logged), the completion runs on this replica alone; the error is
// the log's refusal, with no lease held.
func (s *Server) openLeased(ctx context.Context, id string, meta fleet.Meta) (acquired, error) {
	ls := s.cfg.Leases
	from := time.Now() // the clock of fleet.Ownership, which synctest fakes in tests
	actx, cancel := context.WithTimeout(ctx, fleet.TimingOf(ls).StoreCall())
	defer cancel()
	l, leaseErr, err := fleet.OpenLeased(actx, s.log, ls, id, s.cfg.Replica, meta)
	if l == nil && err == nil {
		s.unleased(ctx, id, leaseErr)
	}
	if l == nil {
		return acquired{}, err
	}
	return acquired{lease: l, from: from}, nil
}

// unleased says that the resumable completion id got no lease (why: err).
func (s *Server) unleased(ctx context.Context, id string, err error) {
	s.cfg.Logger.WarnContext(ctx, "no lease for a resumable completion (redis unreachable or its log full?): it runs on this replica alone, and no other replica can take it over if this one dies",
		"completion_id", id, "error", err.Error())
}

// Running counts the completions that run, so that a drain can refuse new
// ones and wait for these while the server still answers Attach and
// Session resume.
type running struct {
	mu       sync.Mutex
	n        int
	draining bool
	idle     chan struct{} // closed once draining with none running
}

// enter counts one more completion, unless the server drains.
func (r *running) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return false
	}
	r.n++
	return true
}

func (r *running) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n--; r.draining && r.n == 0 {
		close(r.idle)
	}
}

// drain refuses new completions from now on and returns a channel closed
// once none runs.
func (r *running) drain() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.draining {
		r.draining, r.idle = true, make(chan struct{})
		if r.n == 0 {
			close(r.idle)
		}
	}
	return r.idle
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "cmpl_" + hex.EncodeToString(b[:])
}
