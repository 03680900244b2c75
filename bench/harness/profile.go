package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// profileAll writes a CPU profile of each server under the top level's
// streaming load and its short-answer load, and a heap profile with the top
// level's streams held idle, after the measurements and apart from them:
// profiling costs the profiled process a little. The fleet benchmark's are
// of completiond alone and of the fleet's first replica, streaming.
func (r *runner) profileAll(ctx context.Context) error {
	if err := os.MkdirAll(r.cfg.ProfileDir, 0o755); err != nil {
		return err
	}
	level := slices.Max(r.cfg.Levels)
	targets, phases := []target{bareRelay, completiond}, r.cfg.phases()
	if r.cfg.fleet {
		// The fleet benchmark measures the streaming phase only; a fleet's
		// profile is its first replica's, which serves a third of the streams.
		targets, phases = []target{completiond, fleetOf}, []phase{streaming}
	}
	for _, ph := range phases {
		for _, t := range targets {
			path := filepath.Join(r.cfg.ProfileDir, fmt.Sprintf("%s-%s-%d.pprof", t, ph, level))
			do := r.profile
			if ph == idle {
				do = r.heapProfile
			}
			if err := do(ctx, t, ph, level, path); err != nil {
				return fmt.Errorf("profiling %s, %s: %w", t, ph, err)
			}
			r.report.Profiles = append(r.report.Profiles, path)
			r.progress("wrote %s", path)
		}
	}
	return nil
}

// profile runs phase ph at level against a fresh t while its CPU profile
// is taken, and writes the profile to path.
func (r *runner) profile(ctx context.Context, t target, ph phase, level int, path string) error {
	srv, err := r.startServer(ctx, t, r.spec(level, ph).Model(), level, r.cfg.StreamsPerChannel)
	if err != nil {
		return err
	}
	defer srv.stop()
	seconds := max(1, int(r.cfg.ProfileFor.Round(time.Second)/time.Second))
	type result struct {
		body []byte
		err  error
	}
	fetch := func(what string) <-chan result {
		got := make(chan result, 1)
		go func() {
			body, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", srv.debug, what, seconds))
			got <- result{body, err}
		}()
		return got
	}
	got, traced := fetch("profile"), (<-chan result)(nil)
	if r.cfg.Trace && ph == streaming {
		traced = fetch("trace")
	}
	stagger := time.Duration(0)
	if ph == streaming {
		stagger = min(answerTime(r.spec(level, ph)), r.cfg.ProfileFor)
	}
	if l := runLoad(ctx, srv.client, level, loadSpan{until: time.Now().Add(r.cfg.ProfileFor)}, stagger); l.firstErr != nil {
		return l.firstErr
	}
	res := <-got
	if res.err != nil {
		return res.err
	}
	if traced != nil {
		tr := <-traced
		if tr.err != nil {
			return tr.err
		}
		tpath := strings.TrimSuffix(path, ".pprof") + ".trace"
		if err := os.WriteFile(tpath, tr.body, 0o644); err != nil {
			return err
		}
		r.report.Profiles = append(r.report.Profiles, tpath)
	}
	return os.WriteFile(path, res.body, 0o644)
}

// heapProfile holds level idle streams in a fresh t and writes its heap
// profile (after a GC) to path: what each held stream keeps.
func (r *runner) heapProfile(ctx context.Context, t target, _ phase, level int, path string) error {
	srv, err := r.startServer(ctx, t, r.spec(level, idle).Model(), level, r.cfg.StreamsPerChannel)
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := r.waitHeld(ctx, func(n int64) bool { return n == 0 }); err != nil {
		return err
	}
	release := hold(ctx, srv.client, level)
	err = r.waitHeld(ctx, func(n int64) bool { return n >= int64(level) })
	var body []byte
	if err == nil {
		body, err = get(ctx, "http://"+srv.debug+"/debug/pprof/heap?gc=1")
	}
	if l := release(); err == nil {
		err = l.firstErr
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
