package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/client"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// The fleet test of issue 14, at the level of processes: completiond built
// once, three replicas of it sharing one real redis-server on loopback, a
// replica killed with SIGKILL mid-stream. The in-process versions of the
// fleet's other properties (service/takeover_test.go, fleet_test.go,
// fleet_shared_test.go) test the same code with replicas in one process.

// fleetLeaseTTL keeps the takeover quick: a dead replica's completions
// are taken over about a lease after its death.
const fleetLeaseTTL = 500 * time.Millisecond

// buildCompletiond builds the server into a temporary directory.
func buildCompletiond(t *testing.T) string {
	t.Helper()
	bin := t.TempDir() + "/completiond"
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is one completiond process of the fleet.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string
	logs *procLogs
	done chan struct{} // closed once it has exited and its output is read
}

// procLogs keeps a process's output and finds its serving line.
type procLogs struct {
	mu      sync.Mutex
	b       bytes.Buffer
	partial []byte
	addr    chan string
}

func (l *procLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		var line struct{ Msg, Addr string }
		if json.Unmarshal(l.partial[:i], &line) == nil && line.Msg == "serving" {
			select {
			case l.addr <- line.Addr:
			default:
			}
		}
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

func (l *procLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startReplica starts completiond as replica name of the fleet on Redis
// at redisAddr, on a free loopback port, and waits until its health says
// SERVING. It is killed when t ends.
func startReplica(t *testing.T, bin, name, redisAddr string, args ...string) *proc {
	t.Helper()
	return startReplicaOn(t, bin, name, "redis://"+redisAddr, nil, args...)
}

// startReplicaOn is startReplica on the Redis at redisURL, with env added
// to the process's environment.
func startReplicaOn(t *testing.T, bin, name, redisURL string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, logs: &procLogs{addr: make(chan string, 1)}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"--addr", "127.0.0.1:0", "--redis-url", redisURL,
		"--lease-ttl", fleetLeaseTTL.String(), "--replica", name}, args...)...)
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			base = append(base, kv)
		}
	}
	p.cmd.Env = append(base, env...) // the last of a name wins
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("replica %s logs:\n%s", name, p.logs.String())
		}
	})
	select {
	case p.addr = <-p.logs.addr:
	case <-p.done:
		t.Fatalf("replica %s exited: %s", name, p.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s: no serving line after 30s: %s", name, p.logs.String())
	}
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s: health %v %v after 15s", name, h.GetStatus(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// connect is a client of p, closed when t ends.
func connect(t *testing.T, p *proc) *client.Client {
	t.Helper()
	c, err := client.Connect(p.addr, client.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFleetReplicaKilled: three completiond processes share a
// redis-server (or a Redis Cluster of three); a client streams through A
// with a resume grace; A is killed with SIGKILL mid-stream; the client
// attaches through B after the last seq it saw. It receives every seq
// exactly once, the REPLICA_LOST transition is there (STREAM_RESUME on the
// prefill route sim, RETRY with the partial discarded on sim-noprefill),
// and the answer is whole: the same as an uninterrupted run of the request
// on C.
func TestFleetReplicaKilled(t *testing.T) {
	bin := buildCompletiond(t)
	rs := redistest.Start(t)
	onRedis := func(t *testing.T, name string) *proc { return startReplica(t, bin, name, rs) }
	for _, tc := range []struct {
		route  string
		reason completionv1.TransitionReason
	}{
		{"sim", completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME},
		{"sim-noprefill", completionv1.TransitionReason_TRANSITION_REASON_RETRY},
	} {
		t.Run(tc.route, func(t *testing.T) { testReplicaKilled(t, onRedis, tc.route, tc.reason) })
	}
	t.Run("redis cluster", func(t *testing.T) {
		nodes := redistest.Addrs(redistest.NewCluster(t, 3))
		// One node's URL, another as addr: the replicas find the third.
		url := "redis://" + nodes[0] + "?addr=" + nodes[1]
		onCluster := func(t *testing.T, name string) *proc {
			p := startReplicaOn(t, bin, name, url, nil, "--redis-cluster")
			if !strings.Contains(p.logs.String(), `"redis_cluster":true`) {
				t.Fatalf("replica %s's serving line lacks redis_cluster: %s", name, p.logs.String())
			}
			return p
		}
		testReplicaKilled(t, onCluster, "sim", completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME)
	})
}

// testReplicaKilled is TestFleetReplicaKilled on route, its replicas
// started by start, the takeover's transition reason.
func testReplicaKilled(t *testing.T, start func(t *testing.T, name string) *proc, route string, reason completionv1.TransitionReason) {
	a, b, c := start(t, "A"), start(t, "B"), start(t, "C")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := &completionv1.CompleteRequest{
		Route:       route,
		Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "Tell me about fleets."}}}}}},
		Metadata:    map[string]string{"sim.pace": "20ms", "sim.words": "60"},
		ResumeGrace: durationpb.New(30 * time.Second),
	}

	whole, err := connect(t, c).Complete(ctx, &completionv1.CompleteRequest{Route: req.Route, Messages: req.Messages,
		Metadata: map[string]string{"sim.words": "60", "sim.pace": "1ms"}})
	if err != nil {
		t.Fatalf("uninterrupted run on C: %v", err)
	}
	want := resultText(whole.GetResult())

	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	st, err := connect(t, a).Stream(actx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got []*completionv1.CompletionEvent
	for deltas := 0; deltas < 8; {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("through A, before the kill: %v", err)
		}
		got = append(got, ev)
		if ev.GetDelta() != nil {
			deltas++
		}
	}
	id, cut := got[0].GetStarted().GetCompletionId(), got[len(got)-1].GetAttempt()
	killed := time.Now()
	a.kill()
	acancel() // the stream through A would try A again: the client goes to B instead

	at, err := connect(t, b).Attach(ctx, id, got[len(got)-1].GetSeq())
	if err != nil {
		t.Fatal(err)
	}
	var tookOver time.Duration
	var transition *completionv1.Transition
	for {
		ev, err := at.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("attach through B: %v", err)
		}
		if tr := ev.GetTransition(); tr.GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST && transition == nil {
			tookOver, transition = time.Since(killed), tr
		}
		got = append(got, ev)
	}
	if transition == nil {
		t.Fatalf("no REPLICA_LOST transition in %v", got)
	}
	t.Logf("%s: %s %s; discarded %v", route, transition.GetReason(), transition.GetMessage(), transition.GetDiscardedAttempts())
	if transition.GetReason() != reason {
		t.Errorf("takeover transition %s, want %s", transition.GetReason(), reason)
	}
	for i, ev := range got {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d: every seq exactly once is broken: %v", i, ev.GetSeq(), got)
		}
	}
	res := got[len(got)-1].GetResult()
	if res == nil {
		t.Fatal("the last event is not the result")
	}
	if resultText(res) != want {
		t.Errorf("answer %q, want %q (uninterrupted, on C)", resultText(res), want)
	}
	if kept := keptText(got); kept != want {
		t.Errorf("the deltas kept assemble %q, want %q", kept, want)
	}
	switch route {
	case "sim":
		if all := allText(got); all != want {
			t.Errorf("a token repeated: the deltas concatenate to %q", all)
		}
	default:
		if !slices.Contains(transition.GetDiscardedAttempts(), cut) {
			t.Errorf("the partial answer (attempt %d) is not discarded: discarded %v", cut, transition.GetDiscardedAttempts())
		}
	}
	t.Logf("process fleet, %s: the REPLICA_LOST transition reached the client %v after SIGKILL (lease %s)",
		route, tookOver.Round(time.Millisecond), fleetLeaseTTL)
}

