package harness

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/completiond/completiond/bench/mock"
)

// target is what a measurement calls.
type target string

const (
	direct      target = "direct"
	bareRelay   target = "relay"
	completiond target = "completiond"
	// spreadOut is completiond again, its streams spread over channels of
	// Config.Spread streams each: the second configuration, which shows
	// what sharing one channel costs (Report's second table).
	spreadOut target = "completiond-spread"
	// fleetOf is Config.Fleet.Replicas completiond replicas sharing one
	// redis-server (RunFleet), against completiond alone.
	fleetOf target = "fleet"
	// unshared is the fleet's replicas again without Redis (RunFleet,
	// unless Fleet.SkipUnshared): what splitting the load over
	// Config.Fleet.Replicas processes costs on the machine, apart from
	// what sharing Redis costs (the report's second table).
	unshared target = "replicas"
)

// phase is one kind of load.
type phase string

const (
	// streaming: paced answers of Config.Tokens on every stream.
	streaming phase = "stream"
	// short: 1-token answers back to back on every stream.
	short phase = "short"
	// idle: every stream held open, silent.
	idle phase = "idle"
)

// Phases are the phases a run measures by default, in order.
var Phases = []string{string(streaming), string(short), string(idle)}

// key names one measurement.
type key struct {
	level, rep int
	target     target
	phase      phase
}

// measurement is one target's phase at one level in one repetition.
type measurement struct {
	load
	ttftP50, ttftP99 time.Duration
	// serverCPU is the server process's CPU time over the phase (0 for
	// the direct calls, which have no server).
	serverCPU time.Duration
	// gcs is the server's completed GC cycles over the phase.
	gcs uint32
	// rssPerStream, heapPerStream, stackPerStream (bytes) and
	// goroutinesPerStream are the idle phase's growth of the server
	// divided by the streams held.
	rssPerStream, heapPerStream, stackPerStream, goroutinesPerStream float64
	// peakPerStream (bytes) is, in the streaming phase, how far the
	// server's resident set rose at its peak (VmHWM) over what it was
	// before, divided by the streams: what a stream costs while it streams,
	// the number an auto --max-in-flight budgets against.
	peakPerStream float64
	// dials is the number of connections the mock accepted meanwhile.
	dials int64
	// redis is what a fleet's redis-server counted meanwhile (nil without
	// Redis); scriptShare, each command's share of its calls that scripts
	// ran, from the level's attribution pass (nil without one).
	redis       *redisStats
	scriptShare map[string]float64
	// commitWait is what the fleet's replicas observed of each event's
	// wait in their group commit meanwhile (nil without Redis).
	commitWait *histogram
	// foreign is the share of the machine other processes used meanwhile.
	foreign float64
}

// runner is one run under way.
type runner struct {
	cfg         Config
	dir         string
	completiond string
	mock        *proc
	report      *Report
	gaveUp      bool // a wait for quiet timed out: later ones sample once
	servers     int  // servers started, to name their config files
}

// Run runs the benchmark cfg describes and returns its report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	return run(ctx, cfg, func(r *runner) error {
		if err := r.measureAll(ctx); err != nil {
			return err
		}
		if r.cfg.ProfileDir != "" {
			return r.profileAll(ctx)
		}
		return nil
	})
}

// run builds completiond, starts the mock, and measures with measure.
func run(ctx context.Context, cfg Config, measure func(*runner) error) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &runner{cfg: cfg, dir: dir, report: newReport(cfg)}
	r.progress("building completiond with the benchmark's debug listener")
	if r.completiond, err = buildCompletiond(ctx, cfg.Go, dir); err != nil {
		return nil, err
	}
	if r.mock, err = r.startMock(ctx); err != nil {
		return nil, err
	}
	defer r.mock.stop()
	if err := measure(r); err != nil {
		return nil, err
	}
	r.report.End = time.Now()
	return r.report, nil
}

