package service

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// soakConfig is one chaos soak: completions with random sim fault scripts
// over the three RPCs, in both delivery modes, each checked against the
// stream contract, with the process's goroutines and resident memory
// compared before and after.
type soakConfig struct {
	// N is the number of completions (SOAK_N; 200 by default, as in make test).
	N int
	// Workers run completions concurrently.
	Workers int
	// Seed seeds the draw of the requests (SOAK_SEED).
	Seed uint64
	// Metadata, when set, edits the outgoing metadata of every request
	// (say, to add credentials to a server that wants them).
	Metadata func(metadata.MD)
	// Server edits the server's configuration.
	Server func(*Config)
	// MaxRSSGrowth bounds the growth of VmRSS over the run, after a
	// warm-up; without the race detector only (its shadow memory grows
	// with every allocation and is never returned).
	MaxRSSGrowth int64
	// MaxGoroutineGrowth bounds the goroutines left once the run is over.
	MaxGoroutineGrowth int
}

// soakDefaults reads SOAK_N and SOAK_SEED.
func soakDefaults(t *testing.T) soakConfig {
	c := soakConfig{N: 200, Workers: 8, Seed: 1, MaxRSSGrowth: 64 << 20, MaxGoroutineGrowth: 10}
	for name, dst := range map[string]*int{"SOAK_N": &c.N, "SOAK_WORKERS": &c.Workers} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("%s=%q is not a positive count", name, v)
			}
			*dst = n
		}
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", v, err)
		}
		c.Seed = s
	}
	return c
}

// TestSoak is the bounded chaos soak, without and with authentication.
// make test runs 200 completions each; make soak runs SOAK_N of them
// (10 000).
func TestSoak(t *testing.T) {
	t.Run("no-auth", func(t *testing.T) { runSoak(t, soakDefaults(t)) })
	t.Run("auth", func(t *testing.T) {
		c := soakDefaults(t)
		c.Server = func(cfg *Config) {
			cfg.Auth = testKeys()
			cfg.Limits.KeyRate = 0 // the soak measures the contract, not the rate limit (tested on its own)
		}
		c.Metadata = func(md metadata.MD) { md.Set("authorization", "Bearer ops-secret-key") }
		runSoak(t, c)
	})
}

// soakRPCs are the RPCs a soak completion may go through.
var soakRPCs = []string{"Stream", "Complete", "Session"}

func runSoak(t *testing.T, c soakConfig) {
	env := newTestEnv(t, func(cfg *Config) {
		if c.Server != nil {
			c.Server(cfg)
		}
	})
	client := completionv1.CompletionClient(env.client)
	if c.Metadata != nil {
		client = mdClient{CompletionClient: client, edit: c.Metadata}
	}
	warm := max(c.N/10, min(c.N, 20))
	var next atomic.Int64
	var counts [3]atomic.Int64
	work := func(t *testing.T, until int64) {
		for {
			i := next.Add(1) - 1
			if i >= until {
				return
			}
			r := rand.New(rand.NewPCG(c.Seed, uint64(i)))
			rpc, settled := r.IntN(len(soakRPCs)), r.IntN(2) == 1
			req := chaosRequest(r, settled)
			counts[rpc].Add(1)
			soakOne(t, client, soakRPCs[rpc], req, settled)
			if t.Failed() {
				t.Logf("completion %d (seed %d): %s settled=%t script %q", i, c.Seed, soakRPCs[rpc], settled, req.GetMetadata()["sim.faults"])
				return
			}
		}
	}
	phase := func(name string, from, until int64) {
		next.Store(from)
		t.Run(name, func(t *testing.T) {
			for w := range c.Workers {
				t.Run(fmt.Sprintf("worker%d", w), func(t *testing.T) {
					t.Parallel()
					work(t, until)
				})
			}
		})
	}
	phase("warmup", 0, int64(warm))
	g0, rss0 := settledGoroutines(), vmRSS(t)
	began := time.Now()
	phase("soak", int64(warm), int64(c.N))
	took := time.Since(began)
	waitGoroutines(t, g0+c.MaxGoroutineGrowth)
	g1, rss1 := settledGoroutines(), vmRSS(t)
	t.Logf("soak: %d completions (Stream %d, Complete %d, Session %d; seed %d) in %v; goroutines %d → %d; VmRSS %d → %d KiB",
		c.N, counts[0].Load(), counts[1].Load(), counts[2].Load(), c.Seed, took.Round(time.Millisecond), g0, g1, rss0>>10, rss1>>10)
	if raceDetector() {
		t.Log("soak: the race detector's memory is never returned; VmRSS is reported, not bounded")
	} else if rss0 > 0 && rss1-rss0 > c.MaxRSSGrowth {
		t.Errorf("VmRSS grew by %d KiB over %d completions, more than %d KiB", (rss1-rss0)>>10, c.N, c.MaxRSSGrowth>>10)
	}
}

