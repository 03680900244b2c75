package service

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// withRedis is a Config mutation that shares the Redis at addr, with a
// short PING interval, and logs into logs when it is not nil.
func withRedis(t *testing.T, addr string, logs *lockedBuffer) func(*Config) {
	return func(c *Config) {
		c.Redis = testkit.ServerRedisClient(t, addr)
		c.RedisPing = 50 * time.Millisecond
		if logs != nil {
			c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		}
	}
}

// waitRedisKeys waits until the Redis at addr holds a key that matches
// pattern: what, which the replicas write there.
func waitRedisKeys(t *testing.T, addr, pattern, what string) {
	t.Helper()
	rdb := testkit.RedisClient(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for len(rdb.Keys(t.Context(), pattern).Val()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in Redis after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healthOf is the serving status g's health service reports for the
// Completion service.
func healthOf(t *testing.T, g *GRPC) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := g.Health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: completionv1.Completion_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetStatus()
}

// waitHealth waits until g's health is want.
func waitHealth(t *testing.T, g *GRPC, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for healthOf(t, g) != want {
		if time.Now().After(deadline) {
			t.Fatalf("health is %v after 10s, want %v", healthOf(t, g), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetAttachOnAnotherReplica: two servers share one Redis; a
// completion streams through A with a resume grace and is cut; an Attach
// through B after the last seq seen gets the rest, every seq once, to the
// result; after its end, B replays the whole of it from the start.
func TestFleetAttachOnAnotherReplica(t *testing.T) {
	addr := redistest.Start(t)
	a, gate := gatedEnv(t, withRedis(t, addr, nil))
	b := newTestEnv(t, withRedis(t, addr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all := cutThenAttach(ctx, t, a.client, b.client, gate.open)
	id := all[0].GetStarted().GetCompletionId()
	replay, rst := attachAll(ctx, b.client, id, 0)
	if rst.Code() != codes.OK || !slices.Equal(testkit.Seqs(replay), testkit.Seqs(all)) {
		t.Fatalf("replay through B: %v, seqs %v, want %v", rst, testkit.Seqs(replay), testkit.Seqs(all))
	}
	if _, st := attachAll(ctx, b.client, "no-such-completion", 0); st.Code() != codes.NotFound {
		t.Fatalf("unknown id through B: %v", st)
	}
}

// TestProcessHealthIgnoresRedis: while Redis does not answer, the overall
// health and the Completion service's are NOT_SERVING but
// ProcessHealthService (what the chart's liveness probe asks) stays
// SERVING; once Redis is back all are SERVING again; Drain turns every one
// NOT_SERVING, ProcessHealthService too.
func TestProcessHealthIgnoresRedis(t *testing.T) {
	const serving, notServing = healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	rs := redistest.New(t)
	e := newTestEnv(t, withRedis(t, rs.Addr, nil))
	drain := func() { e.grpc.Drain(context.Background()) } // nothing runs: it returns at once
	for _, step := range []struct {
		name                     string
		do                       func()
		wantOverall, wantProcess healthpb.HealthCheckResponse_ServingStatus
	}{
		{"redis up", func() {}, serving, serving},
		{"redis down", rs.Stop, notServing, serving},
		{"redis back", rs.Restart, serving, serving},
		{"redis down again", rs.Stop, notServing, serving},
		{"drain", drain, notServing, notServing},
	} {
		step.do()
		waitHealth(t, e.grpc, step.wantOverall) // the Completion service's, which the watcher moves
		for service, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
			"": step.wantOverall,
			completionv1.Completion_ServiceDesc.ServiceName: step.wantOverall,
			ProcessHealthService:                            step.wantProcess,
		} {
			r, err := e.grpc.Health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				t.Fatalf("%s: health of %q: %v", step.name, service, err)
			}
			if got := r.GetStatus(); got != want {
				t.Errorf("%s: health of %q = %v, want %v", step.name, service, got, want)
			}
		}
	}
}

// TestFleetRedisRestartMidRun: Redis goes away while a completion runs on
// A: health turns NOT_SERVING, the completion finishes whole (an attacher
// on A gets all of it), a log line and the metrics say it was kept in
// memory only; new completions run meanwhile. Once Redis is back (empty),
// health is SERVING again, A publishes the completion that ended while it
// was away (B replays it whole), and a new completion is shared with B.
func TestFleetRedisRestartMidRun(t *testing.T) {
	rs := redistest.New(t)
	logs := &lockedBuffer{}
	reader := sdkmetric.NewManualReader()
	a, gate := gatedEnv(t, withRedis(t, rs.Addr, logs), func(c *Config) {
		c.Telemetry.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	b := newTestEnv(t, withRedis(t, rs.Addr, nil))
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_SERVING)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	st, err := a.client.Stream(ctx, resumable(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	seen := recvUntilDelta(t, st)
	id := seen[0].GetStarted().GetCompletionId()

	rs.Stop()
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_NOT_SERVING)
	waitHealth(t, b.grpc, healthpb.HealthCheckResponse_NOT_SERVING)
	close(gate.open) // the completion goes on, and appends while Redis is down
	rest, sst := recvAll(st.Recv)
	all := append(seen, rest...)
	if r := checkContract(t, all, sst); r == nil || sst.Code() != codes.OK {
		t.Fatalf("the running completion: %v", sst)
	}
	if replay, ast := attachAll(ctx, a.client, id, 0); ast.Code() != codes.OK || !slices.Equal(testkit.Seqs(replay), testkit.Seqs(all)) {
		t.Fatalf("attach on A while Redis is down: %v, seqs %v, want %v", ast, testkit.Seqs(replay), testkit.Seqs(all))
	}
	if _, ast := attachAll(ctx, b.client, id, 0); ast.Code() != codes.Unavailable {
		t.Fatalf("attach on B while Redis is down: %v, want UNAVAILABLE", ast)
	}
	// A new completion while Redis is down runs, logged in memory.
	evs, nst := a.streamAll(t, prompt("while redis is down", nil))
	checkContract(t, evs, nst)
	if !strings.Contains(logs.String(), "memory only") || !strings.Contains(logs.String(), id) {
		t.Errorf("no log line says %s was kept in memory only:\n%s", id, logs)
	}
	dump := metricDump(t, reader)
	for _, want := range []string{`"Name":"completiond.redis.local_only"`, `"Name":"completiond.redis.degraded"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("metrics lack %s:\n%s", want, dump)
		}
	}
	if !strings.Contains(dump, `"Value":1`) {
		t.Errorf("no metric reads 1 while Redis is down:\n%s", dump)
	}

	rs.Restart()
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_SERVING)
	waitHealth(t, b.grpc, healthpb.HealthCheckResponse_SERVING)
	// A publishes what ended while Redis was away: B replays it whole.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		replay, ast := attachAll(ctx, b.client, id, 0)
		if ast.Code() == codes.OK && slices.Equal(testkit.Seqs(replay), testkit.Seqs(all)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attach on B to the completion that ended while Redis was down, once it is back: %v, seqs %v, want %v", ast, testkit.Seqs(replay), testkit.Seqs(all))
		}
	}
	evs, nst = a.streamAll(t, prompt("redis is back", nil))
	checkContract(t, evs, nst)
	nid := evs[0].GetStarted().GetCompletionId()
	replay, ast := attachAll(ctx, b.client, nid, 0)
	if ast.Code() != codes.OK || !slices.Equal(testkit.Seqs(replay), testkit.Seqs(evs)) {
		t.Fatalf("attach on B once Redis is back: %v, seqs %v, want %v", ast, testkit.Seqs(replay), testkit.Seqs(evs))
	}
}

// holdOpen is a Redis hook that holds every open.lua call (the one
// script that declares both the live set and a lease's token counter)
// until release is closed; opening is closed at the first one held.
type holdOpen struct {
	release, opening chan struct{}
	once             sync.Once
}

func (h *holdOpen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdOpen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		var live, token bool
		for _, a := range cmd.Args() {
			s, _ := a.(string)
			live = live || s == "completiond:logs:live"
			token = token || strings.HasPrefix(s, "completiond:lease:token:")
		}
		if live && token {
			h.once.Do(func() { close(h.opening) })
			select {
			case <-h.release:
			case <-time.After(10 * time.Second):
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdOpen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFleetStreamOpensItsLogBesideTheUpstreamCall: a resumable Stream of
// a fleet replica opens its Redis log, and takes its lease, with its
// started event on the goroutine that writes that event ahead: the
// upstream call starts while the open is in flight, and no event reaches
// the caller before the open is done. A resumable Session opens its log
// before the upstream call: the stream that starts it follows its log at
// once, and would take over a log whose lease nobody holds yet. Either
// way, the log another replica reads holds every event in order, the
// started one first.
func TestFleetStreamOpensItsLogBesideTheUpstreamCall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead bool // the upstream call starts before the open is done
		start func(context.Context, completionv1.CompletionClient) (func() (*completionv1.CompletionEvent, error), error)
	}{
		{"stream", true, func(ctx context.Context, c completionv1.CompletionClient) (func() (*completionv1.CompletionEvent, error), error) {
			st, err := c.Stream(ctx, resumable(time.Minute))
			if err != nil {
				return nil, err
			}
			return st.Recv, nil
		}},
		{"session", false, func(ctx context.Context, c completionv1.CompletionClient) (func() (*completionv1.CompletionEvent, error), error) {
			st, err := c.Session(ctx)
			if err != nil {
				return nil, err
			}
			start := &completionv1.SessionStart{Request: resumable(time.Minute)}
			return st.Recv, st.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := redistest.Start(t)
			hold := &holdOpen{release: make(chan struct{}), opening: make(chan struct{})}
			a := newTestEnv(t, func(c *Config) {
				withRedis(t, addr, nil)(c)
				c.Redis.AddHook(hold)
				c.Leases = fleet.NewRedisLeases(c.Redis, 2*time.Second) // in the log's Redis: one script opens both
			})
			b := newTestEnv(t, withRedis(t, addr, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			recv, err := tc.start(ctx, a.client)
			if err != nil {
				t.Fatal(err)
			}
			var received atomic.Int64
			done := make(chan []*completionv1.CompletionEvent, 1)
			var rst *status.Status
			go func() {
				evs, s := recvAll(func() (*completionv1.CompletionEvent, error) {
					ev, err := recv()
					if err == nil {
						received.Add(1)
					}
					return ev, err
				})
				rst = s
				done <- evs
			}()
			select {
			case <-hold.opening:
			case <-ctx.Done():
				t.Fatal("no open.lua call")
			}
			if tc.ahead {
				for a.upstream.calls.Load() == 0 {
					if ctx.Err() != nil {
						t.Fatal("the upstream call waited for the log's open")
					}
					time.Sleep(5 * time.Millisecond)
				}
			} else if time.Sleep(50 * time.Millisecond); a.upstream.calls.Load() != 0 {
				t.Error("the upstream call started before the log's open was done")
			}
			if n := received.Load(); n != 0 {
				t.Errorf("%d events received before the log's open was done", n)
			}
			close(hold.release)
			evs := <-done
			if rst.Code() != codes.OK || len(evs) < 3 || evs[0].GetStarted() == nil {
				t.Fatalf("%v, %d events; want OK, started first", rst, len(evs))
			}
			replay, ast := attachAll(ctx, b.client, evs[0].GetStarted().GetCompletionId(), 0)
			if ast.Code() != codes.OK || !slices.Equal(testkit.Seqs(replay), testkit.Seqs(evs)) {
				t.Fatalf("replay through B: %v, seqs %v, want %v", ast, testkit.Seqs(replay), testkit.Seqs(evs))
			}
		})
	}
}

// countReleases counts the calls of release.lua (EVALSHA or EVAL of one
// key, a completion's lease, and one argument, its value) a Redis client
// sends.
type countReleases struct{ n atomic.Int64 }

func (c *countReleases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *countReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(args) == 5 {
			if key, _ := args[3].(string); strings.HasPrefix(key, "completiond:lease:{") {
				c.n.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

func (c *countReleases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFleetEndGivesTheLeaseUpWithTheLog: the write that ends a resumable
// Stream's log gives its lease up in the same script: once the caller has
// the status, no lease is left, and the replica sent no release call of
// its own.
func TestFleetEndGivesTheLeaseUpWithTheLog(t *testing.T) {
	addr := redistest.Start(t)
	releases := &countReleases{}
	a := newTestEnv(t, func(c *Config) {
		withRedis(t, addr, nil)(c)
		c.Redis.AddHook(releases)
		c.Leases = fleet.NewRedisLeases(c.Redis, 2*time.Second)
	})
	for range 3 {
		evs, st := a.streamAll(t, resumable(time.Minute))
		if st.Code() != codes.OK || len(evs) < 3 || evs[0].GetStarted() == nil {
			t.Fatalf("%v, %d events; want OK, started first", st, len(evs))
		}
		id := evs[0].GetStarted().GetCompletionId()
		if n := testkit.ServerRedisClient(t, addr).Exists(t.Context(), fleet.LeaseKey(id)).Val(); n != 0 {
			t.Errorf("%s: the lease is still there after the completion's status", id)
		}
	}
	if n := releases.n.Load(); n != 0 {
		t.Errorf("%d release calls, want none: the end gave the lease up", n)
	}
}
