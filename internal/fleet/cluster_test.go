package fleet

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// hashTag is the part of a key that Redis Cluster hashes: what is between
// its first { and the } after it.
var hashTag = regexp.MustCompile(`\{([^}]+)\}`)

func tagOf(key string) string {
	m := hashTag.FindStringSubmatch(key)
	if m == nil {
		return key
	}
	return m[1]
}

// TestKeyspace: on one Redis the keys are as they always were; on a
// Cluster every key a script of a completion declares — its own and its
// shard's counts — carries its shard's tag, so that they share one slot;
// every shard has a subject of its own; byShard keeps the order.
func TestKeyspace(t *testing.T) {
	if got := oneRedis.log("c1"); got != "completiond:log:{c1}" || oneRedis.lease("c1") != LeaseKey("c1") ||
		oneRedis.counted(redisLogsLive, "c1") != redisLogsLive || oneRedis.token("c1") != leaseTokenKey("c1") {
		t.Fatalf("one Redis's keys changed: %s", got)
	}
	shards := map[int]bool{}
	for i := range 200 {
		id := fmt.Sprint("cmpl_", i)
		n := clusterRedis.shard(id)
		shards[n] = true
		want := fmt.Sprint("s", n)
		for _, s := range clusterRedis.scripts.all() {
			for _, k := range s.Keys(id) {
				if tagOf(k) != want {
					t.Fatalf("%s: key %s of %s is not tagged %s", s.Name(), k, id, want)
				}
			}
		}
		if k := clusterRedis.log(id); k != "completiond:log:{"+want+"}:"+id {
			t.Fatalf("log key %s", k)
		}
	}
	if len(shards) != ClusterShards {
		t.Errorf("200 ids over %d shards, want all %d", len(shards), ClusterShards)
	}
	for n, s := range clusterRedis.subjects {
		if clusterRedis.shard(s) != n {
			t.Errorf("the subject of shard %d, %q, is of shard %d", n, s, clusterRedis.shard(s))
		}
	}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var flat []int
	for _, g := range clusterRedis.byShard(len(ids), func(i int) string { return ids[i] }) {
		for i, at := range g {
			if clusterRedis.shard(ids[at]) != clusterRedis.shard(ids[g[0]]) || i > 0 && at < g[i-1] {
				t.Fatalf("group %v mixes shards or order", g)
			}
		}
		flat = append(flat, g...)
	}
	if slices.Sort(flat); !slices.Equal(flat, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("byShard covers %v", flat)
	}
	if got := clusterRedis.share(1000); got != 63 || oneRedis.share(1000) != 1000 {
		t.Fatalf("share of 1000: %d on a Cluster, %d on one Redis", got, oneRedis.share(1000))
	}
}

// newClusterLog is a RedisLog on a real Redis Cluster of three.
func newClusterLog(t *testing.T, limits config.EventLogLimits, now func() time.Time) (*RedisLog, *redis.ClusterClient) {
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(redistest.NewCluster(t, 3)))
	l := NewRedisLog(rdb, limits, now)
	if l.ks != clusterRedis {
		t.Fatalf("a cluster client's log has %d shards", l.ks.shards)
	}
	t.Cleanup(l.Close)
	return l, rdb
}

