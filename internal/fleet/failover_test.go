package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// replicatedCluster is a Redis Cluster of three primaries with a replica
// each, its nodes (primaries first), and a client of it.
type replicatedCluster struct {
	primaries, replicas, nodes []*redistest.Server
	rdb                        *redis.ClusterClient
}

func newReplicatedCluster(t *testing.T) *replicatedCluster {
	p, r := redistest.NewReplicatedCluster(t, 3)
	return &replicatedCluster{primaries: p, replicas: r, nodes: append(append([]*redistest.Server(nil), p...), r...),
		rdb: testkit.ServerClusterClient(t, redistest.Addrs(p))}
}

// nodeOf is the index in primaries of the primary that holds id's shard.
func (c *replicatedCluster) nodeOf(t *testing.T, id string) int {
	t.Helper()
	node, err := c.rdb.MasterForKey(context.Background(), clusterRedis.log(id))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range c.primaries {
		if s.Addr == node.Options().Addr {
			return i
		}
	}
	t.Fatalf("%s: its primary %s is none of the cluster's", id, node.Options().Addr)
	return -1
}

// routedTo waits until the client sends id's shard to the node s (it
// reloads the cluster's slots in the background).
func (c *replicatedCluster) routedTo(t *testing.T, id string, s *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, func() bool {
		c.rdb.ReloadState(ctx)
		node, err := c.rdb.MasterForKey(ctx, clusterRedis.log(id))
		return err == nil && node.Options().Addr == s.Addr
	})
}

