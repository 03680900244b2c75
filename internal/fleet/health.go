package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Health follows whether Redis answers: a PING every interval (of every
// primary of a Cluster), each bounded by the interval. It starts up; a
// failed command of the event log marks it down at once, and only a PING
// brings it back.
//
// It also follows which Redis process serves each shard of the logs (its
// run_id, from INFO server, beside each PING): another process than before
// is a Redis restarted, or a replica promoted in a failover, which may
// lack writes its predecessor acknowledged (Redis replicates
// asynchronously, and a restart loads what was saved last). Its watchers
// (WatchReplaced) then look again at what they wrote, and takeovers wait
// a while (Settling).
type Health struct {
	rdb      redis.UniversalClient
	interval time.Duration
	log      *slog.Logger
	m        *metrics // rdb's (Instrument)
	up       atomic.Bool

	mu       sync.Mutex
	watchers []func(up bool)
	replaced []*retried
	back     []*retried
	// due are the watchers of replaced and back that PINGs found due
	// (pingMu), for Health's goroutine to call (settle): not the PING's,
	// which Settling makes on a takeover's goroutine.
	due []*retried
	// unsettled are the watchers of replaced and back that are not done
	// (pingMu), each once.
	unsettled []*retried
	// settleMu makes one settle at a time: a watcher is never called
	// twice at once.
	settleMu sync.Mutex

	// pingMu makes one PING at a time: Health's own, or Settling's. It
	// guards servers and lastPing.
	pingMu sync.Mutex
	// servers is the run_id of the Redis process that serves each shard of
	// the logs (keyspace; one on one Redis), as the PINGs last found it.
	servers  map[int]string
	lastPing time.Time
	// replacedAt is when a PING last found a new process (Unix ns; 0:
	// never).
	replacedAt atomic.Int64

	kick chan struct{}
	// settling wakes the settler: a PING found watchers due.
	settling chan struct{}
	stop     context.CancelFunc
	done     chan struct{}
}

// NewHealth returns the Health of rdb, PINGed every interval; it tells log
// when Redis stops or starts answering. Close stops it.
func NewHealth(rdb redis.UniversalClient, interval time.Duration, log *slog.Logger) *Health {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Health{rdb: rdb, interval: interval, log: log, m: metricsOf(rdb), kick: make(chan struct{}, 1), settling: make(chan struct{}, 1),
		stop: cancel, done: make(chan struct{})}
	w.up.Store(true)
	w.ping(ctx) // the state at start, before anybody asks
	go w.run(ctx)
	return w
}

func (w *Health) run(ctx context.Context) {
	defer close(w.done)
	var settler sync.WaitGroup
	defer settler.Wait()
	settler.Go(func() { w.settler(ctx) })
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.ping(ctx)
		case <-w.kick:
			w.ping(ctx)
		}
	}
}

// settler calls the watchers the PINGs find due (settle), on a goroutine
// of their own: the PINGs go on meanwhile, however long the watchers
// take, and the health they find with them.
func (w *Health) settler(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.settling:
			w.settle()
		}
	}
}

// Kick makes the next PING now rather than at the next interval: a
// command found a Redis that lost its scripts (restarted, or a replica
// promoted), which the watchers of WatchReplaced are to hear of soon.
func (w *Health) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Health) ping(ctx context.Context) {
	w.pingMu.Lock()
	defer w.pingMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.interval)
	defer cancel()
	defer func() { w.lastPing = time.Now() }()
	servers, err := pingAll(ctx, w.rdb)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // closing
	}
	cameBack := w.set(err == nil, err) && err == nil
	var due []*retried
	if w.newServer(servers) {
		due = append(due, w.tellReplaced()...)
	}
	if cameBack {
		w.mu.Lock()
		due = append(due, w.back...)
		w.mu.Unlock()
	}
	if err == nil {
		due = append(due, w.unsettled...)
	}
	for _, r := range due {
		if !slices.Contains(w.due, r) {
			w.due = append(w.due, r)
		}
	}
	if len(w.due) > 0 {
		signal(w.settling)
	}
}

