package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// The fleet's promises under compound failures, at the level of
// processes: three replicas on one redis-server, callers streaming
// resumable completions (Streams, and Sessions:
// fleet_chaos_session_test.go) through them, and at random moments a
// replica killed (and started again), a replica stopped past its lease,
// Redis restarted empty or paused. Each completion's events, as the wire
// carried them across every call its caller made, are held to
// docs/fleet.md.

const (
	// chaosLeaseTTL is longer than any Redis outage the chaos makes: a
	// Redis away longer than the lease stops the completions holding
	// leases, by design.
	chaosLeaseTTL = 3 * time.Second
	// chaosCallers run at once, each its completions one after another.
	chaosCallers = 10
	// chaosWords is each answer's length in tokens, at 20 ms a token.
	chaosWords = 40
	// chaosCompletionDeadline bounds one completion, all its calls
	// included: a completion that has not ended by then is a failure.
	chaosCompletionDeadline = 60 * time.Second
	// chaosIdleAttach is how long one Attach may go without an event: a
	// takeover comes about a lease and a half after a death, a stopped
	// replica wakes a few seconds past its lease; four times that is a
	// hang.
	chaosIdleAttach = 20 * time.Second
	// chaosIdleStart is the same for a start, which may wait on the
	// idempotency record of a claimer that died before it opened its log:
	// docs/api.md lets that record block the key for its pending TTL, 30 s.
	chaosIdleStart = 45 * time.Second
	// chaosLostPatience is how long a caller goes on attaching after
	// NOT_FOUND or OUT_OF_RANGE before it takes them as the end: both are
	// transient while the owner lives (docs/fleet.md: after a Redis
	// restart other replicas answer NOT_FOUND until the owner publishes
	// the log again; the shared log stops short of what the owner's
	// caller saw until its next write), and the owner may be stopped for
	// the lease and two seconds more.
	chaosLostPatience = 12 * time.Second
)

// errChaosHang is the cause of a call cancelled because it went idle.
var errChaosHang = errors.New("no event and no status")

// TestFleetChaos runs chaosCallers callers against replicas A, B and C on
// one redis-server (--lease-ttl 3s) for COMPLETIOND_CHAOS_FOR while a
// seeded chaos (COMPLETIOND_CHAOS_SEED replays one) kills replicas with
// SIGKILL and starts them again, stops them past their lease, restarts
// Redis empty and pauses it. Each caller streams resumable completions
// (route sim, an idempotency key each) through a random live replica and,
// when a call breaks, attaches through another one after the last seq it
// received; every third runs Sessions instead, resumed the same way, which
// must also take each tool result and verdict once (chaosSessionCaller).
// Every completion must end whole — seqs 1..n once each across all its
// calls, one terminal transition and the result right after it,
// the kept text the result's and the sim's deterministic answer — or with
// a status docs/fleet.md allows for the failures it met (a log lost
// whole: NOT_FOUND; see lostAllowed). A call with no event
// and no status for long is a hang; a replica that exits or panics by
// itself fails the test. make fleet-chaos runs it; COMPLETIOND_CHAOS_LOGS
// names a directory for every replica process's whole output.
func TestFleetChaos(t *testing.T) {
	forEnv := os.Getenv("COMPLETIOND_CHAOS_FOR")
	if forEnv == "" {
		t.Skip("the fleet chaos test runs when COMPLETIOND_CHAOS_FOR is set: make fleet-chaos")
	}
	chaosFor, err := time.ParseDuration(forEnv)
	if err != nil || chaosFor <= 0 {
		t.Fatalf("COMPLETIOND_CHAOS_FOR=%q: want a positive Go duration", forEnv)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COMPLETIOND_CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("COMPLETIOND_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("fleet chaos: seed %d (COMPLETIOND_CHAOS_SEED=%d replays the chaos), %s of chaos", seed, seed, chaosFor)
	// First registered, so its check runs after every other cleanup: the
	// replicas killed, the connections closed, Redis stopped.
	testkit.NoLeaksAfterOutage(t)

	f := &chaosFleet{t: t, bin: buildCompletiond(t), rs: redistest.New(t), seed: seed, rng: rand.New(rand.NewPCG(seed, 0))}
	f.began = time.Now()
	for _, name := range []string{"A", "B", "C"} {
		f.slots = append(f.slots, &chaosSlot{name: name})
		f.launch(f.slots[len(f.slots)-1])
	}
	wants := f.answers()
	f.sessionWants = f.sessionAnswers(wants)

	finish := f.callers(wants)
	f.chaos(chaosFor)
	// The fleet whole again (every replica running, Redis answering), the
	// callers finish the completion each is on and start no other.
	f.heal()
	f.report(finish())
}

// callers starts chaosCallers callers, wants[i] the answer to caller i's
// prompt. finish stops them once each has ended the completion it is on,
// and returns every completion they ran. Should the test end before (a
// replica that cannot start fails it), its cleanup cancels their calls and
// waits for them, so that no caller outlives the test.
func (f *chaosFleet) callers(wants []string) (finish func() []*chaosCompletion) {
	var (
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		once    sync.Once
		results = make(chan *chaosCompletion, 64)
		done    []*chaosCompletion
	)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	for i := range chaosCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.caller(i, wants[i], stop, results)
		}()
	}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for c := range results {
			done = append(done, c)
		}
	}()
	finish = func() []*chaosCompletion {
		once.Do(func() {
			close(stop)
			wg.Wait()
			close(results)
			<-collected
		})
		return done
	}
	f.t.Cleanup(func() {
		f.cancel()
		finish()
	})
	return finish
}

