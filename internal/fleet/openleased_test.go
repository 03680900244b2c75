package fleet

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// TestOpenLeasedInOneRoundTrip: a new resumable completion's log and lease
// cost one script call where they share a Redis; the lease is the one
// Holder reads, and the log holds the request a takeover runs again.
// Where the lease is held, the log is opened without the request.
func TestOpenLeasedInOneRoundTrip(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	f := newPair(t, rdb)
	leases := NewRedisLeases(rdb, 2*time.Second)
	open := func(id string) (*Lease, error, error) {
		return OpenLeased(t.Context(), f, leases, id, "A", Meta{Replica: "A", Request: []byte("request")})
	}
	if _, _, err := open("warm"); err != nil { // loads the script: a first NOSCRIPT is not counted
		t.Fatal(err)
	}
	f.watch.Close() // no PING among the commands counted (the warm-up's NOSCRIPT kicked one)
	count := &testkit.CommandCounter{}
	rdb.AddHook(count)
	l, leaseErr, err := open("c1")
	if err != nil || leaseErr != nil || l == nil {
		t.Fatalf("OpenLeased: lease %v, lease error %v, error %v", l, leaseErr, err)
	}
	if n := count.Count(); n != 1 {
		t.Errorf("%d Redis commands to open a leased log, want 1", n)
	}
	held, ok, err := leases.Holder(t.Context(), "c1")
	if err != nil || !ok || held != *l {
		t.Errorf("Holder: %+v %t %v, want %+v", held, ok, err, *l)
	}
	if err := leases.Renew(t.Context(), *l); err != nil {
		t.Errorf("the lease does not renew as any other: %v", err)
	}
	// The request joins the shared log with the first write fenced by the
	// lease: only a writer that learnt its token makes the completion one
	// another replica may take over.
	request := func(id string) string { return redisRequest(t, f, id) }
	if got := request("c1"); got != "" {
		t.Errorf("Redis log's request %q before the lease holder wrote, want none", got)
	}
	f.Fence("c1", *l)
	if err := f.Append("c1", logEvent(1, false)); err != nil {
		t.Fatal(err)
	}
	if got := request("c1"); got != "request" {
		t.Errorf("Redis log's request %q after the lease holder's first write, want the request", got)
	}
	// A reply lost on the way (Redis slow past the timeout): the lease is
	// in Redis, its replica does not know it, and the log keeps no request.
	if _, err := f.redis.openLeased("lost", Meta{Replica: "A", Request: []byte("request")}, "A", time.Second); err != nil {
		t.Fatal(err)
	}
	f.redis.pendingMeta.Delete("lost") // what a replica that never got the reply has
	if err := f.redis.Append("lost", logEvent(1, false)); err != nil {
		t.Fatal(err)
	}
	if got := request("lost"); got != "" {
		t.Errorf("a log whose lease nobody knows has the request %q: another replica could run it again", got)
	}

	if _, err := leases.Acquire(t.Context(), "c2", "B"); err != nil {
		t.Fatal(err)
	}
	l, leaseErr, err = open("c2")
	if l != nil || !errors.Is(leaseErr, ErrLeaseHeld) || err != nil {
		t.Fatalf("OpenLeased of a held lease: %v, %v, %v; want no lease, ErrLeaseHeld, no error", l, leaseErr, err)
	}
	for name, read := range map[string]func(string, uint64) (Page, error){"Redis": f.redis.Read, "memory": f.mem.Read} {
		page, err := read("c2", 0)
		if err != nil || len(page.Meta.Request) != 0 {
			t.Errorf("%s log without the lease keeps the request %q (%v)", name, page.Meta.Request, err)
		}
	}
}

