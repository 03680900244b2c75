package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// replica is one in-process replica of a fleet.
type replica struct {
	srv    *Server
	g      *GRPC
	client completionv1.CompletionClient
	kill   func()
}

// inProcessFleet starts n replicas sharing one event log and leases, as a
// fleet shares Redis: with redisAddr, each replica's own Redis event log
// (PairLog, as completiond --redis-url builds it); else one in-memory log.
func inProcessFleet(t *testing.T, n int, leases fleet.Leases, redisAddr string) []*replica {
	t.Helper()
	return inProcessFleetLimited(t, n, leases, redisAddr, config.EventLogLimits{})
}

// inProcessFleetLimited is inProcessFleet with the shared in-memory log's
// limits, and each replica's configuration changed by mutate.
func inProcessFleetLimited(t *testing.T, n int, leases fleet.Leases, redisAddr string, limits config.EventLogLimits, mutate ...func(*Config)) []*replica {
	t.Helper()
	log := fleet.NewMemLog(limits, time.Now)
	var rs []*replica
	for i := range n {
		cfg := DefaultConfig()
		cfg.Routes = config.SimRoutes(sim.New(sim.Config{}))
		cfg.Policy.Retry.BackoffBase, cfg.Policy.Retry.BackoffMax = time.Millisecond, 8*time.Millisecond
		cfg.Log, cfg.Leases, cfg.Replica = log, leases, string(rune('A'+i))
		if redisAddr != "" {
			cfg.Log = nil
			withRedis(t, redisAddr, nil)(&cfg)
		}
		for _, m := range mutate {
			m(&cfg)
		}
		srv, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGRPC(srv)
		conn := serveBufconn(t, g)
		r := &replica{srv: srv, g: g, client: completionv1.NewCompletionClient(conn)}
		r.kill = func() { // as SIGKILL would: nothing more written, no lease released, connections cut
			srv.halt()
			g.Server.Stop()
		}
		t.Cleanup(func() {
			conn.Close()
			g.Server.Stop()
			srv.Abort()
			srv.Close()
		})
		rs = append(rs, r)
	}
	return rs
}

// testLeases are leases of length ttl in memory, or in a redis-server of
// their own (inRedis), whose address is returned.
func testLeases(t *testing.T, inRedis bool, ttl time.Duration) (fleet.Leases, string) {
	t.Helper()
	if !inRedis {
		return fleet.NewMemLeases(ttl), ""
	}
	addr := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return fleet.NewRedisLeases(rdb, ttl), addr
}

// slowRequest is a Stream request on route with a resume grace whose sim
// answer streams words tokens at pace.
func slowRequest(route string, words int, pace time.Duration) *completionv1.CompleteRequest {
	req := prompt("Tell me about fleets.", map[string]string{"sim.words": strconv.Itoa(words), "sim.pace": pace.String()})
	req.Route = route
	req.ResumeGrace = durationpb.New(30 * time.Second)
	return req
}

