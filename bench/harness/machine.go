package harness

import (
	"context"
	"fmt"
	"os"
	"time"
)

// snap is the CPU time the machine and each process of a measurement used
// so far, the mock's counters, and what a fleet's Redis counted.
type snap struct {
	machine           machineCPU
	self, mock, serve time.Duration
	conns             int64
	gcs               uint32 // the server's GC cycles
	redis             *redisStats
	// commitWait is what a fleet's replicas observed of their group
	// commit's waits (nil without Redis).
	commitWait *histogram
}

// snapshot reads the CPU of the machine, the harness, the mock and srv's
// processes (srv nil for the direct calls), and srv's Redis if it has one.
func (r *runner) snapshot(ctx context.Context, srv *server) (snap, error) {
	var s snap
	var err error
	if s.machine, err = readMachineCPU(); err != nil {
		return s, err
	}
	if s.self, err = cpuTime(os.Getpid()); err != nil {
		return s, err
	}
	if s.mock, err = cpuTime(r.mock.pid); err != nil {
		return s, err
	}
	if srv != nil {
		if err := s.readServer(ctx, srv); err != nil {
			return s, err
		}
	}
	st, err := mockStats(ctx, r.mockURL())
	s.conns = st.Conns
	return s, err
}

// readServer reads the CPU time and GC cycles of srv's processes, summed,
// and its Redis's counters.
func (s *snap) readServer(ctx context.Context, srv *server) error {
	var err error
	if s.serve, err = sumOver(srv.procs(), cpuTime); err != nil {
		return err
	}
	for _, p := range srv.procs() {
		mem, err := p.mem(ctx)
		if err != nil {
			return err
		}
		s.gcs += mem.NumGC
	}
	if srv.redis != nil {
		st, err := readRedisStats(ctx, srv.redis.addr)
		if err != nil {
			return err
		}
		s.redis = &st
		if s.commitWait, err = readCommitWait(ctx, srv.procs()); err != nil {
			return err
		}
	}
	return nil
}

// since sets m's server CPU, dials, Redis counters and foreign load from
// s0 to s.
func (s snap) since(s0 snap, m *measurement) {
	m.serverCPU = s.serve - s0.serve
	m.gcs = s.gcs - s0.gcs
	m.dials = s.conns - s0.conns
	ours := (s.self - s0.self) + (s.mock - s0.mock) + m.serverCPU
	if s.redis != nil && s0.redis != nil {
		d := s.redis.sub(*s0.redis)
		m.redis = &d
		ours += d.cpu
		m.commitWait = s.commitWait.sub(s0.commitWait)
	}
	d := s.machine.sub(s0.machine)
	if d.all > 0 {
		m.foreign = max(0, float64(d.busy-ours)/float64(d.all))
	}
}

// quietCheck is what one wait for a quiet machine found.
type quietCheck struct {
	what   string        // the measurements it preceded
	busy   float64       // the busy share of the last sample
	waited time.Duration // how long it waited
	quiet  bool          // whether the machine got quiet
}

// waitQuiet waits until a Window's sample of /proc/stat shows the machine
// at most MaxBusy busy, for up to Timeout. Once a wait timed out, later
// ones take one sample and go on: the report already warns, and a machine
// that stays busy would otherwise stretch the run by a timeout per phase.
func (r *runner) waitQuiet(ctx context.Context, what string) error {
	q := r.cfg.Quiet
	start, lastSaid := time.Now(), time.Now()
	for {
		busy, err := sampleBusy(ctx, q.Window)
		if err != nil {
			return err
		}
		waited := time.Since(start)
		c := quietCheck{what: what, busy: busy, waited: waited, quiet: busy <= q.MaxBusy}
		if c.quiet || r.gaveUp || q.Timeout < 0 || waited+q.Window > q.Timeout {
			if !c.quiet && !r.gaveUp {
				r.gaveUp = true
				r.progress("WARNING: the machine is still %.0f%% busy after %v (want ≤ %.0f%%): measuring anyway, the numbers will be noisy",
					100*busy, waited.Round(time.Second), 100*q.MaxBusy)
			}
			r.report.quiet = append(r.report.quiet, c)
			return nil
		}
		if time.Since(lastSaid) >= 10*time.Second {
			lastSaid = time.Now()
			r.progress("waiting for a quiet machine before %s: %.0f%% busy, want ≤ %.0f%%", what, 100*busy, 100*q.MaxBusy)
		}
	}
}

// sampleBusy is the busy share of the machine over d.
func sampleBusy(ctx context.Context, d time.Duration) (float64, error) {
	m0, err := readMachineCPU()
	if err != nil {
		return 0, err
	}
	if !sleep(ctx, d) {
		return 0, ctx.Err()
	}
	m1, err := readMachineCPU()
	if err != nil {
		return 0, fmt.Errorf("reading /proc/stat: %w", err)
	}
	return m1.sub(m0).busyShare(), nil
}