// chaosFleet is the fleet under chaos: its replicas' slots, every process
// it started, and what the chaos did when.
type chaosFleet struct {
	t     *testing.T
	bin   string
	rs    *redistest.Server
	seed  uint64
	rng   *rand.Rand // the chaos's own: the callers have theirs
	began time.Time
	// ctx is the callers' calls': cancelled only when the test ends
	// before they have finished.
	ctx    context.Context
	cancel context.CancelFunc
	// sessionWants are the Session callers' uninterrupted answers
	// (fleet_chaos_session_test.go).
	sessionWants map[chaosSessionKey]string

	mu          sync.Mutex
	slots       []*chaosSlot
	procs       []*chaosReplica // every process started, killed ones included, for their logs
	actions     []chaosAction
	redisPaused bool
	pending     []chaosPending // recoveries due later: a restart, a SIGCONT, Redis resumed
	crashed     map[*chaosReplica]bool
}

// chaosSlot is one replica name; its process changes as the chaos kills
// and starts it.
type chaosSlot struct {
	name  string
	cur   *chaosReplica
	state string // "up", "killed" or "stopped"
}

// chaosReplica is one process of a slot.
type chaosReplica struct {
	label  string // name#incarnation, e.g. B#2
	p      *proc
	rpc    completionv1.CompletionClient
	killed bool // by the chaos: its exit is no crash
}

// chaosAction is a thing the chaos did, at an offset from the start.
type chaosAction struct {
	at   time.Duration
	kind string // kill, start, stop, cont, redis-restart, redis-pause, redis-resume
	what string
}

// chaosPending is a recovery the chaos does at a time of its own.
type chaosPending struct {
	due  time.Time
	kind string // start, cont, redis-resume
	slot *chaosSlot
}

// since is at as an offset from the start of the run.
func (f *chaosFleet) since(at time.Time) time.Duration {
	return at.Sub(f.began).Round(time.Millisecond)
}

// record notes an action in the timeline, and in the test's log.
func (f *chaosFleet) record(kind, what string) {
	f.mu.Lock()
	a := chaosAction{at: f.since(time.Now()), kind: kind, what: what}
	f.actions = append(f.actions, a)
	f.mu.Unlock()
	f.t.Logf("chaos %8s %-13s %s", a.at, kind, what)
}

// launch starts a process for slot (on the test's goroutine: startReplica
// may fail the test) and makes it the slot's.
func (f *chaosFleet) launch(s *chaosSlot) {
	f.t.Helper()
	p := startReplica(f.t, f.bin, s.name, f.rs.Addr, "--lease-ttl", chaosLeaseTTL.String())
	f.mu.Lock()
	n := 1
	for _, r := range f.procs {
		if r.p.name == s.name {
			n++
		}
	}
	r := &chaosReplica{label: fmt.Sprintf("%s#%d", s.name, n), p: p, rpc: rawClient(f.t, p)}
	f.procs = append(f.procs, r)
	s.cur, s.state = r, "up"
	f.mu.Unlock()
	f.record("start", r.label+" on "+p.addr)
}

// pick is a replica for a caller's next call: a random one of those
// running (neither killed nor stopped), another than avoid when there is
// one; nil while none runs.
func (f *chaosFleet) pick(rng *rand.Rand, avoid string) *chaosReplica {
	f.mu.Lock()
	defer f.mu.Unlock()
	var up, other []*chaosReplica
	for _, s := range f.slots {
		if s.state == "up" {
			up = append(up, s.cur)
			if s.cur.label != avoid {
				other = append(other, s.cur)
			}
		}
	}
	if len(other) > 0 {
		return other[rng.IntN(len(other))]
	}
	if len(up) > 0 {
		return up[rng.IntN(len(up))]
	}
	return nil
}

// answers are the sim's whole answers to each caller's prompt, from an
// uninterrupted Complete before the chaos (the sim is deterministic: the
// answer depends on the prompt and sim.words only).
func (f *chaosFleet) answers() []string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wants := make([]string, chaosCallers)
	for i := range wants {
		res, err := f.slots[0].cur.rpc.Complete(ctx, &completionv1.CompleteRequest{
			Route:    "sim",
			Messages: chaosPrompt(i),
			Metadata: map[string]string{"sim.pace": "1ms", "sim.words": strconv.Itoa(chaosWords)},
		})
		if err != nil {
			f.t.Fatalf("the uninterrupted answer to caller %d's prompt: %v", i, err)
		}
		if wants[i] = resultText(res.GetResult()); wants[i] == "" {
			f.t.Fatalf("the uninterrupted answer to caller %d's prompt is empty", i)
		}
	}
	return wants
}