// TestTakeoverInProcess: a client streams through replica A with a resume
// grace; A dies mid-stream (it writes nothing more and its lease lapses);
// the client attaches through B after the last seq it saw. It receives
// every seq exactly once, the takeover transition (REPLICA_LOST) is there,
// and the answer is whole: on a prefill route the kept text is continued
// (no token repeated: the deltas concatenate to the answer), on
// sim-noprefill the partial answer is discarded and restarted cleanly.
func TestTakeoverInProcess(t *testing.T) {
	const ttl = time.Second // long enough for a busy CI machine to renew in time
	for _, tc := range []struct {
		route, leases string
		reason        completionv1.TransitionReason
	}{
		{"sim", "memory", completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME},
		{"sim-noprefill", "memory", completionv1.TransitionReason_TRANSITION_REASON_RETRY},
		{"sim", "redis", completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME},
		{"sim", "redis-log", completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME},
		{"sim-noprefill", "redis-log", completionv1.TransitionReason_TRANSITION_REASON_RETRY},
	} {
		t.Run(tc.route+"/"+tc.leases, func(t *testing.T) {
			leases, addr := testLeases(t, tc.leases != "memory", ttl)
			if tc.leases != "redis-log" {
				addr = ""
			}
			fleet := inProcessFleet(t, 3, leases, addr)
			a, b, c := fleet[0], fleet[1], fleet[2]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req := slowRequest(tc.route, 40, 10*time.Millisecond)

			want := wholeAnswer(t, ctx, c.client, req)
			st, err := a.client.Stream(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var got []*completionv1.CompletionEvent
			for deltas := 0; deltas < 8; {
				ev, err := st.Recv()
				if err != nil {
					t.Fatalf("before the kill: %v", err)
				}
				got = append(got, ev)
				if ev.GetDelta() != nil {
					deltas++
				}
			}
			id := got[0].GetStarted().GetCompletionId()
			killed := time.Now()
			a.kill()

			at, err := b.client.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: got[len(got)-1].GetSeq()})
			if err != nil {
				t.Fatal(err)
			}
			var tookOver time.Duration
			rest, s := recvAll(func() (*completionv1.CompletionEvent, error) {
				ev, err := at.Recv()
				if tr := ev.GetTransition(); tr.GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST {
					tookOver = time.Since(killed)
					t.Logf("%s: %s", tr.GetReason(), tr.GetMessage())
					if tr.GetReason() != tc.reason {
						t.Errorf("takeover transition %s, want %s", tr.GetReason(), tc.reason)
					}
				}
				return ev, err
			})
			if s.Code() != codes.OK {
				t.Fatalf("attach through B: %v", s)
			}
			if tookOver == 0 {
				t.Fatalf("no REPLICA_LOST transition in %v", rest)
			}
			all := append(got, rest...)
			checkSeqs(t, all)
			res := all[len(all)-1].GetResult()
			if resultText(res) != want {
				t.Errorf("answer %q, want %q", resultText(res), want)
			}
			if kept := liveText(all); kept != want {
				t.Errorf("the deltas kept assemble %q, want %q", kept, want)
			}
			if tc.route == "sim" && deltaText(all) != want {
				t.Errorf("a token repeated: the deltas concatenate to %q", deltaText(all))
			}
			t.Logf("takeover of %s by B: the transition arrived %v after the kill (lease %s)", tc.route, tookOver.Round(time.Millisecond), ttl)
		})
	}
}

// wholeAnswer is the answer of req when nothing goes wrong.
func wholeAnswer(t *testing.T, ctx context.Context, client completionv1.CompletionClient, req *completionv1.CompleteRequest) string {
	t.Helper()
	r := &completionv1.CompleteRequest{}
	*r = completionv1.CompleteRequest{Messages: req.Messages, Route: req.Route, Metadata: map[string]string{"sim.words": req.Metadata["sim.words"]}}
	resp, err := client.Complete(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resultText(resp.GetResult())
}

// checkSeqs: seq 1, 2, 3 … each once, the result last.
func checkSeqs(t *testing.T, evs []*completionv1.CompletionEvent) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d: %v", i, ev.GetSeq(), evs)
		}
	}
	if evs[len(evs)-1].GetResult() == nil {
		t.Fatal("the last event is not the result")
	}
}

// liveText is what a live caller assembles: the text deltas of the
// attempts no transition discarded.
func liveText(evs []*completionv1.CompletionEvent) string {
	discarded := map[int32]bool{}
	for _, a := range discardedAttempts(evs) {
		discarded[a] = true
	}
	return keptText(evs, discarded)
}

// deltaText is every text delta, in order.
func deltaText(evs []*completionv1.CompletionEvent) string {
	var sb strings.Builder
	for _, ev := range evs {
		if d := ev.GetDelta(); d != nil && d.GetKind() == completionv1.DeltaKind_DELTA_KIND_TEXT {
			sb.WriteString(d.GetText())
		}
	}
	return sb.String()
}