// redisRequest is the request the Redis log of id keeps for a takeover.
func redisRequest(t *testing.T, f *PairLog, id string) string {
	t.Helper()
	page, err := f.redis.Read(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return string(page.Meta.Request)
}

// TestOpenAheadOpensWithTheFirstEvent: a Stream's log opens in memory
// first, then in Redis with its first event and its lease in one script
// call; the request joins it with JoinRequest (a write of the group
// commit, one call at most) or with the
// first fenced write, whichever comes first; the first event's bytes are
// counted with the writer's first write, as an appended event's are.
func TestOpenAheadOpensWithTheFirstEvent(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	f := newPair(t, rdb)
	leases := NewRedisLeases(rdb, 2*time.Second)
	meta := Meta{Replica: "A", Request: []byte("request")}
	if op, err := OpenAhead(NewMemLog(config.EventLogLimits{}, time.Now), leases, "m", "A", meta); op != nil || err != nil {
		t.Fatalf("OpenAhead on a log in memory: %v, %v; want nothing", op, err)
	}
	first := &completionv1.CompletionEvent{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: "c1"}}}
	if op, err := OpenAhead(f, leases, "warm", "A", meta); err == nil { // loads the scripts: a first NOSCRIPT is not counted
		l, _ := op.Open(first)
		f.Fence("warm", *l)
		op.JoinRequest()
	}
	f.watch.Close() // no PING among the commands counted (the warm-up's NOSCRIPT kicked one)
	count := &testkit.CommandCounter{}
	rdb.AddHook(count)
	op, err := OpenAhead(f, leases, "c1", "A", meta)
	if op == nil || err != nil {
		t.Fatalf("OpenAhead: %v, %v", op, err)
	}
	if n := count.Count(); n != 0 {
		t.Errorf("%d Redis commands before the first event, want 0", n)
	}
	if _, err := f.mem.Read("c1", 0); err != nil {
		t.Errorf("the memory log is not open before the first event: %v", err)
	}
	l, err := op.Open(first)
	if l == nil || err != nil {
		t.Fatalf("Open: %v, %v", l, err)
	}
	if n := count.Count(); n != 1 {
		t.Errorf("%d Redis commands to open with the first event, want 1", n)
	}
	if held, ok, err := leases.Holder(t.Context(), "c1"); err != nil || !ok || held != *l {
		t.Errorf("Holder: %+v %t %v, want %+v", held, ok, err, *l)
	}
	for name, read := range map[string]func(string, uint64) (Page, error){"Redis": f.redis.Read, "memory": f.mem.Read} {
		page, err := read("c1", 0)
		if err != nil || len(page.Events) != 1 || page.Events[0].GetStarted().GetCompletionId() != "c1" {
			t.Errorf("%s log after Open: %v, %v; want the started event", name, page.Events, err)
		}
	}
	request := func(id string) string { return redisRequest(t, f, id) }
	if got := request("c1"); got != "" {
		t.Errorf("Redis log's request %q before the lease holder confirmed it, want none", got)
	}
	f.Fence("c1", *l)
	before := count.Count()
	op.JoinRequest()
	if n := count.Count() - before; n != 1 {
		t.Errorf("%d Redis commands to join the request, want 1", n)
	}
	if got := request("c1"); got != "request" {
		t.Errorf("Redis log's request %q after JoinRequest, want the request", got)
	}
	// The open renewed the log: the next write is no renewal, and the
	// bytes of both events are counted late, with the end here.
	if f.redis.writer("c1").renewed.Load() == 0 {
		t.Error("the writer does not know the open renewed its log: its next write renews it again")
	}
	if err := f.Append("c1", logEvent(2, false)); err != nil {
		t.Fatal(err)
	}
	if err := f.End("c1", nil, logEvent(3, true), nil); err != nil {
		t.Fatal(err)
	}
	size, err := rdb.HGet(t.Context(), redisLogSizes, "c1").Int64()
	if want := int64(proto.Size(first) + proto.Size(logEvent(2, false)) + proto.Size(logEvent(3, true))); err != nil || size != want {
		t.Errorf("log size %d (%v) at its end, want %d: the three events", size, err, want)
	}

	// The first fenced write carried the request: JoinRequest has nothing
	// left to do.
	op, err = OpenAhead(f, leases, "c2", "A", meta)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = op.Open(first); l == nil {
		t.Fatal(err)
	}
	f.Fence("c2", *l)
	if err := f.Append("c2", logEvent(2, false)); err != nil {
		t.Fatal(err)
	}
	before = count.Count()
	op.JoinRequest()
	if n := count.Count() - before; n != 0 || request("c2") != "request" {
		t.Errorf("JoinRequest after the first write: %d commands, request %q; want none, the request", n, request("c2"))
	}

	// A completion whose writes are over (Unfence) leaves no request
	// pending, whatever became of it.
	if op, err = OpenAhead(f, leases, "c4", "A", meta); err != nil {
		t.Fatal(err)
	}
	if l, err = op.Open(first); l == nil {
		t.Fatal(err)
	}
	f.Unfence("c4")
	if _, pending := f.redis.pendingMeta.Load("c4"); pending {
		t.Error("a request still pending after Unfence")
	}

	// Another holds the lease: no lease, the log shared without the
	// request, and the first event in it all the same.
	if _, err := leases.Acquire(t.Context(), "c3", "B"); err != nil {
		t.Fatal(err)
	}
	if op, err = OpenAhead(f, leases, "c3", "A", meta); err != nil {
		t.Fatal(err)
	}
	if l, err = op.Open(first); l != nil || !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("Open of a held lease: %v, %v; want no lease, ErrLeaseHeld", l, err)
	}
	for name, read := range map[string]func(string, uint64) (Page, error){"Redis": f.redis.Read, "memory": f.mem.Read} {
		page, err := read("c3", 0)
		if err != nil || len(page.Meta.Request) != 0 || len(page.Events) != 1 {
			t.Errorf("%s log without the lease: request %q, %d events (%v); want none, the first event", name, page.Meta.Request, len(page.Events), err)
		}
	}
}

// TestOpenAheadWhenRedisFails: a Redis that fails the open (killed while
// the replica still thinks it up) gives no lease; the completion is kept
// here apart, its first event logged here all the same, so that it runs
// on this replica alone.
func TestOpenAheadWhenRedisFails(t *testing.T) {
	srv := redistest.New(t)
	rdb := testkit.ServerRedisClient(t, srv.Addr)
	f := newPair(t, rdb)
	leases := NewRedisLeases(rdb, 2*time.Second)
	op, err := OpenAhead(f, leases, "c1", "A", Meta{Replica: "A", Request: []byte("request")})
	if op == nil || err != nil {
		t.Fatalf("OpenAhead: %v, %v", op, err)
	}
	srv.Stop()
	first := &completionv1.CompletionEvent{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: "c1"}}}
	if l, err := op.Open(first); l != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open with Redis gone: %v, %v; want no lease, ErrUnavailable", l, err)
	}
	if !f.KeptHere("c1") {
		t.Error("the completion is not kept here apart")
	}
	page, err := f.mem.Read("c1", 0)
	if err != nil || len(page.Events) != 1 || len(page.Meta.Request) != 0 {
		t.Errorf("memory log: %d events, request %q (%v); want the first event, no request", len(page.Events), page.Meta.Request, err)
	}
	op.JoinRequest() // nothing pending: no lease was had
}