// chaosPrompt is caller i's prompt: one each, so that an answer carried to
// the wrong caller shows.
func chaosPrompt(i int) []*completionv1.Message {
	return []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{
		Text: &completionv1.TextBlock{Text: fmt.Sprintf("Tell caller %d about chaos in a fleet.", i)}}}}}}
}

// chaos does random harm for d, then returns with recoveries possibly
// pending (heal does them). It runs on the test's goroutine, so that a
// replica it starts may fail the test.
func (f *chaosFleet) chaos(d time.Duration) {
	end := time.Now().Add(d)
	next := time.Now().Add(f.gap())
	for {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		f.recover(now, false)
		f.watchCrashes()
		if !now.Before(next) {
			f.harm()
			next = time.Now().Add(f.gap())
		}
		// Short sleeps: a recovery falls due, a crash shows, within 50 ms.
		time.Sleep(min(50*time.Millisecond, time.Until(next), time.Until(end)))
	}
}

// gap is the pause before the chaos's next harm: often short, so that
// failures overlap (a kill during a Redis pause, two replicas down).
func (f *chaosFleet) gap() time.Duration {
	return 200*time.Millisecond + time.Duration(f.rng.Int64N(int64(2300*time.Millisecond)))
}

// harm does one random harm the fleet can take: a replica killed or
// stopped only while another runs, Redis restarted or paused only while
// it is not paused already.
func (f *chaosFleet) harm() {
	f.mu.Lock()
	var up []*chaosSlot
	for _, s := range f.slots {
		if s.state == "up" {
			up = append(up, s)
		}
	}
	paused := f.redisPaused
	f.mu.Unlock()
	type choice struct {
		weight int
		do     func()
	}
	var choices []choice
	if len(up) >= 2 {
		victim := up[f.rng.IntN(len(up))]
		choices = append(choices,
			choice{35, func() { f.kill(victim) }},
			choice{25, func() { f.stop(victim) }})
	}
	if !paused {
		choices = append(choices,
			choice{20, f.restartRedis},
			choice{20, f.pauseRedis})
	}
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	if total == 0 {
		return
	}
	n := f.rng.IntN(total)
	for _, c := range choices {
		if n < c.weight {
			c.do()
			return
		}
		n -= c.weight
	}
}

// kill sends SIGKILL to s's process; a fresh one with its name starts
// 0.3 to 2.5 s later.
func (f *chaosFleet) kill(s *chaosSlot) {
	f.mu.Lock()
	r := s.cur
	r.killed, s.state = true, "killed"
	f.pending = append(f.pending, chaosPending{due: time.Now().Add(f.between(300*time.Millisecond, 2500*time.Millisecond)), kind: "start", slot: s})
	f.mu.Unlock()
	f.record("kill", r.label)
	r.p.kill()
}

// stop sends SIGSTOP to s's process, past its lease: SIGCONT comes
// 0.5 to 2 s after the lease would have lapsed.
func (f *chaosFleet) stop(s *chaosSlot) {
	f.mu.Lock()
	r := s.cur
	s.state = "stopped"
	f.pending = append(f.pending, chaosPending{due: time.Now().Add(chaosLeaseTTL + f.between(500*time.Millisecond, 2*time.Second)), kind: "cont", slot: s})
	f.mu.Unlock()
	f.record("stop", r.label)
	r.p.signal(f.t, syscall.SIGSTOP)
}

// restartRedis kills Redis and starts it again, empty, on its port. The
// restart is recorded when Redis dies, and again when it answers (which
// may take half a second: the port lingers).
func (f *chaosFleet) restartRedis() {
	f.record("redis-restart", "killed")
	f.rs.Restart()
	f.record("redis-up", "empty")
}

// pauseRedis stops Redis (SIGSTOP) for 0.6 to 1.4 s: far shorter than the
// lease.
func (f *chaosFleet) pauseRedis() {
	f.mu.Lock()
	f.redisPaused = true
	f.pending = append(f.pending, chaosPending{due: time.Now().Add(f.between(600*time.Millisecond, 1400*time.Millisecond)), kind: "redis-resume"})
	f.mu.Unlock()
	f.record("redis-pause", "")
	f.rs.Pause()
}

// between is a random duration in [lo, hi).
func (f *chaosFleet) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(f.rng.Int64N(int64(hi-lo)))
}