// TestFleetRedisRestarted: Redis is killed and restarted empty while a
// resumable Stream runs through A: the Stream finishes whole (its events in
// A's memory meanwhile; its lease, lost with Redis's data, taken back by
// A's renewal), and once Redis is back a new completion through A can be
// attached through B, and so can one that ended through A before the
// restart (A restores the logs Redis lost whole from its memory); that
// one's start, retried with its idempotency key through B, attaches to
// it rather than starting it again (A restores its record too). The lease here is longer than Redis's restart: a
// Redis away for longer than the lease stops the completions holding
// leases (see the README, "Running a fleet").
func TestFleetRedisRestarted(t *testing.T) {
	bin := buildCompletiond(t)
	t.Run("redis", func(t *testing.T) {
		rs := redistest.New(t)
		a := startReplica(t, bin, "A", rs.Addr, "--lease-ttl", "3s")
		b := startReplica(t, bin, "B", rs.Addr, "--lease-ttl", "3s")
		testRedisRestarted(t, a, b, testkit.ServerRedisClient(t, rs.Addr), rs.Restart)
	})
	// Every node of a Redis Cluster killed and started again empty: the
	// cluster forms again from the nodes' configuration files, and the
	// replicas' cluster client finds it.
	t.Run("redis cluster", func(t *testing.T) {
		nodes := redistest.NewCluster(t, 3)
		url := "redis://" + nodes[0].Addr + "?addr=" + nodes[1].Addr
		a := startReplicaOn(t, bin, "A", url, nil, "--redis-cluster", "--lease-ttl", "3s")
		b := startReplicaOn(t, bin, "B", url, nil, "--redis-cluster", "--lease-ttl", "3s")
		testRedisRestarted(t, a, b, testkit.ServerClusterClient(t, redistest.Addrs(nodes)), func() {
			for _, n := range nodes {
				n.Restart()
			}
		})
	})
}