// idsOfShard are n ids of shard n (prefix, then a number).
func idsOfShard(shard, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprint(prefix, i); clusterRedis.shard(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

// TestRedisLogClusterFlushAcrossShards: one flush of writes of many
// shards makes a call per shard, and each write gets its own reply, in
// the order of the writes: ok, fenced (the lease is another's), missing
// (no such log), whatever shard each is in.
func TestRedisLogClusterFlushAcrossShards(t *testing.T) {
	l, rdb := newClusterLog(t, config.EventLogLimits{}, nil)
	ctx := context.Background()
	event, err := proto.Marshal(logEvent(1, false))
	if err != nil {
		t.Fatal(err)
	}
	var writes []commitWrite
	var want []string
	for i := range 24 {
		id := fmt.Sprint("c", i)
		w := commitWrite{id: id, seq: 1, event: event, renew: true}
		switch i % 3 {
		case 0:
			open(t, l, id, "k")
			want = append(want, "ok")
		case 1:
			open(t, l, id, "k")
			if err := rdb.Set(ctx, clusterRedis.lease(id), "9 other", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			w.fence = "1 me"
			want = append(want, "fenced")
		case 2:
			want = append(want, "missing")
		}
		writes = append(writes, w)
	}
	shards := map[int]bool{}
	for _, w := range writes {
		shards[clusterRedis.shard(w.id)] = true
	}
	if len(shards) < 4 {
		t.Fatalf("the writes are of %d shards: pick ids of more", len(shards))
	}
	replies, evicted, err := l.commitWrites(ctx, writes)
	if err != nil || len(evicted) != 0 {
		t.Fatalf("commitWrites: %v (evicted %v)", err, evicted)
	}
	if !slices.Equal(replies, want) {
		t.Fatalf("replies\n%v\nwant\n%v", replies, want)
	}
	for i, w := range writes {
		p, err := l.Read(w.id, 0)
		if got := len(p.Events); want[i] == "ok" && (err != nil || got != 1) {
			t.Errorf("%s: %d events, %v", w.id, got, err)
		}
	}
}

// TestRedisLogClusterAppendsAtOnce: many completions of every shard
// appending at once share flushes, and every log is whole and in order.
func TestRedisLogClusterAppendsAtOnce(t *testing.T) {
	l, _ := newClusterLog(t, config.EventLogLimits{}, nil)
	const logs, events = 64, 20
	for i := range logs {
		open(t, l, fmt.Sprint("c", i), "k")
	}
	var wg sync.WaitGroup
	for i := range logs {
		wg.Go(func() { appendRun(l, fmt.Sprint("c", i), events, true) })
	}
	wg.Wait()
	for i := range logs {
		p, err := l.Read(fmt.Sprint("c", i), 0)
		if err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), seqsTo(events)) {
			t.Fatalf("c%d: %v ended %v, %v", i, testkit.Seqs(p.Events), p.Ended, err)
		}
	}
}

// seqsTo is 1..n.
func seqsTo(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// TestRedisLogClusterShardsBounds: each shard keeps its share of the
// bound on completions (32 over 16 shards: 2), evicting its own oldest
// ended log; another shard's logs stay, though the fleet holds more than
// two ended logs.
func TestRedisLogClusterShardsBounds(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l, _ := newClusterLog(t, config.EventLogLimits{MaxCompletions: 2 * ClusterShards}, clk.now)
	mine, other := idsOfShard(3, 3, "m"), idsOfShard(5, 2, "o")
	for _, id := range append(slices.Clone(mine[:2]), other...) {
		open(t, l, id, "k")
		appendRun(l, id, 2, true)
		clk.add(time.Millisecond)
	}
	open(t, l, mine[2], "k") // shard 3 is at its share: its oldest ended log goes
	for _, id := range []string{mine[1], mine[2], other[0], other[1]} {
		if _, err := l.Read(id, 0); err != nil {
			t.Errorf("%s: %v, want kept", id, err)
		}
	}
	if _, err := l.Read(mine[0], 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("%s: err = %v, want evicted", mine[0], err)
	}
}

// TestRedisLogClusterExpiresEveryShard: the sweep runs on every shard:
// the ended logs of all of them are dropped after their retention.
func TestRedisLogClusterExpiresEveryShard(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l, rdb := newClusterLog(t, config.EventLogLimits{Retention: time.Minute}, clk.now)
	var ids []string
	for n := range ClusterShards {
		ids = append(ids, idsOfShard(n, 1, "e")...)
	}
	for _, id := range ids {
		open(t, l, id, "k")
		appendRun(l, id, 2, true)
	}
	clk.add(2 * time.Minute)
	l.Expire(clk.now())
	for _, id := range ids {
		n, err := rdb.Exists(context.Background(), clusterRedis.log(id), clusterRedis.meta(id)).Result()
		if err != nil || n != 0 {
			t.Errorf("%s (shard %d): %d keys left (%v), want it dropped", id, clusterRedis.shard(id), n, err)
		}
	}
}

// TestRedisLeasesOnCluster: leases of every shard renew in one batch, one
// call per shard, each answered for itself: the one another replica took
// is lost, the others renewed.
func TestRedisLeasesOnCluster(t *testing.T) {
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(redistest.NewCluster(t, 3)))
	ctx := context.Background()
	ls := NewRedisLeases(rdb, 20*time.Second) // a batch waits a twentieth
	held := acquireAll(t, ls, 40)
	if err := rdb.Del(ctx, clusterRedis.lease("c7")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, "c7", "B"); err != nil {
		t.Fatal(err)
	}
	errs := renewAll(ls, held)
	for i, err := range errs {
		if want := i == 7; errors.Is(err, errLeaseLost) != want || (!want && err != nil) {
			t.Errorf("renew c%d: %v", i, err)
		}
	}
	if h, ok, err := ls.Holder(ctx, "c7"); err != nil || !ok || h.Replica != "B" {
		t.Fatalf("holder of c7: %+v %v %v", h, ok, err)
	}
	if err := ls.Release(ctx, held[3]); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := ls.Holder(ctx, "c3"); ok {
		t.Fatal("c3 held after its release")
	}
}

// TestRedisLogClusterFlushWhenANodeLostItsScripts: a node that restarted
// (here: flushed its scripts) answers NOSCRIPT to its calls of a flush
// while the others' calls ran; only its calls run again, so that every
// write is answered ok once (not "order", as a whole flush run twice
// would answer the writes the other nodes took). The calls that run again
// check that each log follows on: the node restarted from a copy saved
// before c0's last event, whose next write is refused gap.
func TestRedisLogClusterFlushWhenANodeLostItsScripts(t *testing.T) {
	l, rdb := newClusterLog(t, config.EventLogLimits{}, nil)
	ctx := context.Background()
	var writes []commitWrite
	for i := range 32 {
		id := fmt.Sprint("c", i)
		open(t, l, id, "k")
		writes = append(writes, commitWrite{id: id, seq: 1, renew: true})
	}
	flush := func(seq uint64) []string {
		event, err := proto.Marshal(logEvent(seq, false))
		if err != nil {
			t.Fatal(err)
		}
		for i := range writes {
			writes[i].seq, writes[i].event, writes[i].renew = seq, event, seq == 1
		}
		replies, _, err := l.commitWrites(ctx, writes)
		if err != nil {
			t.Fatal(err)
		}
		return replies
	}
	flush(1) // every node has the script now
	node, err := rdb.MasterForKey(ctx, clusterRedis.log("c0"))
	if err != nil {
		t.Fatal(err)
	}
	// The node restarts from a copy saved before c0's second event.
	loseWrites(t, rdb, "c0", func() { flush(2) })
	if err := node.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	losses := l.losses.Load()
	for i, r := range flush(3) {
		if want := map[bool]string{true: "gap", false: "ok"}[writes[i].id == "c0"]; r != want {
			t.Errorf("%s: %q after one node lost its scripts, want %s", writes[i].id, r, want)
		}
	}
	if l.losses.Load() == losses {
		t.Error("a node that lost its scripts is not counted as a possible loss of writes")
	}
	for _, w := range writes {
		want := []uint64{1, 2, 3}
		if w.id == "c0" {
			want = []uint64{1}
		}
		if p, err := l.Read(w.id, 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), want) {
			t.Errorf("%s: %v, %v; want %v", w.id, testkit.Seqs(p.Events), err, want)
		}
	}
}

