package fleet

import (
	"errors"
	"testing"
	"time"

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
	request := func(id string) string {
		t.Helper()
		page, err := f.redis.Read(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		return string(page.Meta.Request)
	}
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
