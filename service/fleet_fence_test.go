package service

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider/sim"
)

// TestStreamWithoutLeaseWhenRedisIsDown: a resumable Stream on a replica
// whose Redis does not answer runs (it is not refused): without a lease,
// its log in memory only, without its request (never taken over).
func TestStreamWithoutLeaseWhenRedisIsDown(t *testing.T) {
	addr := redistest.Start(t)
	logs := &lockedBuffer{}
	// Its event log in a Redis that answers, its leases in one that is gone.
	gone := testkit.ServerRedisClient(t, "127.0.0.1:1")
	cfg := DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{}))
	withRedis(t, addr, logs)(&cfg)
	cfg.Leases = fleet.NewRedisLeases(gone, 300*time.Millisecond)
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
