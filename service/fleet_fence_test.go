package service

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/provider/sim"
)

// TestRedisLogFenced: once a completion is fenced, the Redis log appends
// its events only while the writer holds the lease, checked in the append
// script: an owner superseded by another replica writes nothing more, and
// the new owner's writes go on. The meta's Request (bytes, base64 in the
// JSON blob) reads back as it was written.
func TestRedisLogFenced(t *testing.T) {
	rdb := newTestRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisEventLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	ls := NewRedisLeases(rdb, time.Minute)
	req := []byte{0, 1, 2, 0xff, '"', '\\'}
	if err := l.Open("c1", LogMeta{Owner: "k", Request: req, Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c1", a)
	if res, err := l.add("c1", logEvent(1, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("the owner's append: %s %v", res, err)
	}
	// A's lease is lost (it lapsed) and B takes it.
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := ls.Acquire(ctx, "c1", "B")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := l.add("c1", logEvent(2, false), nil, false); res != "fenced" || err != nil {
		t.Fatalf("the superseded owner's append: %s %v, want fenced", res, err)
	}
	lb := NewRedisEventLog(rdb, config.EventLogLimits{}, nil) // B's
	t.Cleanup(lb.Close)
	lb.Fence("c1", b)
	if res, err := lb.add("c1", logEvent(2, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("the new owner's append: %s %v", res, err)
	}
	lb.End("c1", logEvent(3, true), nil)
	lb.Unfence("c1")
	p, err := lb.Read("c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !equalSeqs(seqs(p.Events), []uint64{1, 2, 3}) || !p.Ended {
		t.Fatalf("log %v ended %t", seqs(p.Events), p.Ended)
	}
	if !bytes.Equal(p.Meta.Request, req) || p.Meta.Replica != "A" || p.Meta.Owner != "k" {
		t.Fatalf("meta read back %+v", p.Meta)
	}
}

// TestStreamWithoutLeaseWhenRedisIsDown: a resumable Stream on a replica
// whose Redis does not answer runs (it is not refused): without a lease,
// its log in memory only, without its request (never taken over).
func TestStreamWithoutLeaseWhenRedisIsDown(t *testing.T) {
	addr := redistest.Start(t)
	logs := &lockedBuffer{}
	// Its event log in a Redis that answers, its leases in one that is gone.
	gone := newTestRedisClient(t, "127.0.0.1:1")
	cfg := DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{}))
	withRedis(t, addr, logs)(&cfg)
	cfg.Leases = NewRedisLeases(gone, 300*time.Millisecond)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	g := NewGRPC(srv)
	t.Cleanup(g.Server.Stop)
	conn := serveBufconn(t, g)
	t.Cleanup(func() { conn.Close() })
	client := completionv1.NewCompletionClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.Stream(ctx, slowRequest("sim", 5, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	evs, s := recvAll(st.Recv)
	if s.Code() != codes.OK {
		t.Fatalf("stream: %v (logs %s)", s, logs.String())
	}
	checkSeqs(t, evs)
	id := evs[0].GetStarted().GetCompletionId()
	p, err := srv.log.Read(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Meta.Request) != 0 {
		t.Error("a completion without a lease logged its request: another replica could take it over")
	}
	if !bytes.Contains([]byte(logs.String()), []byte("no lease for a resumable completion")) {
		t.Errorf("no log line says the completion runs without a lease: %s", logs.String())
	}
}
