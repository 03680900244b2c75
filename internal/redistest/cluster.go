package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
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
	return newCluster(tb, n, nil, args)
}

// NewTLSCluster is NewCluster for nodes that speak TLS only, to clients
// and to one another (tls-cluster, tls-replication), each with a
// certificate for 127.0.0.1 signed by one fresh authority, whose
// certificate is in each node's CAFile.
func NewTLSCluster(tb testing.TB, n int, args ...string) []*Server {
	tb.Helper()
	certs, err := newCertificates(tb.TempDir())
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return newCluster(tb, n, certs, append([]string{"--tls-cluster", "yes", "--tls-replication", "yes"}, args...))
}

// newCluster is NewCluster, its nodes speaking TLS with certs (nil:
// none).
func newCluster(tb testing.TB, n int, certs *certificates, args []string) []*Server {
	tb.Helper()
	nodes, buses := startNodes(tb, n, certs, args)
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	if err := formCluster(ctx, nodes, buses); err != nil {
		tb.Fatalf("redistest: a cluster of %d: %v", n, err)
	}
	return nodes
}

// startNodes runs n redis-servers in cluster mode, each alone, with args
// added (speaking TLS with certs, unless nil), and answers them and their
// cluster bus ports.
func startNodes(tb testing.TB, n int, certs *certificates, args []string) (nodes []*Server, buses []string) {
	nodes, buses = make([]*Server, n), make([]string, n)
	for i := range nodes {
		dir := tb.TempDir()
		buses[i] = freePort(tb)
		// Notices, not warnings only: a failed test logs the last of them
		// (Server.tellIfFailed), which say when a node synced from which
		// primary, from what offset, and took over.
		s := &Server{tb: tb, dir: dir, args: append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", dir + "/nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-port", buses[i], "--loglevel", "notice"}, args...)}
		if certs != nil {
			certs.serve(s)
		}
		nodes[i] = run(tb, s)
	}
	return nodes, buses
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
func formCluster(ctx context.Context, nodes []*Server, buses []string) error {
	clients := make([]*redis.Client, len(nodes))
	for i, s := range nodes {
		clients[i] = s.client()
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
	return until(ctx, func() bool { return clusterUp(ctx, clients) })
}

// clusterUp reports whether every node says the cluster is ok, knows
// every node and knows an owner for every slot. (A cluster ok is not
// enough: with --cluster-require-full-coverage no, a node says ok before
// gossip told it who owns the others' slots, and a client that loads the
// slots from it sees a primary fewer.)
func clusterUp(ctx context.Context, clients []*redis.Client) bool {
	for _, c := range clients {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_slots_assigned:%d\r\n", clusterSlots)) ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
			return false
		}
	}
	return true
}

// NewReplicatedCluster runs a Redis Cluster of n primaries, each with one
// replica, for tb, as NewCluster does: replicas[i] replicates primaries[i]
// and has received its writes so far. It returns once every node says the
// cluster is ok and each replica's link to its primary is up.
func NewReplicatedCluster(tb testing.TB, n int, args ...string) (primaries, replicas []*Server) {
	tb.Helper()
	// A replica's first sync starts at once, not after the 5 s Redis
	// waits by default for more replicas to share it.
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	primaries = NewCluster(tb, n, args...)
	replicas, buses := startNodes(tb, n, nil, args)
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	if err := addReplicas(ctx, primaries, replicas, buses); err != nil {
		tb.Fatalf("redistest: replicas for a cluster of %d: %v", n, err)
	}
	return primaries, replicas
}

// addReplicas introduces each of replicas (cluster bus ports buses) to
// the cluster of primaries, makes it replicate the primary of the same
// index, and waits until every node knows all of them, the cluster is ok,
// and each replica is in sync.
func addReplicas(ctx context.Context, primaries, replicas []*Server, buses []string) error {
	first := primaries[0].client()
	defer first.Close()
	for i, s := range replicas {
		host, port, _ := net.SplitHostPort(s.Addr)
		if err := first.Do(ctx, "cluster", "meet", host, port, buses[i]).Err(); err != nil {
			return fmt.Errorf("cluster meet %s: %w", s.Addr, err)
		}
	}
	all := append(append([]*Server(nil), primaries...), replicas...)
	clients := make([]*redis.Client, len(all))
	for i, s := range all {
		clients[i] = s.client()
		defer clients[i].Close()
	}
	if err := until(ctx, func() bool { return clusterUp(ctx, clients) }); err != nil {
		return err
	}
	ids := make([]string, len(all))
	for i, c := range clients {
		id, err := c.Do(ctx, "cluster", "myid").Text()
		if err != nil {
			return fmt.Errorf("%s: cluster myid: %w", all[i].Addr, err)
		}
		ids[i] = id
	}
	n := len(primaries)
	for i, r := range clients[n:] {
		if err := r.Do(ctx, "cluster", "replicate", ids[i]).Err(); err != nil {
			return fmt.Errorf("%s: cluster replicate: %w", replicas[i].Addr, err)
		}
	}
	// Synced, and known as replicas by every node: a node that does not
	// know a replica's primary yet refuses it its vote in a failover.
	return until(ctx, func() bool {
		for _, r := range clients[n:] {
			info, err := r.Info(ctx, "replication").Result()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false
			}
		}
		for _, c := range clients {
			out, err := c.Do(ctx, "cluster", "nodes").Text()
			if err != nil {
				return false
			}
			for i := range replicas {
				if primaryOf(out, ids[n+i]) != ids[i] {
					return false
				}
			}
		}
		return clusterUp(ctx, clients)
	})
}

// until polls cond every 50 ms until it holds, or ctx ends.
func until(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not so after %s", clusterWait)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Failover makes replica the primary of its primary's slots, and returns
// once every node of nodes that runs (not stopped) says so. With takeover, at once,
// without its primary's agreement (CLUSTER FAILOVER TAKEOVER, what an
// operator does when the primary is gone: the writes the replica had not
// received are lost, as in an automatic failover); otherwise once it has
// every write of its primary (CLUSTER FAILOVER: nothing lost, the
// primary becomes its replica).
func Failover(tb testing.TB, replica *Server, takeover bool, nodes []*Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	c := replica.client()
	defer c.Close()
	id, err := c.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		tb.Fatalf("redistest: %s: cluster myid: %v", replica.Addr, err)
	}
	args := []any{"cluster", "failover"}
	if takeover {
		args = append(args, "takeover")
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		tb.Fatalf("redistest: %s: %v: %v", replica.Addr, args, err)
	}
	err = until(ctx, func() bool {
		for _, s := range nodes {
			if !s.running() {
				continue
			}
			opt := s.options()
			opt.MaxRetries = -1
			n := redis.NewClient(opt)
			out, err := n.Do(ctx, "cluster", "nodes").Text()
			_ = n.Close()
			if err != nil || !isPrimary(out, id) {
				return false
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("redistest: %s is not the primary everywhere: %v", replica.Addr, err)
	}
}

// isPrimary reports whether CLUSTER NODES's answer nodes shows node id as
// a primary.
func isPrimary(nodes, id string) bool {
	f := nodeLine(nodes, id)
	return len(f) > 2 && strings.Contains(f[2], "master")
}

// primaryOf is the id of the primary of replica id in CLUSTER NODES's
// answer nodes, empty when it is none's replica there.
func primaryOf(nodes, id string) string {
	f := nodeLine(nodes, id)
	if len(f) < 4 || !strings.Contains(f[2], "slave") {
		return ""
	}
	return f[3]
}

// nodeLine is the fields of node id's line in CLUSTER NODES's answer
// nodes: id, address, flags, primary, …
func nodeLine(nodes, id string) []string {
	for line := range strings.Lines(nodes) {
		if f := strings.Fields(line); len(f) > 3 && f[0] == id {
			return f
		}
	}
	return nil
}

// Synced waits until replica has every write its primary primary has
// acknowledged so far: its replication offset reached the primary's.
// (WAIT would not do: it counts the replicas that have the writes of the
// connection it is sent on, and a test's writes go through another.)
func Synced(tb testing.TB, primary, replica *Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	p, r := primary.client(), replica.client()
	defer p.Close()
	defer r.Close()
	want, err := replOffset(ctx, p, "master_repl_offset")
	if err != nil {
		tb.Fatalf("redistest: %s: %v", primary.Addr, err)
	}
	err = until(ctx, func() bool {
		got, err := replOffset(ctx, r, "slave_repl_offset")
		return err == nil && got >= want
	})
	if err != nil {
		tb.Fatalf("redistest: %s does not have its primary's writes (offset %d): %v", replica.Addr, want, err)
	}
}

// replOffset reads field, a replication offset, from c's INFO replication.
func replOffset(ctx context.Context, c *redis.Client, field string) (int64, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(info, field+":")
	if !ok {
		return 0, fmt.Errorf("INFO replication has no %s", field)
	}
	v, _, _ := strings.Cut(rest, "\r\n")
	return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
}

// CutReplicas closes the replication links of primary (CLIENT KILL TYPE
// replica): its replicas get none of its writes from then on until they
// reconnect, which a paused one (Pause) does not. So a replica paused,
// cut, then promoted after its primary's writes (Failover with takeover)
// lacks them, as a replica promoted after its primary died before it
// passed them on.
func CutReplicas(tb testing.TB, primary *Server) {
	tb.Helper()
	c := primary.client()
	defer c.Close()
	if err := c.ClientKillByFilter(context.Background(), "type", "replica").Err(); err != nil {
		tb.Fatalf("redistest: %s: client kill type replica: %v", primary.Addr, err)
	}
}

// SlotMove is a slot on its way from one primary to another while the
// cluster serves, step by step as redis-cli --cluster reshard moves it:
// the slot importing on the target and migrating on the source, its keys
// moved a few at a time (MIGRATE), then the slot given to the target.
// Meanwhile a command on keys of the slot that are not all on one side
// is refused TRYAGAIN; one on keys already moved is sent on (ASK).
type SlotMove struct {
	tb       testing.TB
	slot     int
	from, to *redis.Client
	toID     string
	toAddr   string
	password string
}

// BeginMove starts moving slot from the primary from to the primary to.
func BeginMove(tb testing.TB, slot int, from, to *Server) *SlotMove {
	tb.Helper()
	pw := password(from.args)
	m := &SlotMove{tb: tb, slot: slot, toAddr: to.Addr, password: pw,
		from: from.client(), to: to.client()}
	tb.Cleanup(func() { _ = m.from.Close(); _ = m.to.Close() })
	fromID := m.do(m.from, "cluster", "myid")
	m.toID = m.do(m.to, "cluster", "myid")
	m.do(m.to, "cluster", "setslot", slot, "importing", fromID)
	m.do(m.from, "cluster", "setslot", slot, "migrating", m.toID)
	return m
}

// do runs a command on c, failing the test when it fails, and answers its
// reply as text (empty when it is not).
func (m *SlotMove) do(c *redis.Client, args ...any) string {
	m.tb.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		m.tb.Fatalf("redistest: %s: %v: %v", c.Options().Addr, args, err)
	}
	s, _ := v.(string)
	return s
}

// Migrate moves up to n of the slot's keys still on the source, and
// answers how many are left there.
func (m *SlotMove) Migrate(n int) int {
	m.tb.Helper()
	ctx := context.Background()
	keys, err := m.from.ClusterGetKeysInSlot(ctx, m.slot, n).Result()
	if err != nil {
		m.tb.Fatalf("redistest: cluster getkeysinslot %d: %v", m.slot, err)
	}
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(m.toAddr)
		args := []any{"migrate", host, port, "", 0, 5000}
		if m.password != "" {
			args = append(args, "auth", m.password)
		}
		args = append(args, "keys")
		for _, k := range keys {
			args = append(args, k)
		}
		m.do(m.from, args...)
	}
	left, err := m.from.ClusterCountKeysInSlot(ctx, m.slot).Result()
	if err != nil {
		m.tb.Fatalf("redistest: cluster countkeysinslot %d: %v", m.slot, err)
	}
	return int(left)
}

// Finish moves the slot's keys left, then gives the slot to the target:
// on the target, the source, then every other node of nodes that runs;
// it returns once they all say so.
func (m *SlotMove) Finish(nodes []*Server) {
	m.tb.Helper()
	for m.Migrate(100) > 0 {
	}
	m.do(m.to, "cluster", "setslot", m.slot, "node", m.toID)
	m.do(m.from, "cluster", "setslot", m.slot, "node", m.toID)
	var clients []*redis.Client
	for _, s := range nodes {
		if !s.running() {
			continue
		}
		c := s.client()
		defer c.Close()
		clients = append(clients, c)
		if s.Addr != m.toAddr && s.Addr != m.from.Options().Addr {
			m.do(c, "cluster", "setslot", m.slot, "node", m.toID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	views := map[string]string{}
	err := until(ctx, func() bool {
		agree := true
		for _, c := range clients {
			owner := slotOwner(ctx, c, m.slot)
			views[c.Options().Addr] = owner
			if owner != m.toAddr {
				agree = false
				// A node that took the slot back from a message sent
				// before the source let it go (its epoch above what the
				// node knew of the target's) is told again, as
				// redis-cli's resharding tells every primary.
				_ = c.Do(ctx, "cluster", "setslot", m.slot, "node", m.toID).Err()
			}
		}
		return agree
	})
	if err != nil {
		m.tb.Fatalf("redistest: the nodes do not agree that slot %d is %s's: %v; each node's view (empty: it did not say): %v", m.slot, m.toAddr, err, views)
	}
}

// slotOwner is the address of the primary of slot as the node of c sees
// it (CLUSTER SLOTS, what the clients read), empty when it cannot tell.
func slotOwner(ctx context.Context, c *redis.Client, slot int) string {
	//lint:ignore SA1019 CLUSTER SHARDS of Redis 7.0 answered a slot's old owner for 20 s after its move in a CI run; CLUSTER SLOTS is what go-redis reads
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return ""
	}
	for _, r := range slots {
		if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr
		}
	}
	return ""
}
