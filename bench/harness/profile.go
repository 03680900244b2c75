package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// profileAll writes a CPU profile of each server under the top level's
// streaming load and its short-answer load, after the measurements and
// apart from them: profiling costs the profiled process a little.
func (r *runner) profileAll(ctx context.Context) error {
	if err := os.MkdirAll(r.cfg.ProfileDir, 0o755); err != nil {
		return err
	}
	level := slices.Max(r.cfg.Levels)
	for _, ph := range []phase{streaming, short} {
		for _, t := range []target{bareRelay, completiond} {
			path := filepath.Join(r.cfg.ProfileDir, fmt.Sprintf("%s-%s-%d.pprof", t, ph, level))
			if err := r.profile(ctx, t, ph, level, path); err != nil {
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
	srv, err := r.startServer(ctx, t, r.spec(level, ph).Model(), level)
	if err != nil {
		return err
	}
	defer srv.stop()
	length := r.cfg.ShortFor
	if ph == streaming {
		length = r.cfg.StreamFor
	}
	seconds := max(1, int(length.Round(time.Second)/time.Second))
	type result struct {
		body []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		body, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", srv.debug, seconds))
		got <- result{body, err}
	}()
	if _, err := r.measureLoad(ctx, srv, srv.client, level, ph); err != nil {
		return err
	}
	res := <-got
	if res.err != nil {
		return res.err
	}
	return os.WriteFile(path, res.body, 0o644)
}