// TestFoldLog: the rebuild of a log cut during attempt 2, which continued
// attempt 1 by prefill after a RETRY on the fallback route.
func TestFoldLog(t *testing.T) {
	n := uint64(0)
	ev := func(attempt int32, e *completionv1.CompletionEvent) *completionv1.CompletionEvent {
		n++
		e.Seq, e.Attempt, e.Turn = n, attempt, 1
		return e
	}
	delta := func(a int32, s string) *completionv1.CompletionEvent {
		return ev(a, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Kind: completionv1.DeltaKind_DELTA_KIND_TEXT, Text: s}}})
	}
	usage := func(a int32, out int64) *completionv1.CompletionEvent {
		return ev(a, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Usage{Usage: &completionv1.Usage{OutputTokens: out}}})
	}
	transition := func(a int32, tr *completionv1.Transition) *completionv1.CompletionEvent {
		return ev(a, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Transition{Transition: tr}})
	}
	evs := []*completionv1.CompletionEvent{
		ev(0, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{Route: "sim"}}}),
		delta(1, "Roses"), delta(1, " are"), usage(1, 2),
		transition(1, &completionv1.Transition{Reason: completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME, ToRoute: "sim-fallback", MaxTokens: 900}),
		delta(2, " red"),
	}
	routes := config.SimRoutes(sim.New(sim.Config{}))
	p, started := foldLog(evs, func(n string) *config.Route { return routes[n] }, 0)
	if started.GetRoute() != "sim" {
		t.Fatalf("started %v", started)
	}
	want := recovery.Prior{Attempt: 2, Turn: 1, Route: "sim-fallback", MaxTokens: 900,
		Kept: []recovery.Kept{{Attempt: 1, Text: "Roses are", OutputTokens: 2}}, InFlight: true, Streamed: " red",
		Attempts: []recovery.AttemptRecord{{Attempt: 1, Route: routes["sim"].Spec, Outcome: recovery.OutcomeFailed, Usage: recovery.Usage{OutputTokens: 2}}},
		Usage:    recovery.Usage{OutputTokens: 2}}
	if !priorEqual(p, want) {
		t.Fatalf("prior\n%+v\nwant\n%+v", p, want)
	}
	// A RETRY that voided attempt 2 settles it: nothing is in flight.
	evs = append(evs, usage(2, 1), transition(2, &completionv1.Transition{Reason: completionv1.TransitionReason_TRANSITION_REASON_RETRY, ToRoute: "sim-fallback", DiscardedAttempts: []int32{1, 2}}))
	p, _ = foldLog(evs, func(n string) *config.Route { return routes[n] }, 0)
	if p.InFlight || len(p.Kept) != 0 || p.Attempt != 2 || len(p.Attempts) != 2 || p.Usage.OutputTokens != 3 {
		t.Fatalf("after a clean restart: %+v", p)
	}
}

func priorEqual(a, b recovery.Prior) bool {
	return a.Attempt == b.Attempt && a.Turn == b.Turn && a.Route == b.Route && a.MaxTokens == b.MaxTokens &&
		slices.Equal(a.Kept, b.Kept) && a.InFlight == b.InFlight && a.Streamed == b.Streamed &&
		slices.Equal(a.Attempts, b.Attempts) && a.Usage == b.Usage
}

// BenchmarkFoldLog measures the rebuild of a takeover: the fold of a log of
// 1 000 deltas (the reading of the log is the store's).
func BenchmarkFoldLog(b *testing.B) {
	evs := []*completionv1.CompletionEvent{{Seq: 1, Turn: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{Route: "sim"}}}}
	for i := range 1000 {
		evs = append(evs, &completionv1.CompletionEvent{Seq: uint64(i + 2), Attempt: 1, Turn: 1,
			Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Kind: completionv1.DeltaKind_DELTA_KIND_TEXT, Text: " word"}}})
	}
	routes := config.SimRoutes(sim.New(sim.Config{}))
	b.ReportAllocs()
	for b.Loop() {
		foldLog(evs, func(n string) *config.Route { return routes[n] }, 0)
	}
}

