package harness

import (
	"context"
	"fmt"
	"slices"
	"time"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// RunFleet runs the fleet benchmark cfg describes (Config.Fleet, the rest
// as for Run, in the streaming phase only) and returns its report: at each
// level and in each repetition the direct calls, one completiond process
// without Redis, the same Fleet.Replicas completiond processes as the
// fleet without Redis (unless Fleet.SkipUnshared) and a fleet of them
// sharing a fresh redis-server, interleaved; then, at each level, the
// attribution pass (Fleet.AttributeFor).
func RunFleet(ctx context.Context, cfg Config) (*Report, error) {
	cfg.fleet = true
	return run(ctx, cfg, func(r *runner) error {
		v, err := redisVersion(ctx, r.cfg.Fleet.RedisServer)
		if err != nil {
			return err
		}
		r.report.redisVersion = v
		if err := r.measureFleet(ctx); err != nil {
			return err
		}
		if r.cfg.ProfileDir != "" {
			return r.profileAll(ctx)
		}
		return nil
	})
}

// measureFleet measures every level and repetition: completiond alone,
// the replicas without Redis, then the fleet in odd repetitions, the other
// way round in even ones.
func (r *runner) measureFleet(ctx context.Context) error {
	for _, level := range r.cfg.Levels {
		for rep := 1; rep <= r.cfg.Reps; rep++ {
			order := []target{direct, completiond, unshared, fleetOf}
			if rep%2 == 0 {
				order = []target{direct, fleetOf, unshared, completiond}
			}
			if r.cfg.Fleet.SkipUnshared {
				order = slices.DeleteFunc(order, func(t target) bool { return t == unshared })
			}
			if err := r.waitQuiet(ctx, fmt.Sprintf("level %d, rep %d", level, rep)); err != nil {
				return err
			}
			for _, t := range order {
				if err := r.measureOne(ctx, key{level, rep, t, streaming}); err != nil {
					return err
				}
			}
		}
		if err := r.attribute(ctx, level); err != nil {
			return fmt.Errorf("level %d, attribution pass: %w", level, err)
		}
	}
	return nil
}

// request is the request of every stream: with the fleet benchmark's
// resume grace, if any.
func (r *runner) request() *completionv1.CompleteRequest {
	if !r.cfg.fleet {
		return request("", 0)
	}
	return request("", r.cfg.Fleet.ResumeGrace)
}

// tryFleet starts the fleet's replicas and a client with a channel to
// each replica, the streams taking them in turn; each replica answers one
// request first. Shared, they have a fresh redis-server as redis.url;
// otherwise none (the replicas without Redis, target unshared).
func (r *runner) tryFleet(ctx context.Context, model string, shared bool) (*server, error) {
	s := &server{}
	redisURL := ""
	if shared {
		rd, err := r.startRedis(ctx)
		if err != nil {
			return nil, err
		}
		s.redis, redisURL = rd, "redis://"+rd.addr+"/0"
	}
	addrs := make([]string, r.cfg.Fleet.Replicas)
	for i := range addrs {
		p, err := r.startCompletiond(ctx, model, redisURL)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.add(p)
		addrs[i] = p.addr
	}
	var err error
	if s.client, err = dial(addrs, r.request()); err == nil {
		err = s.ready(ctx, warmRoute)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// attribution is what the attribution pass at a level gave: each
// command's share of calls that scripts ran (scriptShares), and its
// streams.
type attribution struct {
	share map[string]float64
	load
}

// attribute runs the streaming load at level on a fresh fleet for
// Fleet.AttributeFor with Redis's MONITOR on, unmeasured (MONITOR costs
// Redis), and gives the level's fleet measurements each command's share
// of calls that scripts ran there.
func (r *runner) attribute(ctx context.Context, level int) error {
	if r.cfg.Fleet.AttributeFor < 0 {
		return nil
	}
	spec := r.spec(level, streaming)
	srv, err := r.startServer(ctx, fleetOf, spec.Model(), level, 0)
	if err != nil {
		return err
	}
	defer srv.stop()
	mon, err := startMonitor(ctx, srv.redis.addr)
	if err != nil {
		return err
	}
	defer mon.close()
	before, err := readRedisStats(ctx, srv.redis.addr)
	if err != nil {
		return err
	}
	l := runLoad(ctx, srv.client, level, loadSpan{until: time.Now().Add(r.cfg.Fleet.AttributeFor)}, min(answerTime(spec), r.cfg.Fleet.AttributeFor))
	after, err := readRedisStats(ctx, srv.redis.addr)
	if err != nil {
		return err
	}
	lua, err := mon.wait()
	if err != nil {
		return err
	}
	a := &attribution{share: scriptShares(after.sub(before).calls, lua), load: l}
	r.report.attributions[level] = a
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		if m := r.report.results[key{level, rep, fleetOf, streaming}]; m != nil {
			m.scriptShare = a.share
		}
	}
	r.progress("level %d · attribution pass (MONITOR): %d calls, %d errors, %d commands run by scripts", level, l.calls, l.errors, sumValues(lua))
	return ctx.Err()
}

// sumValues is the sum of m's values.
func sumValues[K comparable, V int64 | float64](m map[K]V) V {
	var n V
	for _, v := range m {
		n += v
	}
	return n
}