// TestRedisLeasesOnClusterWithANodeDown: the renewals of one batch go to
// each shard's node at once, so that a node that does not answer fails its
// own shards' renewals only; the others are renewed. (The nodes serve
// their slots while another is down: cluster-require-full-coverage no.)
func TestRedisLeasesOnClusterWithANodeDown(t *testing.T) {
	nodes := redistest.NewCluster(t, 3, "--cluster-require-full-coverage", "no")
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(nodes))
	ls := NewRedisLeases(rdb, 20*time.Second)
	held := acquireAll(t, ls, 40)
	ids := make([]string, len(held))
	for i, l := range held {
		ids[i] = l.ID
	}
	onDown := stopNodeOf(t, nodes, rdb, ids)
	want := make([]bool, len(held)) // whether c<i>'s node is down
	for i, l := range held {
		want[i] = onDown[l.ID]
	}
	errs := renewAll(ls, held)
	failed := 0
	for i, err := range errs {
		switch {
		case want[i] && (err == nil || errors.Is(err, errLeaseLost)):
			t.Errorf("c%d, on the node down: %v, want an error that is not a lost lease", i, err)
		case !want[i] && err != nil:
			t.Errorf("c%d, on a node up: %v", i, err)
		}
		if want[i] {
			failed++
		}
	}
	if failed == 0 || failed == len(held) {
		t.Fatalf("%d of %d leases on the node down: pick other ids", failed, len(held))
	}
}