// TestTakeoverOfATrimmedLog: the log keeps only the last 10 events of a
// completion (--event-log-events), so that its beginning is gone when its
// replica dies. The takeover cannot continue the partial answer even on a
// prefill route: it restarts cleanly (RETRY, every attempt discarded), and
// the attacher, which had the whole beginning, still ends with the whole
// answer and every seq once.
func TestTakeoverOfATrimmedLog(t *testing.T) {
	fleet := inProcessFleetLimited(t, 2, fleet.NewMemLeases(time.Second), "", config.EventLogLimits{MaxEvents: 10})
	a, b := fleet[0], fleet[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := slowRequest("sim", 60, 10*time.Millisecond)
	want := wholeAnswer(t, ctx, b.client, req)
	st, err := a.client.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := recvDeltas(t, st, 20)
	a.kill()
	rest, all := attachRest(t, ctx, b.client, got)
	takeover := replicaLost(rest)
	if takeover.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_RETRY || len(takeover.GetDiscardedAttempts()) == 0 {
		t.Fatalf("the takeover of a trimmed log: %v, want a RETRY that discards the partial answer", takeover)
	}
	if res := all[len(all)-1].GetResult(); resultText(res) != want {
		t.Errorf("answer %q, want %q", resultText(res), want)
	}
	if kept := liveText(all); kept != want {
		t.Errorf("the deltas kept assemble %q, want %q", kept, want)
	}
}

// TestTakeoverFailsTyped: a replica that finds a completion's replica dead
// but cannot continue it — its logged request does not decode, or is no
// longer valid here — ends the Attach FAILED_PRECONDITION with ErrorInfo
// TAKEOVER_FAILED at once, instead of leaving it to wait for an end that
// will not come; the lease it took is released.
func TestTakeoverFailsTyped(t *testing.T) {
	valid, err := proto.Marshal(&completionv1.CompleteRequest{}) // no messages: invalid
	if err != nil {
		t.Fatal(err)
	}
	for name, request := range map[string][]byte{"undecodable": {0xff, 0xff, 0xff}, "invalid": append(valid, 0x0a, 0x00)} {
		t.Run(name, func(t *testing.T) {
			leases := fleet.NewMemLeases(time.Second)
			b := inProcessFleet(t, 1, leases, "")[0]
			id := "cmpl_dead_" + name
			if err := b.srv.log.Open(id, fleet.Meta{Request: request, Replica: "A"}); err != nil {
				t.Fatal(err)
			}
			b.srv.log.Append(id, &completionv1.CompletionEvent{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: id, Route: "sim"}}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			evs, s := attachAll(ctx, b.client, id, 0)
			if s.Code() != codes.FailedPrecondition || len(evs) != 1 {
				t.Fatalf("attach: %v after %d events, want FAILED_PRECONDITION after the one logged", s, len(evs))
			}
			if info := errorInfo(s); info.GetReason() != reasonTakeoverFailed {
				t.Fatalf("ErrorInfo %v, want %s", info, reasonTakeoverFailed)
			}
			if len(s.Message()) > 512 {
				t.Errorf("status message of %d bytes", len(s.Message()))
			}
			if _, held, _ := leases.Holder(ctx, id); held {
				t.Error("the lease of a failed takeover is still held")
			}
		})
	}
}

// faultyLeases are leases whose Acquire of id's lease fails with
// acquireErr when set; they count the looks at id's lease.
type faultyLeases struct {
	fleet.Leases
	id         string
	acquireErr error
	looks      atomic.Int64
}

func (f *faultyLeases) Holder(ctx context.Context, id string) (fleet.Lease, bool, error) {
	if id == f.id {
		f.looks.Add(1)
	}
	return f.Leases.Holder(ctx, id)
}

func (f *faultyLeases) Acquire(ctx context.Context, id, replica string) (fleet.Lease, error) {
	if id == f.id && f.acquireErr != nil {
		return fleet.Lease{}, f.acquireErr
	}
	return f.Leases.Acquire(ctx, id, replica)
}

// faultyLog is a log whose Checkpoint of every completion fails with
// checkpointErr when set.
type faultyLog struct {
	fleet.Log
	checkpointErr error
}

func (f faultyLog) Checkpoint(id string) (uint64, []byte, error) {
	if f.checkpointErr != nil {
		return 0, nil, f.checkpointErr
	}
	return f.Log.Checkpoint(id)
}

// TestTakeoverFailuresCounted: a takeover that fails once the lease was
// found free is counted in completiond.takeovers.failed by its reason —
// the store did not answer the Acquire or the read of the log, the log was
// gone, the logged request cannot be continued here — and one that lost
// the lease to another replica is not counted at all. The follower goes
// on looking (at least twice) or, when it cannot continue, ends.
func TestTakeoverFailuresCounted(t *testing.T) {
	undecodable := []byte{0xff, 0xff, 0xff}
	for _, tc := range []struct {
		name          string
		acquireErr    error // of the completion's lease, which nobody holds when looked at
		checkpointErr error
		want          fleet.TakeoverFailure // "": none counted
		ends          codes.Code            // the Attach's end, when it ends by itself
	}{
		// Another replica won the lease between the look and the acquire.
		// (Not a lease held in the test's store: it would lapse after its
		// TTL, on a busy machine before B's acquire.)
		{name: "lease won by another replica", acquireErr: fmt.Errorf("acquire lease: %w", fleet.ErrLeaseHeld)},
		{name: "acquire unanswered", acquireErr: errors.New("acquire lease: dial tcp: connection refused"), want: fleet.TakeoverStoreUnavailable},
		{name: "log unreadable", checkpointErr: fmt.Errorf("%w: i/o timeout", fleet.ErrUnavailable), want: fleet.TakeoverStoreUnavailable},
		{name: "log gone", checkpointErr: fleet.ErrNotFound, want: fleet.TakeoverLogMissing},
		{name: "request undecodable", want: fleet.TakeoverCannotContinue, ends: codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "cmpl_dead"
			mem := fleet.NewMemLeases(200 * time.Millisecond)
			leases := &faultyLeases{Leases: mem, id: id, acquireErr: tc.acquireErr}
			log := faultyLog{Log: fleet.NewMemLog(config.EventLogLimits{}, time.Now), checkpointErr: tc.checkpointErr}
			reader := sdkmetric.NewManualReader()
			b := newTestEnv(t, withRedis(t, redistest.Start(t), nil), func(c *Config) {
				c.Redis = fleet.Instrument(c.Redis, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
				c.Log, c.Leases, c.Replica = log, leases, "B"
			})
			if err := log.Open(id, fleet.Meta{Request: undecodable, Replica: "A"}); err != nil {
				t.Fatal(err)
			}
			log.Append(id, &completionv1.CompletionEvent{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: id, Route: "sim"}}})

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ended := make(chan codes.Code, 1)
			go func() {
				_, st := attachAll(ctx, b.client, id, 0)
				ended <- st.Code()
			}()
			select { // the Attach ends, or looks at the lease a second time: the first takeover returned
			case code := <-ended:
				if code != tc.ends {
					t.Fatalf("the Attach ended %v, want %v", code, tc.ends)
				}
			case <-pollUntil(ctx, func() bool { return leases.looks.Load() >= 2 }):
				if tc.ends != codes.OK {
					t.Fatalf("the Attach looked at the lease again, want it to end %v", tc.ends)
				}
			}
			got := counterSeries(t, reader, "completiond.takeovers.failed")
			for _, reason := range []fleet.TakeoverFailure{fleet.TakeoverStoreUnavailable, fleet.TakeoverLogMissing, fleet.TakeoverCannotContinue} {
				n, ok := got["completiond.takeover.reason="+string(reason)]
				switch {
				case !ok:
					t.Errorf("no series for %s: %v", reason, got)
				case reason == tc.want && n < 1:
					t.Errorf("%s: %d, want at least 1", reason, n)
				case reason != tc.want && n != 0:
					t.Errorf("%s: %d, want 0", reason, n)
				}
			}
		})
	}
}