// recover does the recoveries due at now (all of them when all): Redis
// resumed first, since a replica started waits for its health, which
// waits for Redis.
func (f *chaosFleet) recover(now time.Time, all bool) {
	f.mu.Lock()
	var due, later []chaosPending
	for _, p := range f.pending {
		// A start waits out a Redis pause that is not due to end now: the
		// replica's health, which its start waits for, waits for Redis.
		if all || !p.due.After(now) && !(p.kind == "start" && f.redisPaused && !f.resumeDue(now)) {
			due = append(due, p)
		} else {
			later = append(later, p)
		}
	}
	slices.SortStableFunc(due, func(a, b chaosPending) int {
		return boolInt(b.kind == "redis-resume") - boolInt(a.kind == "redis-resume")
	})
	f.pending = later
	f.mu.Unlock()
	for _, p := range due {
		switch p.kind {
		case "redis-resume":
			f.rs.Resume()
			f.mu.Lock()
			f.redisPaused = false
			f.mu.Unlock()
			f.record("redis-resume", "")
		case "cont":
			f.mu.Lock()
			r := p.slot.cur
			p.slot.state = "up"
			f.mu.Unlock()
			r.p.signal(f.t, syscall.SIGCONT)
			f.record("cont", r.label)
		case "start":
			f.launch(p.slot)
		}
	}
}

// resumeDue reports whether Redis's resume is due at now; f.mu is held.
func (f *chaosFleet) resumeDue(now time.Time) bool {
	for _, p := range f.pending {
		if p.kind == "redis-resume" && !p.due.After(now) {
			return true
		}
	}
	return false
}

// boolInt is 1 for true, for sorting.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// watchCrashes notes a replica that exited though the chaos did not kill
// it (its test fails at the end), and starts its slot again so that the
// run goes on.
func (f *chaosFleet) watchCrashes() {
	f.mu.Lock()
	var gone []*chaosSlot
	for _, s := range f.slots {
		select {
		case <-s.cur.p.done:
			if !s.cur.killed {
				if f.crashed == nil {
					f.crashed = map[*chaosReplica]bool{}
				}
				f.crashed[s.cur] = true
				s.cur.killed, s.state = true, "killed"
				gone = append(gone, s)
			}
		default:
		}
	}
	f.mu.Unlock()
	for _, s := range gone {
		f.record("crashed", s.cur.label)
		f.launch(s)
	}
}

// heal ends the chaos: every pending recovery done now, so that every
// replica runs and Redis answers.
func (f *chaosFleet) heal() {
	f.recover(time.Now(), true)
	f.watchCrashes()
	f.record("healed", "the chaos is over")
}

// happened reports whether the chaos did one of kinds between from and to
// (offsets from the start).
func (f *chaosFleet) happened(from, to time.Duration, kinds ...string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.actions {
		if a.at >= from && a.at <= to && slices.Contains(kinds, a.kind) {
			return true
		}
	}
	return false
}

// when is the chaos's actions of kinds between from and to.
func (f *chaosFleet) when(from, to time.Duration, kinds ...string) []chaosAction {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []chaosAction
	for _, a := range f.actions {
		if a.at >= from && a.at <= to && slices.Contains(kinds, a.kind) {
			out = append(out, a)
		}
	}
	return out
}

// timeline is the chaos's actions between from and to, one a line.
func (f *chaosFleet) timeline(from, to time.Duration) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, a := range f.actions {
		if a.at >= from && a.at <= to {
			fmt.Fprintf(&b, "    %8s %-13s %s\n", a.at, a.kind, a.what)
		}
	}
	return b.String()
}

// chaosCompletion is one completion as its caller lived it.
type chaosCompletion struct {
	caller, n   int
	session     *chaosSession // a Session's caller's side; nil for a Stream
	key         string
	began, end  time.Duration
	id          string
	events      []*completionv1.CompletionEvent
	calls       []chaosCall
	lostTries   int    // NOT_FOUND or OUT_OF_RANGE answers it attached again after
	statusTries int    // Attach calls after the result, for the status a broken call did not bring
	outcome     string // ok, or the final status's code
	accepted    bool   // a final status docs/fleet.md allows for the failures the completion met
	// continued: the answer went on past the sim's whole answer, which a
	// replica killed after streaming all of it, before its end, left in
	// the log for a takeover to continue (docs/fleet.md, The end is one
	// write); accepted.
	continued bool
	failure   string // why it breaks a promise; empty when none
}

// chaosCall is one Stream or Attach call of a completion.
type chaosCall struct {
	via    string
	kind   string // start or attach
	after  uint64
	at     time.Duration
	took   time.Duration
	events int
	end    string
}

// caller runs completions one after another through random replicas until
// stop, and sends each to results once it has ended.
func (f *chaosFleet) caller(i int, want string, stop <-chan struct{}, results chan<- *chaosCompletion) {
	rng := rand.New(rand.NewPCG(f.seed, uint64(i)+1))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		c := &chaosCompletion{caller: i, n: n, key: fmt.Sprintf("chaos-%d-%d-%d", f.seed, i, n)}
		if chaosSessionCaller(i) {
			f.session(rng, c, want)
		} else {
			f.complete(rng, c, want)
		}
		results <- c
		// A completion that broke a promise stops its caller: what
		// follows is noise around the failure it shows.
		if c.failure != "" {
			return
		}
	}
}