// TestRedisLogClusterFlushWithANodeDown: a flush whose calls to one node
// fail answers the writes of the other nodes' shards: the failed writes
// return ErrUnavailable (the pair log keeps those completions in memory
// meanwhile), the others return once written. The committer hands each
// write its own outcome (TestCommitterPartialFlush).
func TestRedisLogClusterFlushWithANodeDown(t *testing.T) {
	nodes := redistest.NewCluster(t, 3, "--cluster-require-full-coverage", "no")
	rdb := testkit.ServerClusterClient(t, redistest.Addrs(nodes))
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	var ids []string
	for i := range 32 {
		ids = append(ids, fmt.Sprint("c", i))
		open(t, l, ids[i], "k")
		appendRun(l, ids[i], 1, false)
	}
	onDown := stopNodeOf(t, nodes, rdb, ids)
	losses := l.losses.Load()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { _, errs[i] = l.add(id, nil, logEvent(2, false), nil, false) })
	}
	wg.Wait()
	for i, id := range ids {
		switch {
		case onDown[id] && !errors.Is(errs[i], ErrUnavailable):
			t.Errorf("%s, on the node down: %v, want unavailable", id, errs[i])
		case !onDown[id] && errs[i] != nil:
			t.Errorf("%s, on a node up: %v", id, errs[i])
		case !onDown[id]:
			if p, err := l.Read(id, 0); err != nil || !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2}) {
				t.Errorf("%s: %v, %v", id, testkit.Seqs(p.Events), err)
			}
		}
	}
	if l.losses.Load() == losses {
		t.Error("a flush that failed is not counted as a possible loss of writes: the next writes would not check their logs")
	}
}

// stopNodeOf stops the node of nodes that holds the shard of ids[0], and
// says which of ids have their shard there.
func stopNodeOf(t *testing.T, nodes []*redistest.Server, rdb *redis.ClusterClient, ids []string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	addrOf := func(id string) string {
		c, err := rdb.MasterForKey(ctx, clusterRedis.log(id))
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	down := addrOf(ids[0])
	onDown := map[string]bool{}
	for _, id := range ids {
		onDown[id] = addrOf(id) == down
	}
	for _, n := range nodes {
		if n.Addr == down {
			n.Stop()
		}
	}
	return onDown
}

// acquireAll acquires the leases of c0 … c<n-1> for replica A.
func acquireAll(t *testing.T, ls Leases, n int) []Lease {
	t.Helper()
	var held []Lease
	for i := range n {
		l, err := ls.Acquire(context.Background(), fmt.Sprint("c", i), "A")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return held
}

// renewAll renews held at once (one batch), and answers each renewal.
func renewAll(ls Leases, held []Lease) []error {
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, l := range held {
		wg.Go(func() { errs[i] = ls.Renew(context.Background(), l) })
	}
	wg.Wait()
	return errs
}

// TestRedisLogFullReason: the warning for a completion kept apart because
// the Redis log has no room names, on a Cluster, its shard and the
// shard's share of the bound.
func TestRedisLogFullReason(t *testing.T) {
	limits := config.EventLogLimits{MaxCompletions: 1000}
	if got := (&RedisLog{ks: oneRedis, limits: limits}).fullReason("c1"); got != "the Redis log is full of running completions" {
		t.Errorf("one Redis: %q", got)
	}
	got := (&RedisLog{ks: clusterRedis, limits: limits}).fullReason("c1")
	want := fmt.Sprintf("(s%d of 16)", clusterRedis.shard("c1"))
	if !strings.Contains(got, want) || !strings.Contains(got, "each shard keeps 63") {
		t.Errorf("a Cluster: %q, want %s and the share 63", got, want)
	}
}