// pollUntil returns a channel closed once cond holds, polled until ctx is
// done.
func pollUntil(ctx context.Context, cond func() bool) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		for !cond() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		close(c)
	}()
	return c
}

// TestTakeoverFailure: which errors of a rebuild are failed takeovers, and
// their reasons.
func TestTakeoverFailure(t *testing.T) {
	for _, tc := range []struct {
		err    error
		want   fleet.TakeoverFailure
		failed bool
	}{
		{errNothingToTake, "", false}, // the log ended meanwhile
		{errLogGone, fleet.TakeoverLogMissing, true},
		{fmt.Errorf("read the log: %w", fmt.Errorf("%w: refused", fleet.ErrUnavailable)), fleet.TakeoverStoreUnavailable, true},
		{fmt.Errorf("decode the request: %w", errors.New("bad wire type")), fleet.TakeoverCannotContinue, true},
		{errors.New("the logged request is no longer valid here"), fleet.TakeoverCannotContinue, true},
	} {
		if got, failed := takeoverFailure(tc.err); got != tc.want || failed != tc.failed {
			t.Errorf("takeoverFailure(%v) = %q, %t; want %q, %t", tc.err, got, failed, tc.want, tc.failed)
		}
	}
}

// recvDeltas receives from st until n deltas have come, and returns every
// event received.
func recvDeltas(t *testing.T, st interface {
	Recv() (*completionv1.CompletionEvent, error)
}, n int) []*completionv1.CompletionEvent {
	t.Helper()
	var got []*completionv1.CompletionEvent
	for deltas := 0; deltas < n; {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d deltas: %v", deltas, err)
		}
		got = append(got, ev)
		if ev.GetDelta() != nil {
			deltas++
		}
	}
	return got
}

// attachRest attaches through client to the completion of got after its
// last seq and returns what followed, which must end OK, and all of it,
// whose seqs must be 1, 2, 3 … to the result.
func attachRest(t *testing.T, ctx context.Context, client completionv1.CompletionClient, got []*completionv1.CompletionEvent) (rest, all []*completionv1.CompletionEvent) {
	t.Helper()
	id := got[0].GetStarted().GetCompletionId()
	at, err := client.Attach(ctx, &completionv1.AttachRequest{CompletionId: id, AfterSeq: got[len(got)-1].GetSeq()})
	if err != nil {
		t.Fatal(err)
	}
	rest, s := recvAll(at.Recv)
	if s.Code() != codes.OK {
		t.Fatalf("attach: %v", s)
	}
	all = append(append([]*completionv1.CompletionEvent(nil), got...), rest...)
	checkSeqs(t, all)
	return rest, all
}

