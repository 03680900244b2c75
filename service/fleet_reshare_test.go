package service

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
)

// copyOfRun is the logCopy of events 1..n, the last the result when ended.
func copyOfRun(t *testing.T, meta LogMeta, n int, ended bool) logCopy {
	t.Helper()
	c := logCopy{meta: meta, ended: ended}
	if ended {
		c.status = []byte("status")
	}
	for i := 1; i <= n; i++ {
		b, err := proto.Marshal(logEvent(uint64(i), ended && i == n))
		if err != nil {
			t.Fatal(err)
		}
		c.events, c.seqs = append(c.events, b), append(c.seqs, uint64(i))
	}
	return c
}

// TestRedisReshare: a log kept in memory alone for a while is published
// again: Redis gets the events it lacks after those it kept, or all of
// them and the end once it lost everything (the lapsed lease is taken
// back, the ended log's meta keeps no request); another replica granted
// the lease meanwhile refuses it, and its log is left as it is.
func TestRedisReshare(t *testing.T) {
	rdb := newTestRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisEventLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	ls := NewRedisLeases(rdb, time.Minute)
	l.LeaseTTL = ls.TTL()
	meta := LogMeta{Owner: "k", Request: []byte("req"), Replica: "A"}
	if err := l.Open("c1", meta); err != nil {
		t.Fatal(err)
	}
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c1", a)
	appendRun(l, "c1", 2, false)

	readAll := func(id string) LogPage {
		t.Helper()
		p, err := l.Read(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Redis missed events 3..5 (it did not answer): they are added.
	if err := l.reshare("c1", copyOfRun(t, meta, 5, false)); err != nil {
		t.Fatal(err)
	}
	if p := readAll("c1"); !equalSeqs(seqs(p.Events), []uint64{1, 2, 3, 4, 5}) || p.Ended || string(p.Meta.Request) != "req" {
		t.Fatalf("after a reshare: seqs %v ended %t meta %+v", seqs(p.Events), p.Ended, p.Meta)
	}
	// Redis restarted empty: everything again, and the end.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.reshare("c1", copyOfRun(t, meta, 7, true)); err != nil {
		t.Fatal(err)
	}
	p := readAll("c1")
	if !equalSeqs(seqs(p.Events), []uint64{1, 2, 3, 4, 5, 6, 7}) || !p.Ended || string(p.Status) != "status" || len(p.Meta.Request) != 0 {
		t.Fatalf("after Redis lost it: seqs %v ended %t status %q meta %+v", seqs(p.Events), p.Ended, p.Status, p.Meta)
	}
	if h, ok, _ := ls.Holder(ctx, "c1"); !ok || h != a {
		t.Fatalf("the lapsed lease was not taken back: %+v %t", h, ok)
	}

	// c2: A's lease lapsed, and B was granted it and wrote on.
	if err := l.Open("c2", meta); err != nil {
		t.Fatal(err)
	}
	a2, err := ls.Acquire(ctx, "c2", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c2", a2)
	appendRun(l, "c2", 2, false)
	if err := rdb.Del(ctx, LeaseKey("c2")).Err(); err != nil {
		t.Fatal(err)
	}
	b2, err := ls.Acquire(ctx, "c2", "B")
	if err != nil {
		t.Fatal(err)
	}
	lb := NewRedisEventLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(lb.Close)
	lb.Fence("c2", b2)
	lb.Append("c2", logEvent(3, false))
	if err := l.reshare("c2", copyOfRun(t, meta, 6, false)); !errors.Is(err, errLogFenced) {
		t.Fatalf("A's reshare of a completion B holds: %v, want fenced", err)
	}
	if err := l.dropUnlessFenced("c2"); err != nil {
		t.Fatal(err)
	}
	if p := readAll("c2"); !equalSeqs(seqs(p.Events), []uint64{1, 2, 3}) {
		t.Fatalf("B's log after A's refused reshare and drop: %v", seqs(p.Events))
	}
	// Lapsed again, nobody holds it now, but B was granted it after A:
	// A is still refused.
	if err := rdb.Del(ctx, LeaseKey("c2")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.reshare("c2", copyOfRun(t, meta, 6, false)); !errors.Is(err, errLogFenced) {
		t.Fatalf("A's reshare once B's lease lapsed: %v, want fenced", err)
	}
}

// TestFleetRedisOutageKeepsLeasedCompletions: Redis goes away for longer
// than the lease while a resumable completion with a lease runs on A; the
// completion goes on (its caller sees no break). Once Redis is back
// (empty), A publishes its log again and keeps its lease, so that the
// completion is the fleet's again: A dies, and an Attach through B after
// the last seq seen takes it over from the whole log — every seq once, no
// token repeated, the answer whole.
func TestFleetRedisOutageKeepsLeasedCompletions(t *testing.T) {
	const ttl = 300 * time.Millisecond
	rs := redistest.New(t)
	leases := NewRedisLeases(newTestRedisClient(t, rs.Addr), ttl)
	fleet := inProcessFleet(t, 2, leases, rs.Addr)
	a, b := fleet[0], fleet[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := slowRequest("sim", 150, 20*time.Millisecond)
	want := wholeAnswer(t, ctx, b.client, req)

	st, err := a.client.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []*completionv1.CompletionEvent
	recvDone := make(chan error, 1)
	go func() {
		for {
			ev, err := st.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
		}
	}()
	seen := func() []*completionv1.CompletionEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]*completionv1.CompletionEvent(nil), got...)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-recvDone:
				t.Fatalf("%s: the stream through A ended: %v", what, err)
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitFor("five events", func() bool { return len(seen()) >= 5 })
	id := seen()[0].GetStarted().GetCompletionId()

	rs.Stop()
	before := len(seen())
	time.Sleep(3 * ttl) // longer than the lease: A cannot renew it
	waitFor("events during the outage", func() bool { return len(seen()) > before+10 })
	rs.Restart() // empty

	// A publishes the log again with its next events: B reads it whole.
	waitFor("the log shared again", func() bool {
		last := seen()[len(seen())-1].GetSeq()
		p, err := b.srv.log.Read(id, 0)
		if err != nil || len(p.Events) == 0 || p.Events[0].GetSeq() != 1 {
			return false
		}
		for !p.Done() && len(p.Events) > 0 && p.Events[len(p.Events)-1].GetSeq() < last {
			next, err := b.srv.log.Read(id, p.Events[len(p.Events)-1].GetSeq())
			if err != nil || len(next.Events) == 0 {
				return false
			}
			p = next
		}
		return len(p.Events) > 0 && p.Events[len(p.Events)-1].GetSeq() >= last
	})
	if h, ok, err := leases.Holder(ctx, id); err != nil || !ok || h.Replica != "A" {
		t.Fatalf("the lease after the outage: %+v %t %v, want A's", h, ok, err)
	}

	a.kill()
	<-recvDone
	rest, all := attachRest(t, ctx, b.client, seen())
	if replicaLost(rest) == nil {
		t.Fatal("no REPLICA_LOST transition after A died")
	}
	if res := all[len(all)-1].GetResult(); resultText(res) != want {
		t.Errorf("answer %q, want %q", resultText(res), want)
	}
	if deltaText(all) != want {
		t.Errorf("a token repeated or was lost: the deltas concatenate to %q, want %q", deltaText(all), want)
	}
}