// complete runs c to its end: a Stream through a random replica, then, as
// long as calls break before the result, an Attach through another after
// the last seq received (a start sent again with its idempotency key while
// no event came), as docs/clients.md's reconnect rule has it, but also
// through NOT_FOUND and OUT_OF_RANGE for chaosLostPatience, which are
// transient in a fleet while the completion's replica lives.
func (f *chaosFleet) complete(rng *rand.Rand, c *chaosCompletion, want string) {
	req := &completionv1.CompleteRequest{
		Route:          "sim",
		Messages:       chaosPrompt(c.caller),
		Metadata:       map[string]string{"sim.pace": "20ms", "sim.words": strconv.Itoa(chaosWords)},
		ResumeGrace:    durationpb.New(30 * time.Second),
		IdempotencyKey: c.key,
	}
	f.drive(rng, c, want, func(r *chaosReplica) (chaosCall, bool, error) { return f.call(r, c, req) })
}

// drive runs c to its end through calls of through (a Stream's start or
// Attach, a Session's start or resume), with complete's rules between them.
func (f *chaosFleet) drive(rng *rand.Rand, c *chaosCompletion, want string, through func(*chaosReplica) (chaosCall, bool, error)) {
	start := time.Now()
	c.began = f.since(start)
	defer func() { c.end = f.since(time.Now()) }()
	var lostSince time.Time
	avoid := ""
	for try := 0; ; try++ {
		if f.ctx.Err() != nil {
			c.outcome = "abandoned: the test ended"
			return
		}
		if time.Since(start) > chaosCompletionDeadline {
			c.failure = fmt.Sprintf("no end %s after its start (%d calls)", chaosCompletionDeadline, len(c.calls))
			return
		}
		r := f.pick(rng, avoid)
		if r == nil { // every replica down for a moment (stopped and restarting)
			chaosSleep(f.ctx, 50*time.Millisecond)
			continue
		}
		call, hung, err := through(r)
		c.calls = append(c.calls, call)
		if f.ctx.Err() != nil {
			c.outcome = "abandoned: the test ended"
			return
		}
		if call.events > 0 {
			lostSince = time.Time{}
		}
		if hung {
			c.failure = fmt.Sprintf("a hang: call %d (%s through %s) had no event and no status for %s", len(c.calls), call.kind, call.via, idleOf(call.kind))
			return
		}
		done := len(c.events) > 0 && c.events[len(c.events)-1].GetResult() != nil
		code := status.Code(err)
		if errors.Is(err, io.EOF) {
			code = codes.OK // the stream's OK end
		}
		switch {
		case done && code == codes.Unavailable && errorReason(err) == "":
			// The call broke after the result, before its status: an
			// Attach after the result's seq answers the status alone.
			if c.statusTries++; c.statusTries <= 20 {
				avoid = r.label
				chaosSleep(f.ctx, 50*time.Millisecond)
				continue
			}
			c.outcome = "OK, status unknown"
			c.failure = f.whole(c, want)
			return
		case done && (code == codes.NotFound || code == codes.OutOfRange):
			// The status went with its log (its replica and Redis's
			// copy both lost, for good once the patience is over), not
			// the answer: the result is whole.
			if lostSince.IsZero() {
				lostSince = time.Now()
			}
			if time.Since(lostSince) < chaosLostPatience {
				c.lostTries++
				avoid = r.label
				chaosSleep(f.ctx, 200*time.Millisecond)
				continue
			}
			c.outcome = "OK, status lost (" + code.String() + ")"
			if c.accepted, c.failure = f.lostAllowed(c, code); c.failure == "" {
				c.failure = f.whole(c, want)
			}
			return
		case done:
			// The result came: the status, whatever it is, is the
			// completion's own end.
			c.outcome = code.String()
			if code != codes.OK {
				c.failure = fmt.Sprintf("the completion ended %v after its result", err)
				return
			}
			c.failure = f.whole(c, want)
			return
		}
		wait := time.Duration(0)
		switch {
		case errors.Is(err, io.EOF), code == codes.Unavailable:
			// A call cut short, or UNAVAILABLE before the result: attach
			// again (start again before the started event), not sooner
			// than a RetryInfo asks.
			wait = chaosRetryDelay(err)
		case code == codes.NotFound || code == codes.OutOfRange:
			if lostSince.IsZero() {
				lostSince = time.Now()
			}
			if time.Since(lostSince) < chaosLostPatience {
				c.lostTries++
				wait = 200 * time.Millisecond
				break
			}
			c.outcome = code.String()
			c.accepted, c.failure = f.lostAllowed(c, code)
			return
		case code == codes.FailedPrecondition && errorReason(err) == "COMPLETION_LOST":
			c.outcome = code.String() + " COMPLETION_LOST"
			c.accepted, c.failure = f.lostAllowed(c, code)
			return
		default:
			c.outcome = code.String()
			c.failure = fmt.Sprintf("call %d (%s through %s) ended %v before the result", len(c.calls), call.kind, call.via, err)
			return
		}
		avoid = r.label
		// Full jitter up to a backoff doubling from 50 ms to 1 s, as the
		// client libraries pause.
		backoff := min(50*time.Millisecond<<min(try, 5), time.Second)
		chaosSleep(f.ctx, max(wait, time.Duration(rng.Int64N(int64(backoff)))))
	}
}