// replicaLost is the takeover transition (REPLICA_LOST) among evs, or nil.
func replicaLost(evs []*completionv1.CompletionEvent) *completionv1.Transition {
	for _, ev := range evs {
		if tr := ev.GetTransition(); tr.GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST {
			return tr
		}
	}
	return nil
}

// TestSessionTakeover: a resumable Session runs on replica A of a fleet;
// A dies (it writes nothing more and its lease lapses); the caller resumes
// through B after the last seq it saw. B waits for the lease to lapse,
// takes the Session over from its log and last checkpoint, and the caller
// goes on there: lost while it awaited the caller's tool results, the
// Session awaits them again (no transition: nothing was lost) and the
// answer sent to B starts the next turn; lost mid-way through the second
// turn, that turn goes on (REPLICA_LOST, STREAM_RESUME on the prefill
// route) with the conversation of the first — tool call and result — and
// the Session ends OK with every seq once and the contract whole.
func TestSessionTakeover(t *testing.T) {
	const ttl = time.Second
	for _, tc := range []struct {
		name, log string
		midTurn   bool // A dies during the second turn, not while the tools run
	}{
		{"awaiting tools", "memory", false},
		{"awaiting tools", "redis-log", false},
		{"mid second turn", "memory", true},
		{"mid second turn", "redis-log", true},
	} {
		t.Run(tc.name+"/"+tc.log, func(t *testing.T) {
			leases, addr := testLeases(t, tc.log != "memory", ttl)
			fleet := inProcessFleet(t, 2, leases, addr)
			a, b := fleet[0], fleet[1]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := resumableStart("tool_use", 30*time.Second)
			start.Request.Metadata[sim.MetaWords], start.Request.Metadata[sim.MetaPace] = "40", "10ms"
			onA := openSession(t, ctx, a.client, startMsg(start))
			call := onA.toolCall()
			if tc.midTurn {
				onA.answer(call.GetId(), "42", false)
				onA.until(func(ev *completionv1.CompletionEvent) bool { return ev.GetTurn() == 2 && ev.GetDelta() != nil })
				onA.until(func(ev *completionv1.CompletionEvent) bool { return ev.GetTurn() == 2 && ev.GetDelta() != nil })
			}
			a.kill()
			id, seq := last(onA.events)
			onB := openSession(t, ctx, b.client, resumeMsg(id, seq))
			if !tc.midTurn {
				onB.answer(call.GetId(), "42", false)
			}
			res, st := finish(t, onA.events, onB)
			if st.Code() != codes.OK || res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN {
				t.Fatalf("ended %v %v", st, res.GetStopReason())
			}
			lost := replicaLost(onB.events)
			switch {
			case tc.midTurn && lost.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME:
				t.Errorf("taken over mid-turn with %v, want STREAM_RESUME with REPLICA_LOST", lost)
			case !tc.midTurn && lost != nil:
				t.Errorf("taken over while the tools ran, the Session decided %v: nothing was lost", lost)
			}
			if n := len(res.GetTranscript()); n < 4 || !transcriptHasResult(res, call.GetId()) {
				t.Errorf("the transcript lost the first turn's tool call or result: %d messages", n)
			}
		})
	}
}

// transcriptHasResult reports whether the result's transcript holds the
// tool result of call id.
func transcriptHasResult(res *completionv1.Result, id string) bool {
	for _, m := range res.GetTranscript() {
		for _, b := range m.GetContent() {
			if b.GetToolResult().GetToolUseId() == id {
				return true
			}
		}
	}
	return false
}