// measureAll measures every level, repetition and phase, the servers
// interleaved: relay then completiond in odd repetitions, the other way
// round in even ones, so that a drift of the machine favours neither.
func (r *runner) measureAll(ctx context.Context) error {
	for _, level := range r.cfg.Levels {
		for rep := 1; rep <= r.cfg.Reps; rep++ {
			order := []target{direct, bareRelay, completiond, spreadOut}
			if rep%2 == 0 {
				order = []target{direct, spreadOut, completiond, bareRelay}
			}
			for _, ph := range r.cfg.phases() {
				if err := r.waitQuiet(ctx, fmt.Sprintf("level %d, rep %d, %s", level, rep, ph)); err != nil {
					return err
				}
				for _, t := range order {
					if t == direct && ph == idle {
						continue // the direct calls have no server to hold streams in
					}
					if t == spreadOut && !r.cfg.spreads(level, ph) {
						continue
					}
					if err := r.measureOne(ctx, key{level, rep, t, ph}); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// measureOne measures k and adds it to the report.
func (r *runner) measureOne(ctx context.Context, k key) error {
	m, err := r.measure(ctx, k.level, k.target, k.phase)
	if err != nil {
		return fmt.Errorf("level %d, rep %d, %s, %s: %w", k.level, k.rep, k.phase, k.target, err)
	}
	r.report.add(k, m)
	r.progress("level %d · rep %d/%d · %s · %s: %s", k.level, k.rep, r.cfg.Reps, k.phase, k.target, m.summary(k.phase))
	return nil
}

// spec is the mock's answer in phase ph at level.
func (r *runner) spec(level int, ph phase) mock.Spec {
	switch ph {
	case streaming:
		return r.cfg.streamSpec(level)
	case idle:
		return mock.Spec{Hold: true}
	}
	return mock.Spec{Tokens: 1}
}

// measure runs one phase against one target: for a server, a fresh process.
func (r *runner) measure(ctx context.Context, level int, t target, ph phase) (*measurement, error) {
	spec := r.spec(level, ph)
	if t == direct {
		d := newDirect(r.mockURL()+"/v1", spec.Model(), level)
		defer d.close()
		return r.measureLoad(ctx, nil, d, level, ph)
	}
	perChannel := r.cfg.StreamsPerChannel
	if t == spreadOut {
		perChannel = r.cfg.Spread
	}
	srv, err := r.startServer(ctx, t, spec.Model(), level, perChannel)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if ph == idle {
		return r.measureIdle(ctx, srv, level)
	}
	return r.measureLoad(ctx, srv, srv.client, level, ph)
}

// measureLoad runs the streaming or short-answer load on c (srv's client,
// or the direct calls with srv nil).
func (r *runner) measureLoad(ctx context.Context, srv *server, c caller, level int, ph phase) (*measurement, error) {
	now := time.Now()
	span, stagger := loadSpan{until: now.Add(r.cfg.ShortFor)}, time.Duration(0)
	if ph == streaming {
		span = loadSpan{until: now.Add(r.cfg.StreamFor), minCalls: int64(r.cfg.MinAnswers), limit: now.Add(4 * r.cfg.StreamFor)}
		stagger = min(answerTime(r.spec(level, ph)), r.cfg.StreamFor)
	}
	before, err := r.snapshot(ctx, srv)
	if err != nil {
		return nil, err
	}
	var rss0 int64
	if srv != nil {
		if rss0, err = sumOver(srv.procs(), rss); err != nil {
			return nil, err
		}
	}
	l := runLoad(ctx, c, level, span, stagger)
	after, err := r.snapshot(ctx, srv)
	if err != nil {
		return nil, err
	}
	m := &measurement{load: l, ttftP50: percentile(l.ttfts, 50), ttftP99: percentile(l.ttfts, 99)}
	if srv != nil {
		if err := srv.alive(); err != nil {
			return nil, err
		}
		peak, err := sumOver(srv.procs(), peakRSS)
		if err != nil {
			return nil, err
		}
		m.peakPerStream = float64(peak-rss0) / float64(level)
	}
	after.since(before, m)
	return m, ctx.Err()
}

// sumOver is the sum of read over the processes' pids.
func sumOver[T int64 | time.Duration](procs []*proc, read func(pid int) (T, error)) (T, error) {
	var sum T
	for _, p := range procs {
		v, err := read(p.pid)
		if err != nil {
			return sum, err
		}
		sum += v
	}
	return sum, nil
}

// measureIdle holds level silent streams open in srv and measures what
// each costs it.
func (r *runner) measureIdle(ctx context.Context, srv *server, level int) (*measurement, error) {
	if err := r.waitHeld(ctx, func(n int64) bool { return n == 0 }); err != nil {
		return nil, err
	}
	// The baseline is read at rest too: the warm-up's goroutines gone.
	if !sleep(ctx, r.cfg.IdleSettle) {
		return nil, ctx.Err()
	}
	mem0, err := srv.memory(ctx)
	if err != nil {
		return nil, err
	}
	before, err := r.snapshot(ctx, srv)
	if err != nil {
		return nil, err
	}
	release := hold(ctx, srv.client, level)
	heldErr := r.waitHeld(ctx, func(n int64) bool { return n >= int64(level) })
	if heldErr == nil && sleep(ctx, r.cfg.IdleSettle) {
		heldErr = srv.alive()
	}
	mem1, memErr := srv.memory(ctx)
	after, snapErr := r.snapshot(ctx, srv)
	l := release()
	if err := firstErr(heldErr, memErr, snapErr, l.firstErr, ctx.Err()); err != nil {
		return nil, err
	}
	m := &measurement{load: l}
	mem1.perStream(mem0, level, m)
	after.since(before, m)
	return m, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitHeld waits until the mock holds a number of streams that ok accepts.
func (r *runner) waitHeld(ctx context.Context, ok func(int64) bool) error {
	deadline := time.Now().Add(heldTimeout)
	for {
		st, err := mockStats(ctx, r.mockURL())
		if err != nil {
			return err
		}
		if ok(st.Held) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the mock holds %d streams after %v", st.Held, heldTimeout)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// heldTimeout bounds the wait for the idle streams to reach the upstream.
const heldTimeout = time.Minute

// progress writes one line to cfg.Progress.
func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "loadbench: "+format+"\n", args...)
	}
}

// goVersion is the toolchain of the harness; completiond is built with the
// go command on the PATH (Config.Go), normally the same.
func goVersion() string { return runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH }
