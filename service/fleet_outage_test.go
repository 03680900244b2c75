package service

import (
	"context"
	"sync"
	"testing"
	"time"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

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
	leases := fleet.NewRedisLeases(testkit.ServerRedisClient(t, rs.Addr), ttl)
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
		evs := seen() // once: the stream goes on receiving
		last := evs[len(evs)-1].GetSeq()
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