// TestSessionTakeoverAwaitingTheStopHook: a Session with a stop hook and
// settled delivery is lost while its hook judges the answer, which no
// caller has seen (settled delivery holds it until the verdict). B takes
// it over with that held output from the checkpoint, asks the hook again
// under a new id (a verdict resent for the old one is dropped), and on
// ALLOW delivers the answer: the deltas the caller receives assemble the
// result's text.
func TestSessionTakeoverAwaitingTheStopHook(t *testing.T) {
	fleet := inProcessFleet(t, 2, fleet.NewMemLeases(time.Second), "")
	a, b := fleet[0], fleet[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := resumableStart("", 30*time.Second, func(st *completionv1.SessionStart) {
		st.StopHook = true
		st.Request.Delivery = completionv1.DeliveryMode_DELIVERY_MODE_SETTLED
	})
	onA := openSession(t, ctx, a.client, startMsg(start))
	first := onA.hookRequest()
	for _, ev := range onA.events {
		if ev.GetDelta() != nil {
			t.Fatalf("settled delivery sent a delta before the verdict: %v", ev)
		}
	}
	a.kill()
	id, seq := last(onA.events)
	onB := openSession(t, ctx, b.client, resumeMsg(id, seq))
	onB.verdict(first.GetHookId(), completionv1.Verdict_VERDICT_ALLOW, "") // resent: dropped
	again := onB.hookRequest()
	if again == nil || again.GetHookId() == first.GetHookId() || again.GetAnswer().String() != first.GetAnswer().String() {
		t.Fatalf("asked again %v, want the same answer under a new id than %v", again, first)
	}
	onB.verdict(again.GetHookId(), completionv1.Verdict_VERDICT_ALLOW, "")
	res, st := finish(t, onA.events, onB)
	if st.Code() != codes.OK || res.GetMessage().String() == "" {
		t.Fatalf("ended %v with %v", st, res)
	}
}

// dyingAtEnd is the log of a replica that dies as it ends a completion:
// its End writes nothing, kills the replica (die) and blocks until the
// test ends, as a process killed then would.
type dyingAtEnd struct {
	fleet.Log
	die  func()
	dead chan struct{}
	once sync.Once
}

func (d *dyingAtEnd) End(string, []*completionv1.CompletionEvent, *completionv1.CompletionEvent, []byte) error {
	d.once.Do(func() { go d.die() })
	<-d.dead
	return fleet.ErrFenced
}

// TestTakeoverOfACompletionThatDiedAtItsEnd: replica A dies as it ends a
// completion, at the log write of its result. The finishing step's
// events (its terminal transition; in settled delivery, the answer) go to
// the log with the result, in one write: none of them is in the log or
// reached the caller, so B takes the completion over from where the log
// stands and finishes it once. The caller, attached through B, gets every
// seq once, exactly one terminal transition, and an answer whose deltas
// concatenate to the result. (With the terminal transition written
// apart, B found a log that looked live and ran the finished completion
// again: a second terminal transition, and the answer twice.)
//
// The log says the last attempt streamed its whole answer, not that the
// machine had finished with it: B takes it over as an attempt lost
// mid-stream, whose text a prefill route continues (live delivery; the
// sim extends an answer it already gave in full, as a budget continuation
// does) and whose held output settled delivery never logged (it runs
// again: the answer is exactly the one the caller would have had).
func TestTakeoverOfACompletionThatDiedAtItsEnd(t *testing.T) {
	for _, delivery := range []completionv1.DeliveryMode{completionv1.DeliveryMode_DELIVERY_MODE_LIVE, completionv1.DeliveryMode_DELIVERY_MODE_SETTLED} {
		t.Run(delivery.String(), func(t *testing.T) {
			dying := &dyingAtEnd{dead: make(chan struct{})}
			fleet := inProcessFleetLimited(t, 2, fleet.NewMemLeases(time.Second), "", config.EventLogLimits{}, func(cfg *Config) {
				if cfg.Replica == "A" {
					dying.Log = cfg.Log
					cfg.Log = dying
				}
			})
			t.Cleanup(func() { close(dying.dead) }) // before the fleet's cleanup: A's driver returns
			a, b := fleet[0], fleet[1]
			dying.die = a.kill
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req := slowRequest("sim", 12, time.Millisecond)
			req.Delivery = delivery
			want := wholeAnswer(t, ctx, b.client, req)
			st, err := a.client.Stream(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			got, s := recvAll(st.Recv)
			if s.Code() == codes.OK || len(got) == 0 {
				t.Fatalf("the stream through A ended %v after %d events, want it cut after its first", s, len(got))
			}
			for _, ev := range got {
				if ev.GetTransition().GetTerminal() || ev.GetResult() != nil {
					t.Fatalf("the caller got %v from a replica whose log has not ended", ev)
				}
			}
			_, all := attachRest(t, ctx, b.client, got)
			if n := terminals(all); n != 1 {
				t.Fatalf("%d terminal transitions, want 1: %v", n, all)
			}
			if replicaLost(all) == nil {
				t.Fatal("no REPLICA_LOST transition: B did not take the completion over")
			}
			res := resultText(all[len(all)-1].GetResult())
			switch {
			case delivery == completionv1.DeliveryMode_DELIVERY_MODE_SETTLED && res != want:
				t.Errorf("answer %q, want %q", res, want)
			case !strings.HasPrefix(res, want):
				t.Errorf("answer %q, want it to continue %q", res, want)
			}
			if kept := liveText(all); kept != res {
				t.Errorf("the deltas kept assemble %q, want the result's %q", kept, res)
			}
			if delivery == completionv1.DeliveryMode_DELIVERY_MODE_LIVE && deltaText(all) != res {
				t.Errorf("a token repeated: the deltas concatenate to %q", deltaText(all))
			}
		})
	}
}

// terminals counts the terminal transitions of evs.
func terminals(evs []*completionv1.CompletionEvent) int {
	n := 0
	for _, ev := range evs {
		if isTerminal(ev) {
			n++
		}
	}
	return n
}

// TestTakeoverRefusesAFinishedCompletion: a log that holds a terminal
// transition but not the result (an older replica wrote them apart, and
// died between) is of a completion that finished: no replica runs it
// again. The attacher gets what the log holds, then FAILED_PRECONDITION
// TAKEOVER_FAILED, and the lease taken for it is released.
func TestTakeoverRefusesAFinishedCompletion(t *testing.T) {
	leases := fleet.NewMemLeases(time.Second)
	b := inProcessFleet(t, 1, leases, "")[0]
	req, err := proto.Marshal(slowRequest("sim", 4, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const id = "cmpl_finished"
	if err := b.srv.log.Open(id, fleet.Meta{Request: req, Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []*completionv1.CompletionEvent{
		{Seq: 1, Turn: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: id, Route: "sim"}}},
		{Seq: 2, Attempt: 1, Turn: 1, Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Kind: completionv1.DeltaKind_DELTA_KIND_TEXT, Text: "Done."}}},
		{Seq: 3, Attempt: 1, Turn: 1, Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{
			Reason: completionv1.TransitionReason_TRANSITION_REASON_COMPLETED, Terminal: true}}},
	} {
		if err := b.srv.log.Append(id, ev); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, s := attachAll(ctx, b.client, id, 0)
	if s.Code() != codes.FailedPrecondition || len(evs) != 3 || terminals(evs) != 1 {
		t.Fatalf("attach: %v after %d events (%d terminal), want FAILED_PRECONDITION after the 3 logged", s, len(evs), terminals(evs))
	}
	if info := errorInfo(s); info.GetReason() != reasonTakeoverFailed || !strings.Contains(s.Message(), "lost its result") {
		t.Fatalf("status %v, ErrorInfo %v: want %s saying the result was lost", s.Message(), info, reasonTakeoverFailed)
	}
	if _, held, _ := leases.Holder(ctx, id); held {
		t.Error("the lease of a refused takeover is still held")
	}
}

// TestTakeoverNotByTheProcessThatRunsIt: the lease of a completion A runs
// lapses while A runs it still (A was paused, or the store away). A
// follower on A does not take it over beside A's own run, which would
// make two writers of one log: A's run finds the lease lost and stops,
// and then the follower takes the completion over. Its caller gets every
// seq once and the whole answer.
func TestTakeoverNotByTheProcessThatRunsIt(t *testing.T) {
	leases := fleet.NewMemLeases(time.Second)
	a := inProcessFleet(t, 1, leases, "")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := slowRequest("sim", 60, 20*time.Millisecond)
	want := wholeAnswer(t, ctx, a.client, req)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	st, err := a.client.Stream(sctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := recvDeltas(t, st, 5)
	id := got[0].GetStarted().GetCompletionId()
	l, held, err := leases.Holder(ctx, id)
	if err != nil || !held {
		t.Fatalf("the lease of %s: held %t, %v", id, held, err)
	}
	if err := leases.Release(ctx, l); err != nil { // lapsed, as if A had been paused past it
		t.Fatal(err)
	}
	_, all := attachRest(t, ctx, a.client, got)
	if res := resultText(all[len(all)-1].GetResult()); res != want {
		t.Errorf("answer %q, want %q", res, want)
	}
	if n := terminals(all); n != 1 {
		t.Errorf("%d terminal transitions, want 1", n)
	}
}
