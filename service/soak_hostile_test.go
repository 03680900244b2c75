package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
)

// hostileCounts are what the hostile soak's callers met.
type hostileCounts struct {
	completed, refused           atomic.Int64 // the obeying clients' completions, and their refusals
	wrongKey, oversized, unknown atomic.Int64 // hostile calls, and answers no hostile call should get
}

// TestSoakHostile is the auth-on soak of callers the door must hold off
// while it serves the others: SOAK_N completions by clients of one key
// that obey every RetryInfo at the key's rate limit (100/s, burst 20),
// while other clients send wrong keys and 8 MiB requests without a key
// for as long as it runs. It reports goroutines, VmRSS and the server's
// refusals (completiond.refusals) before and after, and bounds the
// goroutines left, VmRSS growth (without the race detector), and what the
// hostile calls get: UNAUTHENTICATED, every one. make test runs 200;
// make soak SOAK_N (10 000).
func TestSoakHostile(t *testing.T) {
	c := soakDefaults(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e := newTestEnv(t, func(cfg *Config) {
		cfg.Auth = testKeys()
		cfg.Limits.KeyRate, cfg.Limits.KeyBurst = 100, 20
		cfg.Telemetry = telemetry.Telemetry{MeterProvider: mp}
	})
	legit, hostile := serveLoopback(t, e.grpc), serveLoopback(t, e.grpc)
	body, err := proto.Marshal(prompt(strings.Repeat("x", 8<<20), nil))
	if err != nil {
		t.Fatal(err)
	}
	var n hostileCounts
	warm := int64(max(c.N/10, min(c.N, 20)))
	obeying(t, legit, c.Workers*4, warm, &n) // the connections, the pools and the limiter's state, warm
	g0, rss0, ref0 := settledGoroutines(), vmRSS(t), refusals(t, reader)
	began := time.Now()
	stop := make(chan struct{})
	var attackers sync.WaitGroup
	for i := range 2 {
		attackers.Go(func() { wrongKeys(t, hostile, stop, i, &n) })
		attackers.Go(func() { oversized(hostile, body, stop, &n) })
	}
	n.completed.Store(0)
	n.refused.Store(0)
	obeying(t, legit, c.Workers*4, int64(c.N), &n)
	close(stop)
	attackers.Wait()
	took := time.Since(began)
	waitGoroutines(t, g0+c.MaxGoroutineGrowth)
	g1, rss1, ref1 := settledGoroutines(), vmRSS(t), refusals(t, reader)
	t.Logf("hostile soak: %d completions by %d obeying clients in %v (%d refused: %.2f per completion); "+
		"%d wrong-key and %d oversized unauthenticated calls; goroutines %d → %d; VmRSS %d → %d KiB; refusals %v → %v",
		n.completed.Load(), c.Workers*4, took.Round(time.Millisecond), n.refused.Load(), float64(n.refused.Load())/float64(max(n.completed.Load(), 1)),
		n.wrongKey.Load(), n.oversized.Load(), g0, g1, rss0>>10, rss1>>10, ref0, ref1)
	if u := n.unknown.Load(); u > 0 {
		t.Errorf("%d hostile calls were answered otherwise than UNAUTHENTICATED", u)
	}
	if raceDetector() {
		t.Log("hostile soak: the race detector's memory is never returned; VmRSS is reported, not bounded")
	} else if rss0 > 0 && rss1-rss0 > c.MaxRSSGrowth {
		t.Errorf("VmRSS grew by %d KiB in the hostile soak, more than %d KiB", (rss1-rss0)>>10, c.MaxRSSGrowth>>10)
	}
}

// obeying runs until completions completed, on clients clients of the
// key ops, each waiting out every refusal's RetryInfo before it tries
// again.
func obeying(t *testing.T, conn *grpc.ClientConn, clients int, completions int64, n *hostileCounts) {
	t.Helper()
	client := completionv1.NewCompletionClient(conn)
	ctx := bearer(t.Context(), "Bearer ops-secret-key")
	var started atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for started.Add(1) <= completions {
				for !t.Failed() {
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					_, err := client.Complete(cctx, prompt("hi", nil))
					cancel()
					if err == nil {
						n.completed.Add(1)
						break
					}
					if status.Code(err) != codes.ResourceExhausted || retryDelay(err) < 0 {
						t.Errorf("an obeying client: %v", err)
						return
					}
					n.refused.Add(1)
					time.Sleep(retryDelay(err)) // obeying RetryInfo is the point
				}
			}
		})
	}
	wg.Wait()
}

// wrongKeys sends Completes with wrong keys until stop.
func wrongKeys(t *testing.T, conn *grpc.ClientConn, stop <-chan struct{}, worker int, n *hostileCounts) {
	client := completionv1.NewCompletionClient(conn)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ctx := bearer(t.Context(), fmt.Sprintf("Bearer wrong-%d-%d", worker, i))
		_, err := client.Complete(ctx, prompt("hi", nil))
		if status.Code(err) != codes.Unauthenticated {
			n.unknown.Add(1)
		}
		n.wrongKey.Add(1)
	}
}

// oversized sends 8 MiB Completes without a key until stop.
func oversized(conn *grpc.ClientConn, body []byte, stop <-chan struct{}, n *hostileCounts) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		err := conn.Invoke(context.Background(), "/completion.v1.Completion/Complete", body,
			new(completionv1.CompleteResponse), grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.Unauthenticated {
			n.unknown.Add(1)
		}
		n.oversized.Add(1)
	}
}

// refusals is completiond.refusals by reason, from reader.
func refusals(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	return counterSeries(t, reader, "completiond.refusals")
}

// counterSeries is counter name by its attributes ("k=v,…"), from reader.
func counterSeries(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for k, v := range counters(rm) {
		if rest, ok := strings.CutPrefix(k, name+"{"); ok {
			out[strings.TrimSuffix(rest, "}")] = v
		}
	}
	return out
}