// testRedisRestarted is TestFleetRedisRestarted on replicas a and b,
// restart taking their Redis (rdb) away and bringing it back empty.
func testRedisRestarted(t *testing.T, a, b *proc, rdb redis.UniversalClient, restart func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca, cb := connect(t, a), connect(t, b)
	req := func(text string) *completionv1.CompleteRequest {
		return &completionv1.CompleteRequest{
			Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: text}}}}}},
			Metadata:    map[string]string{"sim.pace": "20ms", "sim.words": "60"},
			ResumeGrace: durationpb.New(30 * time.Second),
		}
	}
	const idemKey = "ended-before-the-restart"
	started := req("ended before the restart")
	started.IdempotencyKey = idemKey
	first, err := ca.Stream(ctx, proto.Clone(started).(*completionv1.CompleteRequest))
	if err != nil {
		t.Fatal(err)
	}
	before, err := first.Wait()
	if err != nil {
		t.Fatal(err)
	}
	st, err := ca.Stream(ctx, req("through a Redis restart"))
	if err != nil {
		t.Fatal(err)
	}
	for deltas := 0; deltas < 5; {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetDelta() != nil {
			deltas++
		}
	}
	restart() // killed, and started again empty
	fold, err := st.Wait()
	if err != nil {
		t.Fatalf("the Stream running while Redis restarted: %v", err)
	}
	if fold.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || fold.Text() != resultText(fold.Result()) {
		t.Fatalf("the Stream running while Redis restarted ended %s with %q, result %q", fold.Reason(), fold.Text(), resultText(fold.Result()))
	}
	if replay, err := ca.Attach(ctx, fold.CompletionID(), 0); err != nil {
		t.Fatal(err)
	} else if f, err := replay.Wait(); err != nil || f.Text() != fold.Text() {
		t.Fatalf("attach through A to the completion that ran while Redis restarted: %v %q", err, f.Text())
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := ca.Stream(ctx, req("redis is back"))
		if err != nil {
			t.Fatal(err)
		}
		fold, err := st.Wait()
		if err != nil {
			t.Fatal(err)
		}
		at, err := cb.Attach(ctx, fold.CompletionID(), 0)
		if err != nil {
			t.Fatal(err)
		}
		replay, err := at.Wait()
		if err == nil && replay.Text() == fold.Text() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a completion through A cannot be attached through B 15s after Redis came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		at, err := cb.Attach(ctx, before.CompletionID(), 0)
		if err != nil {
			t.Fatal(err)
		}
		replay, err := at.Wait()
		if err == nil {
			if replay.Text() != before.Text() || replay.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED {
				t.Fatalf("the completion that ended before the restart, through B: %s %q, want %q", replay.Reason(), replay.Text(), before.Text())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a completion that ended through A before Redis restarted cannot be attached through B 15s after: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its idempotency record (no auth: the caller's name is empty) is put
	// back beside its log; a start retried now finds it.
	record := fleet.RedisIdemKey(sha256Hex(""), sha256Hex(idemKey))
	for rdb.Exists(ctx, record).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idempotency record of a completion that ended through A before Redis restarted is not back 15s after")
		}
		time.Sleep(100 * time.Millisecond)
	}
	again, err := cb.Stream(ctx, started)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := again.Wait(); err != nil || f.CompletionID() != before.CompletionID() || f.Text() != before.Text() {
		t.Fatalf("its start retried with its idempotency key through B: %v, completion %s %q; want %s %q", err, f.CompletionID(), f.Text(), before.CompletionID(), before.Text())
	}
}

// sha256Hex is how the service digests a caller's name and an
// idempotency key for the record's Redis key: the first 16 bytes of
// SHA-256, in hex.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// TestFleetOverTLSRedis: two replicas share a redis-server that speaks TLS
// only and wants a password: rediss:// in --redis-url, the password from
// COMPLETIOND_REDIS_PASSWORD, the server's certificate checked against the
// system's roots (SSL_CERT_FILE names the test's authority). Both serve
// (health SERVING needs Redis's PING), a completion through A is read
// whole through B, and the password shows in no log line. Each runs with
// a group commit delay of its own, from the environment and from the flag.
func TestFleetOverTLSRedis(t *testing.T) {
	bin := buildCompletiond(t)
	const password = "tls-fleet-secret-6f1c"
	t.Run("redis", func(t *testing.T) {
		rs := redistest.NewTLS(t, "--requirepass", password)
		testOverTLSRedis(t, bin, password, "rediss://"+rs.Addr, rs.CAFile)
	})
	// A Redis Cluster whose nodes speak TLS only, to one another too: the
	// replicas check every node's certificate against the URL's host.
	t.Run("redis cluster", func(t *testing.T) {
		nodes := redistest.NewTLSCluster(t, 3, "--requirepass", password, "--masterauth", password)
		testOverTLSRedis(t, bin, password, "rediss://"+nodes[0].Addr+"?addr="+nodes[1].Addr, nodes[0].CAFile, "--redis-cluster")
	})
}

// testOverTLSRedis is TestFleetOverTLSRedis on the Redis of url, with
// password, its authority's certificate in the file ca, args added to the
// replicas' command lines.
func testOverTLSRedis(t *testing.T, bin, password, url, ca string, args ...string) {
	env := []string{"COMPLETIOND_REDIS_PASSWORD=" + password, "SSL_CERT_FILE=" + ca}
	// A commit delay of its own on each: from the environment on A, the
	// flag on B.
	a := startReplicaOn(t, bin, "A", url, append(env, "COMPLETIOND_REDIS_COMMIT_DELAY=3ms"), args...)
	b := startReplicaOn(t, bin, "B", url, env, append([]string{"--redis-commit-delay", "4ms"}, args...)...)
	for p, want := range map[*proc]string{a: `"redis_commit_delay":"3ms"`, b: `"redis_commit_delay":"4ms"`} {
		if !strings.Contains(p.logs.String(), want) {
			t.Errorf("replica %s's serving line lacks %s: %s", p.name, want, p.logs.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := connect(t, a).Stream(ctx, &completionv1.CompleteRequest{
		Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "over TLS"}}}}}},
		Metadata:    map[string]string{"sim.words": "20"},
		ResumeGrace: durationpb.New(30 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	fold, err := st.Wait()
	if err != nil {
		t.Fatal(err)
	}
	at, err := connect(t, b).Attach(ctx, fold.CompletionID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	replay, err := at.Wait()
	if err != nil || replay.Text() != fold.Text() || fold.Text() == "" {
		t.Fatalf("attach through B: %v, %q, want %q", err, replay.Text(), fold.Text())
	}
	for _, p := range []*proc{a, b} {
		if strings.Contains(p.logs.String(), password) {
			t.Errorf("replica %s logged the Redis password", p.name)
		}
	}
}

// TestFleetSessionReplicaKilled: a resumable Session runs through
// process A; the model calls a tool; A is killed with SIGKILL while the
// caller runs it; the caller resumes the Session through B after the last
// seq it saw and sends its result there. B takes the Session over (from
// the log and the checkpoint A saved in Redis when it began to await the
// tools), the next turn runs on B with the tool call and result in its
// conversation, and the caller receives every seq once, to an OK end.
func TestFleetSessionReplicaKilled(t *testing.T) {
	bin := buildCompletiond(t)
	rs := redistest.Start(t)
	a, b := startReplica(t, bin, "A", rs), startReplica(t, bin, "B", rs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := &completionv1.SessionStart{Request: &completionv1.CompleteRequest{
		Route:       "sim",
		Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "Look fleets up."}}}}}},
		Tools:       []*completionv1.Tool{{Name: "search", Description: "searches"}},
		Metadata:    map[string]string{"sim.faults": "tool_use", "sim.words": "30", "sim.pace": "5ms"},
		ResumeGrace: durationpb.New(30 * time.Second),
	}}
	onA := rawSession(t, ctx, a, &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}})
	var got []*completionv1.CompletionEvent
	var call *completionv1.ToolCall
	for call == nil {
		ev, err := onA.Recv()
		if err != nil {
			t.Fatalf("through A, before the tool call: %v", err)
		}
		got, call = append(got, ev), ev.GetToolCall()
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs})
	defer rdb.Close()
	id := got[0].GetStarted().GetCompletionId()
	ck, err := rdb.HStrLen(ctx, "completiond:meta:{"+id+"}", "ck").Result()
	if err != nil || ck == 0 {
		t.Fatalf("no checkpoint in Redis while the caller runs the tool: %d %v", ck, err)
	}
	killed := time.Now()
	a.kill()

	onB := rawSession(t, ctx, b, &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Resume{Resume: &completionv1.SessionResume{
		CompletionId: id, AfterSeq: got[len(got)-1].GetSeq()}}})
	if err := onB.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{
		Results: []*completionv1.ToolResultBlock{{ToolUseId: call.GetId(), Text: "Fleets share Redis."}}}}}); err != nil {
		t.Fatal(err)
	}
	var resumed time.Duration
	for {
		ev, err := onB.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("resumed through B: %v", err)
		}
		if resumed == 0 {
			resumed = time.Since(killed)
		}
		got = append(got, ev)
	}
	for i, ev := range got {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d: every seq exactly once is broken", i, ev.GetSeq())
		}
	}
	res := got[len(got)-1].GetResult()
	if res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN || resultText(res) == "" || keptText(got) != resultText(res) {
		t.Fatalf("result %v: stop %v, text %q, the deltas kept assemble %q", res, res.GetStopReason(), resultText(res), keptText(got))
	}
	answered := false
	for _, m := range res.GetTranscript() {
		for _, c := range m.GetContent() {
			answered = answered || c.GetToolResult().GetText() == "Fleets share Redis."
		}
	}
	if !answered {
		t.Errorf("the transcript lost the tool result sent to B: %v", res.GetTranscript())
	}
	t.Logf("process fleet, Session awaiting tools: the first event through B came %v after SIGKILL (lease %s); the checkpoint in Redis: %d bytes",
		resumed.Round(time.Millisecond), fleetLeaseTTL, ck)
}

// rawSession opens a Session stream on p's generated client and sends first.
func rawSession(t *testing.T, ctx context.Context, p *proc, first *completionv1.SessionRequest) grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent] {
	t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := completionv1.NewCompletionClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(first); err != nil {
		t.Fatal(err)
	}
	return st
}

func resultText(r *completionv1.Result) string {
	var b strings.Builder
	for _, c := range r.GetMessage().GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// keptText is what a live caller assembles: the client library's fold of
// the events (the text deltas of the attempts no transition discarded).
func keptText(evs []*completionv1.CompletionEvent) string {
	var f client.Fold
	for _, ev := range evs {
		f.Add(ev)
	}
	return f.Text()
}

// allText is every text delta, in order.
func allText(evs []*completionv1.CompletionEvent) string {
	var sb strings.Builder
	for _, ev := range evs {
		if d := ev.GetDelta(); d != nil && d.GetKind() == completionv1.DeltaKind_DELTA_KIND_TEXT {
			sb.WriteString(d.GetText())
		}
	}
	return sb.String()
}