// retried is a watcher of WatchReplaced or WatchBack: called until it is
// done.
type retried struct{ f func() (done bool) }

// settle calls each watcher the PINGs found due, once (ping lists each
// once, though it may be due twice: replaced and back at one PING, or
// unsettled), without holding up the PINGs meanwhile; those not done are
// unsettled, for the next PING that finds Redis up.
func (w *Health) settle() {
	w.settleMu.Lock()
	defer w.settleMu.Unlock()
	w.pingMu.Lock()
	due := w.due
	w.due = nil
	w.pingMu.Unlock()
	called := map[*retried]bool{}
	var notDone []*retried
	for _, r := range due {
		called[r] = true
		if !r.f() {
			notDone = append(notDone, r)
		}
	}
	w.pingMu.Lock()
	defer w.pingMu.Unlock()
	w.unsettled = slices.DeleteFunc(w.unsettled, func(r *retried) bool { return called[r] })
	for _, r := range notDone {
		if !slices.Contains(w.unsettled, r) {
			w.unsettled = append(w.unsettled, r)
		}
	}
}

// newServer notes the run_id of the Redis process serving each shard a
// PING found ("" when it did not say), and reports whether one differs
// from the process that served that shard before: restarted, or a
// replica promoted (or the shard moved to another primary). A shard the
// PING did not reach keeps its process, and one found for the first time
// is not new: a node that did not answer a PING is not mistaken for a
// new one when it answers the next.
func (w *Health) newServer(found map[int]string) bool {
	if w.servers == nil {
		w.servers = map[int]string{}
	}
	isNew := false
	for shard, id := range found {
		if id == "" {
			continue
		}
		if was := w.servers[shard]; was != "" && was != id {
			isNew = true
		}
		w.servers[shard] = id
	}
	return isNew
}

// settleFor, in PING intervals, is how long after a PING found a new
// Redis process takeovers wait (Settling): the replica that owned a
// completion finds the process at its own next PING, within an interval,
// and publishes again the end the process lacks.
const settleFor = 2

// Settling reports whether a PING found a new Redis process serving the
// logs (a failover, a restart) within the last settleFor intervals, after
// a PING made now (unless one was made within the last tenth of an
// interval). A completion whose lease lapsed meanwhile may have ended,
// its end lost with the old process, while its replica lives: that
// replica publishes the end again at its own next PING
// (PairLog.republishLostEnds). A replica about to take the completion
// over, which would run it on to another ending, waits that long instead.
func (w *Health) Settling(ctx context.Context) bool {
	w.pingMu.Lock()
	recent := time.Since(w.lastPing) < w.interval/10
	w.pingMu.Unlock()
	if !recent {
		w.ping(ctx) // the watchers it finds due run on the settler's goroutine, not this caller's
	}
	at := w.replacedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < settleFor*w.interval
}

// tellReplaced logs that a Redis process is new, and answers the
// watchers of WatchReplaced, to be called.
func (w *Health) tellReplaced() []*retried {
	w.replacedAt.Store(time.Now().UnixNano())
	w.m.replaced.Add(context.Background(), 1)
	w.log.Info("redis: a Redis process answers that did not before (restarted, or a replica promoted): the logs this replica wrote are checked for lost writes")
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.replaced)
}

// pingAll PINGs Redis: on a Cluster, every primary the client knows, so
// that Redis is up only while every shard can be written (a PING of the
// client would reach one node at random: up and down in turn while one
// is down), and asks each whether the cluster is ok (clusterOK): a
// primary answers PING while the cluster refuses every key (CLUSTERDOWN,
// until each slot is served again after a failover). It answers the
// run_id of the Redis process that serves each shard of the logs
// (keyspace; shard 0 on one Redis), for the shards whose primary answered
// with the cluster ok (runID; "" when its INFO failed, which leaves health
// as the PING said): so a new process is found once its shards can be
// written, when the replica that lost an end can publish it again, and
// takeovers elsewhere wait from then (Settling). Each node's commands are
// timed as the client's round trips are (Instrument: the hook is the
// cluster client's, not its nodes').
func pingAll(ctx context.Context, rdb redis.UniversalClient) (map[int]string, error) {
	cc := clusterClient(rdb)
	if cc == nil {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		return map[int]string{0: runID(ctx, rdb)}, nil
	}
	timed := newRoundTripHook(metricsOf(rdb).roundTrip)
	var mu sync.Mutex
	ids := map[string]string{} // a primary's address → its run_id
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		start := time.Now()
		err := node.Ping(ctx).Err()
		timed.record(ctx, start, "PING", err)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		start = time.Now()
		err = clusterOK(ctx, node)
		timed.record(ctx, start, "CLUSTER", err)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		start = time.Now()
		id := runID(ctx, node)
		timed.record(ctx, start, "INFO", nil)
		mu.Lock()
		ids[node.Options().Addr] = id
		mu.Unlock()
		return nil
	})
	return shardServers(ctx, cc, ids), err
}