// cutOffAfter opens id in f, appends events 1..n, and once the replica
// of id's shard has them, pauses that replica and cuts it off from its
// primary: it gets none of the writes after. It answers the two. It opens
// once f's Health finds Redis up: a log opened while a PING had failed is
// kept in memory only, and Redis would get it whole later, from a reshare
// the cut-off replica never sees.
func (c *replicatedCluster) cutOffAfter(t *testing.T, f *PairLog, id string, n int) (primary, replica *redistest.Server) {
	t.Helper()
	waitFor(t, f.watch.Up)
	if err := f.Open(id, Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	appendRun(f, id, n, false)
	if got, err := c.rdb.XLen(context.Background(), clusterRedis.log(id)).Result(); f.KeptHere(id) || got != int64(n) {
		t.Fatalf("%s: kept here only %t, %d events in Redis (%v); want %d in Redis", id, f.KeptHere(id), got, err, n)
	}
	i := c.nodeOf(t, id)
	primary, replica = c.primaries[i], c.replicas[i]
	redistest.Synced(t, primary, replica)
	replica.Pause()
	redistest.CutReplicas(t, primary)
	return primary, replica
}

// TestPairLogClusterFailover: a primary of the Cluster hands its slots
// to its replica (CLUSTER FAILOVER, nothing lost) while a replica writes
// completions of every shard: the writes follow the slots to the new
// primary (which lacks the scripts), no completion is kept apart, and
// every log is whole and ended.
func TestPairLogClusterFailover(t *testing.T) {
	c := newReplicatedCluster(t)
	f, apart := newPairAt(t, c.rdb, time.Now)
	ids := make([]string, 24)
	for i := range ids {
		ids[i] = fmt.Sprint("c", i)
		if err := f.Open(ids[i], Meta{Replica: "A"}); err != nil {
			t.Fatal(err)
		}
	}
	const before, after = 10, 10
	var started, wrote sync.WaitGroup
	failedOver := make(chan struct{})
	last := make([]uint64, len(ids))
	for i, id := range ids {
		started.Add(1)
		wrote.Go(func() {
			seq := uint64(1)
			for ; seq <= before; seq++ {
				if err := f.Append(id, logEvent(seq, false)); err != nil {
					t.Error(err)
				}
			}
			started.Done()
			for n := 0; n < after; seq++ {
				if err := f.Append(id, logEvent(seq, false)); err != nil {
					t.Error(err)
				}
				select {
				case <-failedOver:
					n++
				default:
				}
			}
			if err := f.End(id, nil, logEvent(seq, true), nil); err != nil {
				t.Error(err)
			}
			last[i] = seq
		})
	}
	started.Wait()
	i := c.nodeOf(t, ids[0])
	redistest.Failover(t, c.replicas[i], false, c.nodes)
	close(failedOver)
	wrote.Wait()
	if n := apart.Load(); n != 0 {
		t.Errorf("%d completions kept apart through a failover that lost nothing", n)
	}
	other := NewRedisLog(c.rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	for i, id := range ids {
		if seqs, ended, err := readWhole(other, id); err != nil || !ended || !slices.Equal(seqs, seqsTo(int(last[i]))) {
			t.Errorf("%s: %v ended %t, %v; want 1..%d ended", id, seqs, ended, err, last[i])
		}
	}
	if node, err := c.rdb.MasterForKey(context.Background(), clusterRedis.log(ids[0])); err != nil || node.Options().Addr != c.replicas[i].Addr {
		t.Fatalf("the client sends the failed-over shard to %v (%v), not to the new primary", node, err)
	}
}

// TestPairLogClusterFailoverLosesWrites: the replica promoted when its
// primary dies (CLUSTER FAILOVER TAKEOVER) had not received a
// completion's last two events, which the old primary acknowledged and
// this replica's callers read. The completion's next write, a second
// later, finds the hole (gap) and publishes the log again from the
// replica's memory: another replica reads every seq, then the end.
func TestPairLogClusterFailoverLosesWrites(t *testing.T) {
	c := newReplicatedCluster(t)
	clk := &clock{t: time.Now()}
	f, _ := newPairAt(t, c.rdb, clk.now)
	primary, replica := c.cutOffAfter(t, f, "c1", 3)
	for seq := uint64(4); seq <= 5; seq++ {
		if err := f.Append("c1", logEvent(seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	primary.Stop()
	replica.Resume()
	redistest.Failover(t, replica, true, c.nodes)
	c.routedTo(t, "c1", replica)
	other := NewRedisLog(c.rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	if p, err := other.Read("c1", 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), seqsTo(3)) {
		t.Fatalf("after the takeover, Redis holds %v (%v); want 1..3, the last two lost", testkit.Seqs(p.Events), err)
	}
	clk.add(time.Second)
	if err := f.Append("c1", logEvent(6, false)); err != nil {
		t.Fatal(err)
	}
	if err := f.End("c1", nil, logEvent(7, true), nil); err != nil {
		t.Fatal(err)
	}
	if p, err := other.Read("c1", 0); err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), seqsTo(7)) {
		t.Fatalf("the shared log after the takeover: %v ended %t (%v); want 1..7 ended", testkit.Seqs(p.Events), p.Ended, err)
	}
}

// TestPairLogClusterReshard: a shard's slot moves to another primary
// while completions of it and of other shards write (as redis-cli
// --cluster reshard moves it, a few keys at a time), and new completions
// of it open. Mid-move, the shard's writes and opens are refused TRYAGAIN
// by Redis: they wait and go again, and the other shards' writes are not
// held. No completion is kept apart,
// and every log is whole once the slot has moved.
func TestPairLogClusterReshard(t *testing.T) {
	nodes := redistest.NewCluster(t, 3)
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(nodes))
	f, apart := newPairAt(t, rdb, time.Now)
	f.redis.OpTimeout = 10 * time.Second // the test moves the slot at its pace
	ctx := context.Background()
	moving, others := idsOfShard(3, 6, "m"), idsOfShard(4, 6, "o")
	for _, id := range append(append([]string(nil), moving...), others...) {
		if err := f.Open(id, Meta{Replica: "A"}); err != nil {
			t.Fatal(err)
		}
		appendRun(f, id, 3, false)
	}
	slot := int(rdb.ClusterKeySlot(ctx, clusterRedis.log(moving[0])).Val())
	var from, to *redistest.Server
	for i, s := range nodes {
		if node, err := rdb.MasterForKey(ctx, clusterRedis.log(moving[0])); err == nil && node.Options().Addr == s.Addr {
			from, to = s, nodes[(i+1)%len(nodes)]
		}
	}
	if other, _ := rdb.MasterForKey(ctx, clusterRedis.log(others[0])); other == nil || other.Options().Addr == from.Addr {
		t.Fatal("pick another shard for the others: it is on the moving shard's node")
	}
	m := redistest.BeginMove(t, slot, from, to)
	if left := m.Migrate(5); left == 0 {
		t.Fatal("the shard's keys all moved at once: nothing is mid-move")
	}
	var wg sync.WaitGroup
	var done atomic.Int32 // the others' writes done
	for _, id := range append(append([]string(nil), moving...), others...) {
		wg.Go(func() {
			if err := f.Append(id, logEvent(4, false)); err != nil {
				t.Error(err)
			}
			if !slices.Contains(moving, id) {
				done.Add(1)
			}
		})
	}
	opened := idsOfShard(3, 9, "m")[len(moving):] // new completions of the moving shard
	for _, id := range opened {
		wg.Go(func() {
			if err := f.Open(id, Meta{Replica: "A"}); err != nil {
				t.Error(err)
			}
			appendRun(f, id, 4, false)
		})
	}
	waitFor(t, func() bool { return done.Load() == int32(len(others)) }) // not held by the move
	m.Finish(nodes)
	wg.Wait()
	moving = append(moving, opened...)
	other := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	for _, id := range append(append([]string(nil), moving...), others...) {
		if p, err := other.Read(id, 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), seqsTo(4)) {
			t.Errorf("%s once its write returned: %v, %v; want 1..4 in Redis", id, testkit.Seqs(p.Events), err)
		}
		if err := f.End(id, nil, logEvent(5, true), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := apart.Load(); n != 0 {
		t.Errorf("%d completions kept apart through a move of their shard's slot", n)
	}
	for _, id := range append(append([]string(nil), moving...), others...) {
		if p, err := other.Read(id, 0); err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), seqsTo(5)) {
			t.Errorf("%s: %v ended %t, %v; want 1..5 ended", id, testkit.Seqs(p.Events), p.Ended, err)
		}
	}
}

// TestPairLogClusterSlotStuckMoving: a shard's slot stays mid-move for
// longer than a write waits (OpTimeout): the completion's write gives up,
// and the completion is kept apart, but Redis is not taken for down (it
// answers: the other shards are written, new completions shared). Once
// the slot has moved, the completion's next event publishes it again,
// whole.
func TestPairLogClusterSlotStuckMoving(t *testing.T) {
	nodes := redistest.NewCluster(t, 3)
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(nodes))
	clk := &clock{t: time.Now()}
	f, apart := newPairAt(t, rdb, clk.now)
	ctx := context.Background()
	id := idsOfShard(3, 1, "m")[0]
	if err := f.Open(id, Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	appendRun(f, id, 3, false)
	node, err := rdb.MasterForKey(ctx, clusterRedis.log(id))
	if err != nil {
		t.Fatal(err)
	}
	var from, to *redistest.Server
	for i, s := range nodes {
		if s.Addr == node.Options().Addr {
			from, to = s, nodes[(i+1)%len(nodes)]
		}
	}
	m := redistest.BeginMove(t, int(rdb.ClusterKeySlot(ctx, clusterRedis.log(id)).Val()), from, to)
	m.Migrate(2)
	f.redis.OpTimeout = 50 * time.Millisecond
	if err := f.Append(id, logEvent(4, false)); err != nil {
		t.Fatal(err)
	}
	if !f.KeptHere(id) || apart.Load() != 1 {
		t.Fatalf("a write whose slot stays mid-move: kept apart %t, %d apart; want it apart", f.KeptHere(id), apart.Load())
	}
	if !f.watch.Up() {
		t.Fatal("a slot mid-move took Redis for down")
	}
	m.Finish(nodes)
	f.redis.OpTimeout = DefaultRedisOpTimeout
	clk.add(reshareEvery)
	if err := f.Append(id, logEvent(5, false)); err != nil {
		t.Fatal(err)
	}
	if f.KeptHere(id) {
		t.Fatal("still kept apart once the slot moved")
	}
	other := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	if p, err := other.Read(id, 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), seqsTo(5)) {
		t.Fatalf("the shared log: %v (%v), want 1..5", testkit.Seqs(p.Events), err)
	}
}

