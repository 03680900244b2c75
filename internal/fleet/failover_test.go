package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"

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

// newClusterPair is a replica's PairLog on rdb, reading the time from
// clk, and its count of completions kept apart.
func newClusterPair(t *testing.T, rdb redis.UniversalClient, clk *clock) (*PairLog, *atomic.Int64) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	h := NewHealth(rdb, time.Hour, quiet)
	t.Cleanup(h.Close)
	rl := NewRedisLog(rdb, config.EventLogLimits{}, clk.now)
	t.Cleanup(rl.Close)
	apart := &atomic.Int64{}
	f := NewPairLog(NewMemLog(config.EventLogLimits{}, clk.now), rl, h, quiet, countingCounter{n: apart})
	f.now = clk.now
	return f, apart
}

// countingCounter is a metric.Int64Counter that adds to n.
type countingCounter struct {
	embedded.Int64Counter
	n *atomic.Int64
}

func (c countingCounter) Add(_ context.Context, incr int64, _ ...metric.AddOption) { c.n.Add(incr) }

func (c countingCounter) Enabled(context.Context) bool { return true }

// TestPairLogClusterFailover: a primary of the Cluster hands its slots
// to its replica (CLUSTER FAILOVER, nothing lost) while a replica writes
// completions of every shard: the writes follow the slots to the new
// primary (which lacks the scripts), no completion is kept apart, and
// every log is whole and ended.
func TestPairLogClusterFailover(t *testing.T) {
	c := newReplicatedCluster(t)
	f, apart := newClusterPair(t, c.rdb, &clock{t: time.Now()})
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
			if err := f.End(id, logEvent(seq, true), nil); err != nil {
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
		if p, err := other.Read(id, 0); err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), seqsTo(int(last[i]))) {
			t.Errorf("%s: %v ended %t, %v; want 1..%d ended", id, testkit.Seqs(p.Events), p.Ended, err, last[i])
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
	f, _ := newClusterPair(t, c.rdb, clk)
	ctx := context.Background()
	if err := f.Open("c1", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	appendRun(f, "c1", 3, false)
	i := c.nodeOf(t, "c1")
	primary, replica := c.primaries[i], c.replicas[i]
	pc := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer pc.Close()
	if err := pc.Do(ctx, "wait", 1, 5000).Err(); err != nil { // the replica has 1..3
		t.Fatal(err)
	}
	replica.Pause()
	redistest.CutReplicas(t, primary)
	for seq := uint64(4); seq <= 5; seq++ {
		if err := f.Append("c1", logEvent(seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	primary.Stop()
	replica.Resume()
	redistest.Failover(t, replica, true, c.nodes)
	c.rdb.ReloadState(ctx)
	other := NewRedisLog(c.rdb, config.EventLogLimits{}, nil)
	t.Cleanup(other.Close)
	if p, err := other.Read("c1", 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), seqsTo(3)) {
		t.Fatalf("after the takeover, Redis holds %v (%v); want 1..3, the last two lost", testkit.Seqs(p.Events), err)
	}
	clk.add(time.Second)
	if err := f.Append("c1", logEvent(6, false)); err != nil {
		t.Fatal(err)
	}
	if err := f.End("c1", logEvent(7, true), nil); err != nil {
		t.Fatal(err)
	}
	if p, err := other.Read("c1", 0); err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), seqsTo(7)) {
		t.Fatalf("the shared log after the takeover: %v ended %t (%v); want 1..7 ended", testkit.Seqs(p.Events), p.Ended, err)
	}
}
