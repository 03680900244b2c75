package redistest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestNewCluster: a cluster of three answers a cluster client, keys in
// different slots land on different nodes.
func TestNewCluster(t *testing.T) {
	nodes := NewCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: Addrs(nodes)[:1]})
	defer c.Close()
	ctx := context.Background()
	var mu sync.Mutex // ForEachMaster asks the nodes at once
	seen := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, "*").Result()
		if len(keys) > 0 {
			mu.Lock()
			seen[n.Options().Addr] = true
			mu.Unlock()
		}
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil || len(seen) < 2 {
		t.Fatalf("keys on %d nodes (%v), want at least 2", len(seen), err)
	}
}

// TestFailover: a replicated cluster's replica has its primary's writes;
// a failover without loss keeps every write; a takeover by a replica
// that missed the last writes (paused) loses them, as an automatic
// failover does, and the cluster serves on without the old primary.
func TestFailover(t *testing.T) {
	primaries, replicas := NewReplicatedCluster(t, 3)
	nodes := append(append([]*Server(nil), primaries...), replicas...)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: Addrs(primaries)[:1]})
	defer c.Close()
	ctx := context.Background()
	set := func(k string) {
		t.Helper()
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	has := func(k string) bool {
		t.Helper()
		n, err := c.Exists(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	slot := int(c.ClusterKeySlot(ctx, "{a}").Val())
	i := slot * len(primaries) / clusterSlots // the node of {a}'s slot range
	set("{a}1")
	Failover(t, replicas[i], false, nodes)
	set("{a}2")
	if !has("{a}1") || !has("{a}2") {
		t.Fatal("a write lost in a failover without loss")
	}
	// replicas[i] is the primary now, primaries[i] its replica.
	Synced(t, replicas[i], primaries[i])
	primaries[i].Pause()
	CutReplicas(t, replicas[i])
	set("{a}3")
	replicas[i].Stop()
	primaries[i].Resume()
	Failover(t, primaries[i], true, nodes)
	c.ReloadState(ctx)
	if !has("{a}2") || has("{a}3") {
		t.Fatalf("after a takeover: {a}2 kept %t, {a}3 kept %t; want the write the replica missed lost", has("{a}2"), has("{a}3"))
	}
	set("{a}4")
}

// TestSlotMove: while a slot moves, a command on its keys split between
// the two nodes is refused TRYAGAIN; once moved, the slot's keys are all
// on the target, and a client finds them there.
func TestSlotMove(t *testing.T) {
	nodes := NewCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: Addrs(nodes)[:1]})
	defer c.Close()
	ctx := context.Background()
	for i := range 20 {
		if err := c.Set(ctx, fmt.Sprint("{a}", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := int(c.ClusterKeySlot(ctx, "{a}").Val())
	from := nodes[slot*len(nodes)/clusterSlots]
	to := nodes[(slot*len(nodes)/clusterSlots+1)%len(nodes)]
	m := BeginMove(t, slot, from, to)
	if left := m.Migrate(10); left != 10 {
		t.Fatalf("%d keys left after moving 10 of 20", left)
	}
	fc := redis.NewClient(&redis.Options{Addr: from.Addr})
	defer fc.Close()
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprint("{a}", i))
	}
	if err := fc.MGet(ctx, keys...).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("a command on keys on both sides: %v, want TRYAGAIN", err)
	}
	m.Finish(nodes)
	if n, err := c.Exists(ctx, keys...).Result(); err != nil || n != 20 {
		t.Fatalf("after the move: %d of 20 keys (%v)", n, err)
	}
	tc := redis.NewClient(&redis.Options{Addr: to.Addr})
	defer tc.Close()
	if n, err := tc.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 20 {
		t.Fatalf("the target holds %d of the slot's 20 keys (%v)", n, err)
	}
	wait, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	err := until(wait, func() bool { // the client reloads the slots in the background
		c.ReloadState(ctx)
		node, err := c.MasterForKey(ctx, "{a}")
		return err == nil && node.Options().Addr == to.Addr
	})
	if err != nil {
		t.Fatalf("the client does not send the slot to its new node: %v", err)
	}
}

// TestTLSCluster: a cluster whose nodes speak TLS only, to one another
// too, answers a cluster client over TLS that trusts its authority, with
// keys on several nodes.
func TestTLSCluster(t *testing.T) {
	nodes := NewTLSCluster(t, 3, "--requirepass", "pw")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: Addrs(nodes)[:1], Password: "pw", TLSConfig: nodes[0].tls})
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		if len(keys) > 0 {
			seen[n.Options().Addr] = true
		}
		return err
	})
	if err != nil || len(seen) < 2 {
		t.Fatalf("keys on %d nodes (%v), want at least 2", len(seen), err)
	}
}
