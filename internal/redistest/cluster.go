package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterWait bounds how long a new cluster may take to agree it is up.
const clusterWait = 20 * time.Second

// NewCluster runs a Redis Cluster of n primaries (no replicas) for tb, on
// loopback: n redis-servers in cluster mode, each with the same share of
// the slots, introduced to one another. It returns once every node says
// the cluster is ok and knows the others; its nodes are killed when tb
// ends. Addrs lists them, the first one enough to reach the cluster. args
// are added to each node's command line; with --requirepass PASSWORD, the
// nodes are formed with it.
func NewCluster(tb testing.TB, n int, args ...string) []*Server {
	tb.Helper()
	nodes, buses := make([]*Server, n), make([]string, n)
	for i := range nodes {
		dir := tb.TempDir()
		buses[i] = freePort(tb)
		nodes[i] = run(tb, &Server{tb: tb, dir: dir, args: append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", dir + "/nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-port", buses[i]}, args...)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	if err := formCluster(ctx, nodes, buses, password(args)); err != nil {
		tb.Fatalf("redistest: a cluster of %d: %v", n, err)
	}
	return nodes
}

// password is the value of --requirepass in args, or empty.
func password(args []string) string {
	for i, a := range args[:max(len(args)-1, 0)] {
		if a == "--requirepass" {
			return args[i+1]
		}
	}
	return ""
}

// Addrs are the addresses of servers.
func Addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr
	}
	return out
}

// freePort is a loopback port that was free a moment ago (a node's
// cluster bus).
func freePort(tb testing.TB) string {
	_, port, _ := net.SplitHostPort(freeAddr(tb))
	return port
}

// formCluster gives each node its share of the slots, introduces the
// first to the others (on their cluster bus ports, buses), and waits until
// every node sees all of them and the cluster ok.
func formCluster(ctx context.Context, nodes []*Server, buses []string, password string) error {
	clients := make([]*redis.Client, len(nodes))
	for i, s := range nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr, Password: password})
		defer clients[i].Close()
	}
	per := clusterSlots / len(nodes)
	for i, c := range clients {
		first, last := i*per, (i+1)*per-1
		if i == len(nodes)-1 {
			last = clusterSlots - 1
		}
		if err := c.Do(ctx, "cluster", "addslotsrange", first, last).Err(); err != nil {
			return fmt.Errorf("%s: cluster addslotsrange: %w", nodes[i].Addr, err)
		}
	}
	for i, s := range nodes[1:] {
		host, port, _ := net.SplitHostPort(s.Addr)
		if err := clients[0].Do(ctx, "cluster", "meet", host, port, buses[i+1]).Err(); err != nil {
			return fmt.Errorf("cluster meet %s: %w", s.Addr, err)
		}
	}
	for {
		if clusterUp(ctx, clients) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not up after %s", clusterWait)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterUp reports whether every node says the cluster is ok and knows
// every node.
func clusterUp(ctx context.Context, clients []*redis.Client) bool {
	for _, c := range clients {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
			return false
		}
	}
	return true
}