// readWhole reads the log of id page after page: the seqs of its events,
// and whether it ended.
func readWhole(l Log, id string) (seqs []uint64, ended bool, err error) {
	for {
		p, err := l.Read(id, uint64(len(seqs)))
		if err != nil {
			return seqs, false, err
		}
		seqs = append(seqs, testkit.Seqs(p.Events)...)
		if len(p.Events) == 0 || p.Last == uint64(len(seqs)) {
			return seqs, p.Ended, nil
		}
	}
}

// TestHealthOnClusterWithANodeDown: with one primary of a Cluster not
// answering, Redis is down at every PING (its shards cannot be written),
// not up and down in turn as a PING of one node at random would say; once
// the node answers again, up. (The node is paused, not killed: a killed
// node's port may go to another test's server meanwhile.)
func TestHealthOnClusterWithANodeDown(t *testing.T) {
	nodes := redistest.NewCluster(t, 3, "--cluster-require-full-coverage", "no")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	h := NewHealth(rdb, time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	ctx := context.Background()
	waitFor(t, func() bool { pingAndSettle(ctx, h); return h.Up() }) // a PING may time out on a busy machine
	nodes[1].Pause()
	for i := range 4 { // a PING of a node at random is answered up at least once in 4, 99 % of the time
		if pingAndSettle(ctx, h); h.Up() {
			nodes[1].Resume()
			t.Fatalf("PING %d with a primary down: up", i)
		}
	}
	nodes[1].Resume()
	waitFor(t, func() bool { pingAndSettle(ctx, h); return h.Up() })
}

// TestHealthOnAClusterThatRefusesItsKeys: a Cluster whose primaries all
// answer PING but say it is not ok — a slot unserved, with full coverage
// required, as while a failed primary's replica is not yet promoted:
// CLUSTERDOWN for every key — is down, and no process is noted for the
// shards of a primary that says so (a new one is found once its shards can be written);
// once every slot is served again, up.
func TestHealthOnAClusterThatRefusesItsKeys(t *testing.T) {
	nodes := redistest.NewCluster(t, 3)
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(nodes))
	h := NewHealth(rdb, time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	ctx := context.Background()
	waitFor(t, func() bool { pingAndSettle(ctx, h); return h.Up() })
	owner := testkit.ServerRedisClient(t, nodes[0].Addr)
	if err := owner.Do(ctx, "cluster", "delslots", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The owner says so at once (the others keep their view of slot 0).
	servers, err := pingAll(ctx, rdb)
	if !errors.Is(err, errClusterDown) || len(servers) >= len(clusterRedis.subjects) {
		t.Fatalf("a primary not ok: %v, %d shards' processes found; want errClusterDown, and not its shards'", err, len(servers))
	}
	if pingAndSettle(ctx, h); h.Up() {
		t.Fatal("up while the cluster refuses every key")
	}
	if err := owner.Do(ctx, "cluster", "addslots", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { pingAndSettle(ctx, h); return h.Up() })
	if servers, err := pingAll(ctx, rdb); err != nil || len(servers) != len(clusterRedis.subjects) {
		t.Fatalf("the cluster ok again: %d shards' processes found, %v; want %d", len(servers), err, len(clusterRedis.subjects))
	}
}

// TestClusterOKWhenRefused: a node that refuses CLUSTER INFO (here one
// without cluster support; NOPERM for a user without the command) leaves
// health as its PING says; one that does not answer is down.
func TestClusterOKWhenRefused(t *testing.T) {
	ctx := context.Background()
	if err := clusterOK(ctx, testkit.ServerRedisClient(t, redistest.Start(t))); err != nil {
		t.Errorf("a node that refuses CLUSTER INFO: %v, want nil", err)
	}
	if err := clusterOK(ctx, testkit.ServerRedisClient(t, "127.0.0.1:1")); err == nil {
		t.Error("a node that does not answer is ok")
	}
}

// TestHealthTimesEveryPrimarysPing: on a Cluster, Health's PING of each
// primary is timed as the client's round trips are (its nodes' clients
// do not carry the cluster client's hook).
func TestHealthTimesEveryPrimarysPing(t *testing.T) {
	m := newMeter(t)
	rdb := Instrument(testkit.ServerClusterClient(t, redistest.Addrs(redistest.NewCluster(t, 3))), m.mp)
	h := NewHealth(rdb, time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(h.Close)
	if got := m.roundTrips()["PING "]; got < 3 {
		t.Fatalf("%d PINGs timed after the first health check of three primaries, want 3 at least", got)
	}
}

// TestPairLogClusterFailoverLosesAnEnd: a completion ends while its
// shard's replica is cut off from the primary, which then dies, and the
// replica takes over: Redis lost the end (the log looks live, a takeover
// would run the completion on). The writing replica's Health finds the
// promoted process at its next PING and the end is published again, so
// that the shared log is whole and ended without any further write of
// the completion.
func TestPairLogClusterFailoverLosesAnEnd(t *testing.T) {
	c := newReplicatedCluster(t)
	quiet := slog.New(slog.DiscardHandler)
	// Its PING's timeout too: at 50 ms, on a busy machine, Health found
	// Redis down often enough that the log opened apart (cutOffAfter).
	h := NewHealth(c.rdb, 250*time.Millisecond, quiet)
	t.Cleanup(h.Close)
	rl := NewRedisLog(c.rdb, config.EventLogLimits{}, nil)
	t.Cleanup(rl.Close)
	f := NewPairLog(NewMemLog(config.EventLogLimits{}, time.Now), rl, h, quiet, countingCounter{n: &atomic.Int64{}})
	primary, replica := c.cutOffAfter(t, f, "c1", 3)
	if err := f.End("c1", nil, logEvent(4, true), nil); err != nil {
		t.Fatal(err)
	}
	primary.Stop()
	replica.Resume()
	redistest.Failover(t, replica, true, c.nodes)
	other := NewRedisLog(c.rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	var seqs []uint64
	var ended bool
	var err error
	waitFor(t, func() bool {
		seqs, ended, err = readWhole(other, "c1")
		return err == nil && ended
	})
	if !slices.Equal(seqs, seqsTo(4)) {
		t.Fatalf("the shared log after the takeover: %v ended %t (%v); want 1..4 ended", seqs, ended, err)
	}
}