// shardServers is the run_id, among ids (by address), of the primary that
// serves each shard of the logs on the Cluster cc, as cc's view of the
// slots (just reloaded by ForEachMaster) says.
func shardServers(ctx context.Context, cc *redis.ClusterClient, ids map[string]string) map[int]string {
	out := map[int]string{}
	for shard, subject := range clusterRedis.subjects {
		node, err := cc.MasterForKey(ctx, clusterRedis.counted(redisLogsLive, subject))
		if err != nil {
			continue
		}
		if id, ok := ids[node.Options().Addr]; ok {
			out[shard] = id
		}
	}
	return out
}

// errClusterDown: a node of the Cluster says it is not ok (CLUSTER INFO):
// it refuses the keys of every slot until each is served again.
var errClusterDown = errors.New("cluster_state is not ok: the cluster refuses every key until each slot is served (CLUSTERDOWN)")

// clusterOK asks node whether the cluster is ok (CLUSTER INFO). A node
// that refuses the command (an error it answers: NOPERM for the fleet's
// user) leaves health as its PING says, as a refused INFO does (runID).
func clusterOK(ctx context.Context, node *redis.Client) error {
	info, err := node.ClusterInfo(ctx).Result()
	var refused redis.Error
	switch {
	case errors.As(err, &refused):
		return nil
	case err != nil:
		return err
	case !strings.Contains(info, "cluster_state:ok"):
		return errClusterDown
	}
	return nil
}

// runID is the run_id of the Redis process rdb reaches (INFO server), ""
// when it does not say: a new one at each start, so that a restarted
// Redis, or a replica promoted in its place, answers another.
func runID(ctx context.Context, rdb redis.Cmdable) string {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(info, "run_id:")
	id, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(id)
}

// set records whether Redis answers, and on a change logs it, tells the
// watchers of Watch, and reports it changed.
func (w *Health) set(up bool, err error) (changed bool) {
	if w.up.Swap(up) == up {
		return false
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
	return true
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

// WatchReplaced calls f each time a PING finds a shard of the logs served
// by another Redis process than before — a Redis restarted, or a replica
// promoted in a failover —, after the watchers of Watch heard of the state
// that PING found: that Redis may lack acknowledged writes. It runs on
// a goroutine of Health's, one watcher at a time, while the PINGs go on
// (a takeover's Settling does not wait for the watchers its PING finds
// due). f answers whether it is done; one that is not (Redis
// failed it: a Cluster is still down while its other primaries are taken
// over) is called again after each PING that finds Redis up, until it is.
func (w *Health) WatchReplaced(f func() (done bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replaced = append(w.replaced, &retried{f})
}

// WatchBack calls f each time a PING finds Redis answering again after it
// failed, after the watchers of Watch heard of it: what a replica kept to
// itself meanwhile (its logs, the keys it claimed, its charges) is to be
// shared. It runs as the watchers of WatchReplaced do; f answers whether
// it is done, and one that is not (Redis failed it) is called again after
// each PING that finds Redis up, until it is — not only when Redis fails
// and comes back once more, which a write refused while PINGs pass would
// never bring.
func (w *Health) WatchBack(f func() (done bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.back = append(w.back, &retried{f})
}

// Close stops the PINGs.
func (w *Health) Close() {
	w.stop()
	<-w.done
}
