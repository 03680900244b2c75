package service

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider/sim"
)

// keyed is prompt's request with idempotency key key.
func keyed(key, text string) *completionv1.CompleteRequest {
	req := prompt(text, nil)
	req.IdempotencyKey = key
	return req
}

// sameEvents fails t unless a and b are the same events, from seq 1.
func sameEvents(t *testing.T, what string, a, b []*completionv1.CompletionEvent) {
	t.Helper()
	if len(a) == 0 || a[0].GetSeq() != 1 || a[0].GetStarted() == nil {
		t.Fatalf("%s: the first stream does not begin with started, seq 1", what)
	}
	if len(a) != len(b) {
		t.Fatalf("%s: %d events and %d", what, len(a), len(b))
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			t.Fatalf("%s: event %d differs:\n%v\n%v", what, i, a[i], b[i])
		}
	}
}

// TestIdempotentStartAttaches: a start with the key of a running
// completion and an identical request attaches to it: the same id, every
// event from seq 1, one upstream call; Complete, after the end, answers
// its result; the same key with another request is ALREADY_EXISTS.
func TestIdempotentStartAttaches(t *testing.T) {
	testkit.NoLeaks(t)
	e, gate := gatedEnv(t)
	ctx := t.Context()
	first, err := e.client.Stream(ctx, keyed("k-1", "Tell me."))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntilDelta(t, first) // running, upstream held
	second, err := e.client.Stream(ctx, keyed("k-1", "Tell me."))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := second.Recv() // replayed from the log while the first still runs
	if err != nil || ev.GetSeq() != 1 || ev.GetStarted().GetCompletionId() != head[0].GetStarted().GetCompletionId() {
		t.Fatalf("second start began with %v, %v; want started of the first's id, seq 1", ev, err)
	}
	close(gate.open)
	rest, st := recvAll(first.Recv)
	if st.Code() != codes.OK {
		t.Fatalf("first: %v", st)
	}
	all := append(head, rest...)
	seen, st2 := recvAll(second.Recv)
	if st2.Code() != codes.OK {
		t.Fatalf("second: %v", st2)
	}
	sameEvents(t, "stream", all, append([]*completionv1.CompletionEvent{ev}, seen...))

	resp, err := e.client.Complete(ctx, keyed("k-1", "Tell me."))
	if err != nil {
		t.Fatal(err)
	}
	result := all[len(all)-1].GetResult()
	if resp.GetCompletionId() != ev.GetStarted().GetCompletionId() || !proto.Equal(resp.GetResult(), result) || len(resp.GetTransitions()) == 0 {
		t.Errorf("Complete answered %v, want the first's id and result", resp)
	}
	if n := e.upstream.calls.Load(); n != 1 {
		t.Errorf("upstream saw %d calls, want 1", n)
	}

	for name, start := range map[string]func() error{
		"Stream": func() error {
			st, err := e.client.Stream(ctx, keyed("k-1", "Something else."))
			if err != nil {
				return err
			}
			_, s := recvAll(st.Recv)
			return s.Err()
		},
		"Complete": func() error {
			_, err := e.client.Complete(ctx, keyed("k-1", "Something else."))
			return err
		},
	} {
		st := status.Convert(start())
		if st.Code() != codes.AlreadyExists || errorInfo(st).GetReason() != reasonIdempotencyKeyReused || strings.Contains(st.Message(), "k-1") {
			t.Errorf("%s with the key of another request: %v, want ALREADY_EXISTS %s without the key", name, st, reasonIdempotencyKeyReused)
		}
	}
	if n := e.upstream.calls.Load(); n != 1 {
		t.Errorf("upstream saw %d calls, want 1", n)
	}
}

// TestIdempotencyKeyScopedToCaller: two API keys using one idempotency
// key start a completion each.
func TestIdempotencyKeyScopedToCaller(t *testing.T) {
	e, _ := authEnv(t)
	ids := map[string]bool{}
	for _, key := range []string{"ops-secret-key", "narrow-secret-key"} {
		resp, err := e.client.Complete(bearer(t.Context(), "Bearer "+key), keyed("shared", "hi"))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		ids[resp.GetCompletionId()] = true
	}
	if len(ids) != 2 || e.upstream.calls.Load() != 2 {
		t.Errorf("ids %v, upstream calls %d: want two completions", ids, e.upstream.calls.Load())
	}
}

