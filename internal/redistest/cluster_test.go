package redistest

import (
	"context"
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