// chaosSleep sleeps for d, or until ctx ends.
func chaosSleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// idleOf is how long a call of kind may go without an event.
func idleOf(kind string) time.Duration {
	if kind == "start" {
		return chaosIdleStart
	}
	return chaosIdleAttach
}

// call makes one call of c through r — its start when no event came yet,
// else an Attach after the last seq received — and adds the events it
// receives to c's. hung says it went idle for longer than idleOf allows
// and was cancelled; err is how the call ended (io.EOF for OK).
func (f *chaosFleet) call(r *chaosReplica, c *chaosCompletion, req *completionv1.CompleteRequest) (call chaosCall, hung bool, err error) {
	call = chaosCall{via: r.label, kind: "start", at: f.since(time.Now())}
	if c.id != "" {
		call.kind, call.after = "attach", c.events[len(c.events)-1].GetSeq()
	}
	idle := idleOf(call.kind)
	ctx, cancel := context.WithCancelCause(f.ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(idle, func() { cancel(errChaosHang) })
	defer watchdog.Stop()
	var st interface {
		Recv() (*completionv1.CompletionEvent, error)
	}
	if call.kind == "start" {
		st, err = r.rpc.Stream(ctx, req)
	} else {
		st, err = r.rpc.Attach(ctx, &completionv1.AttachRequest{CompletionId: c.id, AfterSeq: call.after})
	}
	for err == nil {
		var ev *completionv1.CompletionEvent
		if ev, err = st.Recv(); err == nil {
			watchdog.Reset(idle)
			c.events = append(c.events, ev)
			call.events++
			if id := ev.GetStarted().GetCompletionId(); id != "" && c.id == "" {
				c.id = id
			}
		}
	}
	hung = errors.Is(context.Cause(ctx), errChaosHang)
	call.took = f.since(time.Now()) - call.at
	call.end = chaosCallEnd(err)
	return call, hung, err
}

// chaosCallEnd is how a call ended (err, io.EOF for OK), for its line in a
// report.
func chaosCallEnd(err error) string {
	if errors.Is(err, io.EOF) {
		return "OK"
	}
	s := status.Convert(err)
	end := s.Code().String()
	if reason := errorReason(err); reason != "" {
		end += " " + reason
	}
	return end + ": " + s.Message()
}

// through reports whether one of c's calls went through the replica
// labelled label.
func (c *chaosCompletion) through(label string) bool {
	return slices.ContainsFunc(c.calls, func(call chaosCall) bool { return call.via == label })
}

// chaosRetryDelay is the RetryInfo delay of err's status; 0 without one.
func chaosRetryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// whole checks a completion that received its result with an OK status:
// every seq once, in order, across all its calls; the result last; the
// kept text the result's and the sim's answer; no word twice unless a
// transition discarded an attempt. It returns what is broken, or "".
func (f *chaosFleet) whole(c *chaosCompletion, want string) string {
	for i, ev := range c.events {
		if ev.GetSeq() != uint64(i+1) {
			return fmt.Sprintf("event %d has seq %d: every seq exactly once is broken", i, ev.GetSeq())
		}
	}
	// The API's contract: exactly one terminal transition, and the result
	// right after it.
	var terminal []uint64
	for _, ev := range c.events {
		if ev.GetTransition().GetTerminal() {
			terminal = append(terminal, ev.GetSeq())
		}
	}
	if n := uint64(len(c.events)); len(terminal) != 1 || terminal[0] != n-1 {
		return fmt.Sprintf("terminal transitions at seqs %v, the result at seq %d: want exactly one, right before the result", terminal, n)
	}
	res := c.events[len(c.events)-1].GetResult()
	if kept := keptText(c.events); kept != resultText(res) {
		return fmt.Sprintf("the kept deltas assemble %q, the result says %q", kept, resultText(res))
	}
	if got := resultText(res); got != want {
		if continuedPastTheEnd(c.events, want) {
			c.continued = true
			return ""
		}
		return fmt.Sprintf("the answer is %q, the sim's is %q", got, want)
	}
	discarded := false
	for _, ev := range c.events {
		discarded = discarded || len(ev.GetTransition().GetDiscardedAttempts()) > 0 || ev.GetTransition().GetDiscardOutput()
	}
	if all := allText(c.events); !discarded && all != want {
		return fmt.Sprintf("the deltas concatenate to %q with no attempt discarded: a word twice", all)
	}
	return ""
}

// continuedPastTheEnd reports whether evs are of a completion taken over
// (REPLICA_LOST, STREAM_RESUME) when the log held the sim's whole answer,
// want, and continued from it: what docs/fleet.md says of a replica
// killed after an attempt streamed its whole answer, before the end's
// write (the log cannot tell that the attempt had ended). The deltas
// before the takeover are want, no word twice; the result is want, then
// what the sim says when asked to continue an answer it gave in full
// (" More:" …), which the deltas after the takeover are.
func continuedPastTheEnd(evs []*completionv1.CompletionEvent, want string) bool {
	for i, ev := range evs {
		tr := ev.GetTransition()
		if tr.GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST &&
			tr.GetReason() == completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME && allText(evs[:i]) == want {
			rest, ok := strings.CutPrefix(resultText(evs[len(evs)-1].GetResult()), want)
			return ok && strings.HasPrefix(rest, " More:") && allText(evs[i:]) == rest
		}
	}
	return false
}

// lostAllowed says whether a completion's end with code before its result
// is one docs/fleet.md allows for the failures it met (accepted), and
// otherwise what promise it breaks. Each needs a replica killed while the
// completion ran (K), one that a call of its caller went through (the one
// that ran it is: its start went there, or a call that took it over), and:
//
//   - NOT_FOUND: "a log whose replica restarted or died too is lost" —
//     Redis restarted empty from 2 s before K (the owner had not published
//     the log again yet) to two leases after it (nobody had taken it over
//     yet); or the completion started within 2.5 s after Redis was
//     restarted or paused (a Stream started while Redis does not answer
//     runs in memory only, never taken over).
//   - OUT_OF_RANGE: the shared log short of what its caller saw, for good
//     once the owner died before its next write: Redis restarted or
//     paused within 2 s before K (or a stop, which is a partition).
//   - COMPLETION_LOST: a log whose request never joined it (its replica
//     killed right after the open: the caller never saw started), or a
//     Stream started while Redis did not answer.
func (f *chaosFleet) lostAllowed(c *chaosCompletion, code codes.Code) (bool, string) {
	end := f.since(time.Now())
	outageAtStart := f.happened(c.began-2500*time.Millisecond, c.began, "redis-restart", "redis-pause")
	ok := false
	for _, k := range f.when(c.began, end, "kill", "stop") {
		if !c.through(k.what) {
			// Not the replica that ran it: the completion is run by the
			// replica its start went through or one that took it over,
			// for a call of its caller.
			continue
		}
		killed := k.kind == "kill"
		switch code {
		case codes.NotFound:
			ok = ok || killed && (outageAtStart || f.happened(k.at-2*time.Second, k.at+2*chaosLeaseTTL, "redis-restart"))
		case codes.OutOfRange:
			ok = ok || f.happened(k.at-2*time.Second, k.at, "redis-restart", "redis-pause")
		case codes.FailedPrecondition:
			ok = ok || killed && (len(c.events) == 0 || outageAtStart)
		}
	}
	if ok {
		return true, ""
	}
	return false, fmt.Sprintf("ended %s before its result, though the chaos did not do what docs/fleet.md says loses it", code)
}

// report tells the outcomes and fails the test for each completion that
// broke a promise, with the seed, the chaos before it, its events and its
// replicas' log lines about it; and for each replica that crashed or
// panicked.
func (f *chaosFleet) report(done []*chaosCompletion) {
	t := f.t
	counts := map[string]int{}
	var takeovers, reattached, lostTries, fail int
	for _, c := range done {
		key := c.outcome
		switch {
		case c.failure != "":
			key = "FAILED " + c.outcome
			fail++
		case c.accepted:
			key = "accepted " + c.outcome
		case c.continued:
			key = "accepted " + c.outcome + " continued past its end"
		}
		if c.session != nil {
			key = c.session.kind.name + ": " + key
		}
		counts[key]++
		if len(c.calls) > 1 {
			reattached++
		}
		lostTries += c.lostTries
		for _, ev := range c.events {
			if ev.GetTransition().GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST {
				takeovers++
				break
			}
		}
		if c.failure != "" || c.outcome != "OK" {
			say := t.Logf
			if c.failure != "" {
				say = t.Errorf
			}
			say("seed %d: caller %d's completion %d (%s, key %s), %s–%s: %s %s\ncalls:\n%s\nthe chaos from 5s before it:\n%s\nthe events it received:\n%s\nits replicas' log lines:\n%s",
				f.seed, c.caller, c.n, c.id, c.key, c.began, c.end, c.outcome, c.failure,
				chaosCalls(c.calls), f.timeline(c.began-5*time.Second, c.end), chaosEvents(c.events), f.logLines(c))
		}
	}
	kinds := map[string]int{}
	f.mu.Lock()
	for _, a := range f.actions {
		kinds[a.kind]++
	}
	procs := slices.Clone(f.procs)
	crashed := f.crashed
	f.mu.Unlock()
	t.Logf("fleet chaos, seed %d: %d completions: %v; %d attached again at least once, %d taken over (REPLICA_LOST), %d NOT_FOUND/OUT_OF_RANGE answers attached through; chaos: %v",
		f.seed, len(done), counts, reattached, takeovers, lostTries, kinds)
	f.reportSessions(done)
	for _, r := range procs {
		logs := r.p.logs.String()
		if crashed[r] {
			t.Errorf("seed %d: replica %s exited by itself: %s", f.seed, r.label, tail(logs, 4000))
		}
		for line := range strings.Lines(logs) {
			if strings.Contains(line, "panic") || strings.Contains(line, "fatal error") || strings.Contains(line, "DATA RACE") {
				t.Errorf("seed %d: replica %s: %s", f.seed, r.label, line)
			}
		}
	}
	if fail > 0 {
		t.Errorf("seed %d: %d completions broke a promise (COMPLETIOND_CHAOS_SEED=%d replays the chaos)", f.seed, fail, f.seed)
	}
	// The test's log has the lines about each failure; the whole of every
	// process's output, for a post-mortem, where COMPLETIOND_CHAOS_LOGS says.
	if dir := os.Getenv("COMPLETIOND_CHAOS_LOGS"); dir != "" {
		for _, r := range procs {
			if err := os.WriteFile(fmt.Sprintf("%s/%d-%s.log", dir, f.seed, strings.ReplaceAll(r.label, "#", "-")), []byte(r.p.logs.String()), 0o644); err != nil {
				t.Errorf("COMPLETIOND_CHAOS_LOGS: %v", err)
			}
		}
	}
}

// chaosCalls is calls, one a line.
func chaosCalls(calls []chaosCall) string {
	var b strings.Builder
	for i, c := range calls {
		fmt.Fprintf(&b, "    %2d %8s +%-7s %-6s via %-4s after %-3d %3d events, %s\n", i+1, c.at, c.took, c.kind, c.via, c.after, c.events, c.end)
	}
	return b.String()
}

// chaosEvents is evs, one a line, shortly.
func chaosEvents(evs []*completionv1.CompletionEvent) string {
	var b strings.Builder
	for i, ev := range evs {
		fmt.Fprintf(&b, "    #%-3d seq %-3d turn %d attempt %d ", i+1, ev.GetSeq(), ev.GetTurn(), ev.GetAttempt())
		switch {
		case ev.GetStarted() != nil:
			fmt.Fprintf(&b, "started %s", ev.GetStarted().GetCompletionId())
		case ev.GetDelta() != nil:
			fmt.Fprintf(&b, "delta %q", ev.GetDelta().GetText())
		case ev.GetTransition() != nil:
			tr := ev.GetTransition()
			fmt.Fprintf(&b, "transition %s terminal=%v error=%s discarded=%v %q", tr.GetReason(), tr.GetTerminal(), tr.GetError().GetKind(), tr.GetDiscardedAttempts(), tr.GetMessage())
		case ev.GetUsage() != nil:
			b.WriteString("usage")
		case ev.GetToolCall() != nil:
			fmt.Fprintf(&b, "toolCall %s", ev.GetToolCall().GetId())
		case ev.GetStopHookRequest() != nil:
			fmt.Fprintf(&b, "stopHookRequest %s %q", ev.GetStopHookRequest().GetHookId(), messageText(ev.GetStopHookRequest().GetAnswer()))
		case ev.GetResult() != nil:
			fmt.Fprintf(&b, "result %q", resultText(ev.GetResult()))
		default:
			b.WriteString("other")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// logLines are the replicas' log lines about c (naming its id), and their
// lines about Redis and leases (naming no completion) while c ran, each
// prefixed with its process.
func (f *chaosFleet) logLines(c *chaosCompletion) string {
	f.mu.Lock()
	procs := slices.Clone(f.procs)
	f.mu.Unlock()
	from, to := f.began.Add(c.began-time.Second), f.began.Add(c.end+time.Second)
	var b strings.Builder
	n := 0
	for _, r := range procs {
		for line := range strings.Lines(r.p.logs.String()) {
			keep := c.id != "" && strings.Contains(line, c.id)
			if !keep && !strings.Contains(line, `"completion_id"`) {
				var l struct {
					Time  time.Time
					Level string
					Msg   string
				}
				if json.Unmarshal([]byte(line), &l) == nil && !l.Time.Before(from) && !l.Time.After(to) {
					keep = l.Level == "WARN" || l.Level == "ERROR" || strings.HasPrefix(l.Msg, "redis")
				}
			}
			if keep && n < 120 {
				fmt.Fprintf(&b, "    %s %s", r.label, line)
				n++
			}
		}
	}
	return b.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