// TestIdempotencyKeyRefused: a key too long or not printable ASCII is
// INVALID_ARGUMENT on idempotency_key, in a small status that does not
// echo it; no upstream call is made.
func TestIdempotencyKeyRefused(t *testing.T) {
	e := newTestEnv(t)
	for _, tc := range []struct {
		name, key string
	}{
		{"1 MB", strings.Repeat("k", 1<<20)},
		{"129 bytes", strings.Repeat("k", 129)},
		{"control byte", "key\x00secret"},
		{"newline", "key\nsecret"},
		{"not ASCII", "clé-secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.Complete(t.Context(), keyed(tc.key, "hi"))
			st := status.Convert(err)
			b, _ := proto.Marshal(st.Proto())
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "idempotency_key") || len(b) > 1024 || strings.Contains(string(b), "secret") || strings.Contains(string(b), "kkkkkkkk") {
				t.Errorf("got %v (%d bytes), want a small INVALID_ARGUMENT on idempotency_key without the key", st, len(b))
			}
		})
	}
	if e.upstream.calls.Load() != 0 {
		t.Errorf("upstream called %d times", e.upstream.calls.Load())
	}
	if _, err := e.client.Complete(t.Context(), keyed(strings.Repeat("~", 128), "hi")); err != nil {
		t.Errorf("a key of 128 printable bytes: %v", err)
	}
}