// soakOne runs req through rpc and checks the contract of what came back.
func soakOne(t *testing.T, client completionv1.CompletionClient, rpc string, req *completionv1.CompleteRequest, settled bool) {
	t.Helper()
	switch rpc {
	case "Stream":
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		s, err := client.Stream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		st, evs := drainEvents(s.Recv)
		checkDelivery(t, evs, st, settled)
	case "Complete":
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		resp, err := client.Complete(ctx, req)
		checkComplete(t, resp, status.Convert(err))
	case "Session":
		evs, st := eagerSession(t, client, req)
		if st.Code() == codes.InvalidArgument {
			t.Fatalf("the eager client broke the protocol: %v", st)
		}
		checkDelivery(t, evs, st, settled)
	}
}

// checkComplete checks a Complete answer: OK with a COMPLETED result whose
// last transition is the one terminal, or a status whose ErrorInfo names a
// terminal reason.
func checkComplete(t *testing.T, resp *completionv1.CompleteResponse, st *status.Status) {
	t.Helper()
	if st.Code() != codes.OK {
		if info := errorInfo(st); info == nil || completionv1.TransitionReason_value["TRANSITION_REASON_"+info.GetReason()] == 0 {
			t.Errorf("Complete failed with %v and no terminal reason in ErrorInfo", st)
		}
		return
	}
	res, trs := resp.GetResult(), resp.GetTransitions()
	if res == nil || len(trs) == 0 || resp.GetCompletionId() == "" {
		t.Fatalf("Complete answered OK without a result, transitions or id: %v", resp)
	}
	checkStatusAgrees(t, res.GetReason(), st)
	for i, tr := range trs {
		if tr.GetTerminal() != (i == len(trs)-1) {
			t.Errorf("transition %d of %d (%v) terminal=%t", i, len(trs), tr.GetReason(), tr.GetTerminal())
		}
	}
	if last := trs[len(trs)-1]; last.GetReason() != res.GetReason() {
		t.Errorf("last transition %v, result %v", last.GetReason(), res.GetReason())
	}
}

// mdClient adds outgoing metadata, edited by edit, to every RPC.
type mdClient struct {
	completionv1.CompletionClient
	edit func(metadata.MD)
}

func (c mdClient) ctx(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	c.edit(md)
	return metadata.NewOutgoingContext(ctx, md)
}

func (c mdClient) Stream(ctx context.Context, in *completionv1.CompleteRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[completionv1.CompletionEvent], error) {
	return c.CompletionClient.Stream(c.ctx(ctx), in, opts...)
}

func (c mdClient) Complete(ctx context.Context, in *completionv1.CompleteRequest, opts ...grpc.CallOption) (*completionv1.CompleteResponse, error) {
	return c.CompletionClient.Complete(c.ctx(ctx), in, opts...)
}

func (c mdClient) Session(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[completionv1.SessionRequest, completionv1.CompletionEvent], error) {
	return c.CompletionClient.Session(c.ctx(ctx), opts...)
}

// TestSoakMetadataReachesTheServer: the soak's metadata hook edits what
// every RPC sends, on all three RPCs.
func TestSoakMetadataReachesTheServer(t *testing.T) {
	var seen, missing atomic.Int64
	check := func(ctx context.Context) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-soak")) == 1 && md.Get("x-soak")[0] == "yes" {
			seen.Add(1)
		} else {
			missing.Add(1)
		}
	}
	cfg := DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{Words: 12}))
	raw, _ := grpcClient(t, cfg,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			check(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			check(ss.Context())
			return h(srv, ss)
		}))
	client := mdClient{CompletionClient: raw, edit: func(md metadata.MD) { md.Set("x-soak", "yes") }}
	for _, rpc := range soakRPCs {
		soakOne(t, client, rpc, faults("ok"), false)
	}
	if seen.Load() != 3 || missing.Load() != 0 {
		t.Errorf("metadata seen on %d RPCs, missing on %d; want 3 and 0", seen.Load(), missing.Load())
	}
}

// raceDetector reports whether the test binary was built with -race.
func raceDetector() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// settledGoroutines counts the goroutines once a collection has run.
func settledGoroutines() int {
	runtime.GC()
	return runtime.NumGoroutine()
}

// vmRSS is the process's resident set size from /proc/self/status, after
// a collection that returns freed memory to the system; 0 where there is no
// /proc.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	debug.FreeOSMemory()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", sc.Text(), err)
			}
			return kb << 10
		}
	}
	return 0
}
