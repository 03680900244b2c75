package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Health follows whether Redis answers: a PING every interval (of every
// primary of a Cluster), each bounded by the interval. It starts up; a
// failed command of the event log marks it down at once, and only a PING
// brings it back.
type Health struct {
	rdb      redis.UniversalClient
	interval time.Duration
	log      *slog.Logger
	m        *metrics // rdb's (Instrument)
	up       atomic.Bool

	mu       sync.Mutex
	watchers []func(up bool)

	stop context.CancelFunc
	done chan struct{}
}

// NewHealth returns the Health of rdb, PINGed every interval; it tells log
// when Redis stops or starts answering. Close stops it.
func NewHealth(rdb redis.UniversalClient, interval time.Duration, log *slog.Logger) *Health {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Health{rdb: rdb, interval: interval, log: log, m: metricsOf(rdb), stop: cancel, done: make(chan struct{})}
	w.up.Store(true)
	w.ping(ctx) // the state at start, before anybody asks
	go w.run(ctx)
	return w
}

func (w *Health) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.ping(ctx)
		}
	}
}

func (w *Health) ping(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.interval)
	defer cancel()
	err := pingAll(ctx, w.rdb)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // closing
	}
	w.set(err == nil, err)
}

// pingAll PINGs Redis: on a Cluster, every primary the client knows, so
// that Redis is up only while every shard can be written (a PING of the
// client would reach one node at random: up and down in turn while one
// is down). Each node's PING is timed as the client's round trips are
// (Instrument: the hook is the cluster client's, not its nodes').
func pingAll(ctx context.Context, rdb redis.UniversalClient) error {
	cc := clusterClient(rdb)
	if cc == nil {
		return rdb.Ping(ctx).Err()
	}
	timed := roundTripHook{metricsOf(rdb).roundTrip}
	return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		start := time.Now()
		err := node.Ping(ctx).Err()
		timed.record(ctx, start, "PING", err)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		return nil
	})
}

// set records whether Redis answers, and on a change logs it and tells
// the watchers.
func (w *Health) set(up bool, err error) {
	if w.up.Swap(up) == up {
		return
	}
	if up {
		w.log.Info("redis: reachable again: new completions log to Redis, circuit breakers and per-key limits are shared by the fleet again; health SERVING")
	} else {
		w.m.outages.Add(context.Background(), 1)
		w.log.Warn("redis: unreachable: completions keep their events in this replica's memory only, circuit breakers and per-key limits fall back to this replica's own; health NOT_SERVING",
			"error", err)
	}
	w.mu.Lock()
	ws := append([]func(bool){}, w.watchers...)
	w.mu.Unlock()
	for _, f := range ws {
		f(up)
	}
}

// Failed marks Redis down after a failed command (of the event log, the
// shared breakers or the limits); only a PING brings it back. A command
// refused because its slot is moving to another node of a Cluster
// (TRYAGAIN, or a redirection left: slotMoving) does not: Redis answers,
// and the move ends by itself.
func (w *Health) Failed(err error) {
	if slotMoving(err) {
		return
	}
	w.set(false, err)
}

// Up reports whether Redis answers.
func (w *Health) Up() bool { return w.up.Load() }

// Watch calls f with the state now, and on each change.
func (w *Health) Watch(f func(up bool)) {
	w.mu.Lock()
	w.watchers = append(w.watchers, f)
	w.mu.Unlock()
	f(w.up.Load())
}

// Close stops the PINGs.
func (w *Health) Close() {
	w.stop()
	<-w.done
}