// TestIdempotencyKeyFreeAfterRetention: once the completion's log has
// expired, its key starts a new completion, with another request too.
func TestIdempotencyKeyFreeAfterRetention(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	e := newTestEnv(t, func(c *Config) { c.Now = clock })
	first, err := e.client.Complete(t.Context(), keyed("k", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(e.grpc.Completion.cfg.EventLog.Retention + time.Second)
	mu.Unlock()
	e.grpc.Completion.log.Expire(clock())
	second, err := e.client.Complete(t.Context(), keyed("k", "something else"))
	if err != nil {
		t.Fatalf("the key after its log expired: %v", err)
	}
	if second.GetCompletionId() == first.GetCompletionId() || e.upstream.calls.Load() != 2 {
		t.Errorf("ids %s, %s, upstream calls %d: want a new completion", first.GetCompletionId(), second.GetCompletionId(), e.upstream.calls.Load())
	}
}

// raceStarts starts two identical Streams with key at once, through a
// and b, and checks they got one completion: the same events.
func raceStarts(t *testing.T, a, b completionv1.CompletionClient, key string) {
	t.Helper()
	var got [2][]*completionv1.CompletionEvent
	var sts [2]*status.Status
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for i, c := range []completionv1.CompletionClient{a, b} {
		wg.Go(func() {
			<-ready
			st, err := c.Stream(context.Background(), keyed(key, "Tell me."))
			if err != nil {
				sts[i] = status.Convert(err)
				return
			}
			got[i], sts[i] = recvAll(st.Recv)
		})
	}
	close(ready)
	wg.Wait()
	for i, st := range sts {
		if st.Code() != codes.OK {
			t.Fatalf("%s: start %d: %v", key, i, st)
		}
	}
	sameEvents(t, key, got[0], got[1])
}

// TestIdempotentStartRace: two identical starts at once, 20 times: one
// upstream completion each time.
func TestIdempotentStartRace(t *testing.T) {
	testkit.NoLeaks(t)
	e := newTestEnv(t)
	for i := range 20 {
		raceStarts(t, e.client, e.client, "race-"+string(rune('a'+i)))
		if n := e.upstream.calls.Load(); n != int64(i+1) {
			t.Fatalf("round %d: upstream calls %d, want %d", i, n, i+1)
		}
	}
}

// TestFleetIdempotentStart: the same idempotency key through replicas A
// and B sharing a Redis, at once or one after the other, is one upstream
// call; B's caller gets A's completion through the shared log.
func TestFleetIdempotentStart(t *testing.T) {
	testkit.NoLeaks(t)
	up := &countingProvider{Provider: sim.New(sim.Config{Words: 12})}
	addr := redistest.Start(t)
	replicas := fleetEnvs(t, addr, 2, up, nil)
	a, b := replicas[0].client, replicas[1].client
	for i := range 20 {
		raceStarts(t, a, b, "fleet-race-"+string(rune('a'+i)))
		if n := up.calls.Load(); n != int64(i+1) {
			t.Fatalf("round %d: upstream calls %d, want %d", i, n, i+1)
		}
	}
	first, err := a.Complete(t.Context(), keyed("fleet-seq", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.Complete(t.Context(), keyed("fleet-seq", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if first.GetCompletionId() != second.GetCompletionId() || !proto.Equal(first.GetResult(), second.GetResult()) || up.calls.Load() != 21 {
		t.Errorf("B answered %s, A %s, upstream calls %d: want A's completion", second.GetCompletionId(), first.GetCompletionId(), up.calls.Load())
	}
	if _, err := b.Complete(t.Context(), keyed("fleet-seq", "other")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("B with A's key and another request: %v, want ALREADY_EXISTS", err)
	}
	// The records' names are digests: no idempotency key is readable there.
	keys, err := testkit.RedisClient(t, addr).Keys(t.Context(), "completiond:idem:*").Result()
	if err != nil || len(keys) != 21 {
		t.Fatalf("idempotency records %d, %v; want 21", len(keys), err)
	}
	for _, k := range keys {
		if strings.Contains(k, "fleet") {
			t.Errorf("record %s names its key", k)
		}
	}
}

// TestFleetIdempotencyKeyClaimedInAnOutage: while Redis does not answer,
// a start through A claims its key in A's memory; once Redis answers
// again (restarted empty), A shares the record beside the completion's
// log, and the start retried through B attaches to A's completion: one
// upstream call.
func TestFleetIdempotencyKeyClaimedInAnOutage(t *testing.T) {
	testkit.NoLeaksAfterOutage(t)
	up := &countingProvider{Provider: sim.New(sim.Config{Words: 12})}
	rs := redistest.New(t)
	replicas := fleetEnvs(t, rs.Addr, 2, up, func(c *Config) { c.RedisPing = 50 * time.Millisecond })
	a, b := replicas[0], replicas[1]
	rs.Stop()
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_NOT_SERVING)
	first, err := a.client.Complete(t.Context(), keyed("outage", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	rs.Restart()
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_SERVING)
	waitHealth(t, b.grpc, healthpb.HealthCheckResponse_SERVING)
	waitRedisKeys(t, rs.Addr, "completiond:idem:*", "the record claimed in A's memory, once Redis answered again")
	rdb := testkit.RedisClient(t, rs.Addr)
	if rec := rdb.Get(t.Context(), rdb.Keys(t.Context(), "completiond:idem:*").Val()[0]).Val(); !strings.HasPrefix(rec, "o "+first.GetCompletionId()+" ") {
		t.Fatalf("the record shared: %q, want A's completion %s, opened", rec, first.GetCompletionId())
	}
	second, err := b.client.Complete(t.Context(), keyed("outage", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if second.GetCompletionId() != first.GetCompletionId() || up.calls.Load() != 1 {
		t.Errorf("B answered %s, A %s, upstream calls %d: want A's completion, one call", second.GetCompletionId(), first.GetCompletionId(), up.calls.Load())
	}
}

// TestFleetIdempotencyKeyClaimedInAnOutageFreedWhenTheCallerLeaves: a key
// A claimed in its memory while Redis did not answer, shared once Redis
// answered again, is freed in Redis too when the caller leaves the
// completion (no resume grace): the retry through B starts afresh rather
// than attaching to the aborted completion.
func TestFleetIdempotencyKeyClaimedInAnOutageFreedWhenTheCallerLeaves(t *testing.T) {
	testkit.NoLeaksAfterOutage(t)
	gate := &gatedProvider{Provider: sim.New(sim.Config{Words: 12}), after: 3, open: make(chan struct{}), cancelled: make(chan struct{})}
	up := &countingProvider{Provider: gate}
	rs := redistest.New(t)
	replicas := fleetEnvs(t, rs.Addr, 2, up, func(c *Config) {
		c.RedisPing = 50 * time.Millisecond
		for _, r := range c.Routes {
			r.Timeouts.Idle = time.Minute
		}
	})
	a, b := replicas[0], replicas[1]
	rs.Stop()
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_NOT_SERVING)
	ctx, cancel := context.WithCancel(t.Context())
	st, err := a.client.Stream(ctx, keyed("leaving", "Tell me."))
	if err != nil {
		t.Fatal(err)
	}
	first := recvUntilDelta(t, st)[0].GetStarted().GetCompletionId()
	rs.Restart()
	waitHealth(t, a.grpc, healthpb.HealthCheckResponse_SERVING)
	waitRedisKeys(t, rs.Addr, "completiond:idem:*", "the record claimed in A's memory, once Redis answered again")
	cancel()
	<-gate.cancelled
	<-a.grpc.Completion.running.drain() // the completion's release, which frees the key, has run
	close(gate.open)
	second, err := b.client.Complete(t.Context(), keyed("leaving", "Tell me."))
	if err != nil {
		t.Fatalf("the retry through B: %v", err)
	}
	if second.GetCompletionId() == first || up.calls.Load() != 2 {
		t.Errorf("the retry through B answered %s (A's aborted one: %s), upstream calls %d: want a fresh start, 2 calls",
			second.GetCompletionId(), first, up.calls.Load())
	}
}

// failIdemOnce fails the first script call on an idempotency record
// (completiond:idem:*) as a timeout would: one slow answer, while the
// health check's PINGs pass.
type failIdemOnce struct{ done atomic.Bool }

func (h *failIdemOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failIdemOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *failIdemOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "completiond:idem:") && h.done.CompareAndSwap(false, true) {
				cmd.SetErr(context.DeadlineExceeded)
				return context.DeadlineExceeded
			}
		}
		return next(ctx, cmd)
	}
}

// TestFleetIdempotencyKeyClaimedInMemoryWhileRedisAnswers: a claim that
// fell back to A's memory because one call to Redis failed, while the
// health check's PINGs pass, is shared all the same (the failure marks
// Redis down until a PING finds it up, which shares it): a retry through
// B attaches to A's completion, one upstream call.
func TestFleetIdempotencyKeyClaimedInMemoryWhileRedisAnswers(t *testing.T) {
	testkit.NoLeaks(t)
	up := &countingProvider{Provider: sim.New(sim.Config{Words: 12})}
	rs := redistest.New(t)
	hook := &failIdemOnce{}
	var envs []*testEnv
	for i := range 2 {
		rdb := testkit.RedisClient(t, rs.Addr)
		if i == 0 {
			rdb.AddHook(hook)
		}
		envs = append(envs, newTestEnv(t, func(c *Config) {
			c.Redis = rdb
			c.RedisPing = 50 * time.Millisecond
			for _, r := range c.Routes {
				r.Upstream = up
			}
		}))
	}
	a, b := envs[0], envs[1]
	first, err := a.client.Complete(t.Context(), keyed("k", "hi"))
	if err != nil || !hook.done.Load() {
		t.Fatal(err, hook.done.Load())
	}
	waitRedisKeys(t, rs.Addr, "completiond:idem:*", "the record claimed in A's memory")
	second, err := b.client.Complete(t.Context(), keyed("k", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if second.GetCompletionId() != first.GetCompletionId() || up.calls.Load() != 1 {
		t.Errorf("B answered %s, A %s, upstream calls %d: want A's completion, one call",
			second.GetCompletionId(), first.GetCompletionId(), up.calls.Load())
	}
}

// TestIdempotencyKeyFreedWhenTheCallerLeaves: a completion without a
// resume grace that its caller's leaving cancelled frees its key, so
// that the caller's retry starts afresh.
func TestIdempotencyKeyFreedWhenTheCallerLeaves(t *testing.T) {
	testkit.NoLeaks(t)
	e, gate := gatedEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	st, err := e.client.Stream(ctx, keyed("leaving", "Tell me."))
	if err != nil {
		t.Fatal(err)
	}
	recvUntilDelta(t, st)
	cancel()
	<-gate.cancelled
	// Once none runs, the completion's release, which frees the key, has run.
	<-e.grpc.Completion.running.drain()
	s := e.grpc.Completion
	probe := fleet.IdemRecord{ID: "cmpl_probe", Digest: "d"}
	key := idemKey(context.Background(), "leaving")
	if got, err := s.idem.Swap(context.Background(), key, fleet.IdemRecord{}, probe, time.Minute); err != nil || got != probe {
		t.Errorf("the key is still held by %+v (%v)", got, err)
	}
}

// sessionAll runs a Session of start to its end, sending nothing more.
func sessionAll(t *testing.T, client completionv1.CompletionClient, start *completionv1.SessionStart) ([]*completionv1.CompletionEvent, *status.Status) {
	t.Helper()
	st, err := client.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}})
	return recvAll(st.Recv)
}

// TestIdempotentSessionStart: a Session start with the key of an
// identical one replays it from seq 1 — resumed when it has a resume
// grace, followed otherwise — without an upstream call; one with another
// SessionStart (max_turns) is ALREADY_EXISTS.
func TestIdempotentSessionStart(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Minute} {
		t.Run(grace.String(), func(t *testing.T) {
			e := newTestEnv(t)
			req := keyed("s-1", "hi")
			if grace > 0 {
				req.ResumeGrace = durationpb.New(grace)
			}
			first, st := sessionAll(t, e.client, &completionv1.SessionStart{Request: req})
			if st.Code() != codes.OK {
				t.Fatalf("first: %v", st)
			}
			again, st := sessionAll(t, e.client, &completionv1.SessionStart{Request: proto.CloneOf(req)})
			if st.Code() != codes.OK {
				t.Fatalf("again: %v", st)
			}
			sameEvents(t, "session", first, again)
			if n := e.upstream.calls.Load(); n != 1 {
				t.Errorf("upstream saw %d calls, want 1", n)
			}
			_, st = sessionAll(t, e.client, &completionv1.SessionStart{Request: proto.CloneOf(req), MaxTurns: 3})
			if st.Code() != codes.AlreadyExists || errorInfo(st).GetReason() != reasonIdempotencyKeyReused {
				t.Errorf("another SessionStart with the key: %v, want ALREADY_EXISTS", st)
			}
		})
	}
}
