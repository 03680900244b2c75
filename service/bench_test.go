package service

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/completiond/completiond/bench/mock"
	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/openai"
	"github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// benchServer serves the given routes over bufconn, without logging, with
// backoff made negligible so that a recovery costs what the service spends.
func benchServer(b *testing.B, routes map[string]*config.Route, def string) completionv1.CompletionClient {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Routes, cfg.DefaultRoute = routes, def
	cfg.Policy.Retry.BackoffBase, cfg.Policy.Retry.BackoffMax = time.Microsecond, time.Microsecond
	client, _ := grpcClient(b, cfg)
	return client
}

func directCall(b *testing.B, p provider.Provider, req *provider.Request) {
	n := 0
	if _, err := p.Stream(context.Background(), req, func(provider.Chunk) error { n++; return nil }); err != nil || n == 0 {
		b.Fatal(err)
	}
}

func grpcCall(b *testing.B, c completionv1.CompletionClient, req *completionv1.CompleteRequest) {
	st, err := c.Stream(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			return
		} else if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamOverhead streams a 200-token answer from an OpenAI-wire
// server on loopback twice per iteration: directly through the openai
// provider, and through completiond (gRPC, validation, machine, driver, the
// same provider). It reports the ratio of the two: what a caller pays for
// going through the service instead of calling the upstream itself.
func BenchmarkStreamOverhead(b *testing.B) {
	words := make([]string, 200)
	for i := range words {
		words[i] = " token"
	}
	upstream := providertest.NewOpenAI(b, providertest.Always(providertest.OK(providertest.Text(words...))))
	p, err := openai.New(openai.Config{BaseURL: upstream.URL, APIKey: "sk-bench"})
	if err != nil {
		b.Fatal(err)
	}
	route := &config.Route{Spec: recovery.Route{Name: "up", Provider: "openai", Model: "test-model", ContextWindow: 128000}, Upstream: p}
	client := benchServer(b, map[string]*config.Route{"up": route}, "up")
	direct := &provider.Request{Attempt: 1, Model: "test-model", MaxTokens: 8000,
		Messages: []recovery.Message{recovery.UserText("Benchmark the overhead.")}}
	viaService := prompt("Benchmark the overhead.", nil)
	compare(b, "direct", func() { directCall(b, p, direct) }, func() { grpcCall(b, client, viaService) })
}

// BenchmarkRecoveryPath measures a completion that needs recovery — two
// rate limits and a stream cut resumed by prefill, on the sim — against a
// clean one, both through the service, to show what recovery itself costs.
func BenchmarkRecoveryPath(b *testing.B) {
	client := benchServer(b, config.SimRoutes(sim.New(sim.Config{})), "sim")
	clean := prompt("Benchmark recovery.", map[string]string{sim.MetaWords: "200"})
	faulty := prompt("Benchmark recovery.", map[string]string{sim.MetaWords: "200", sim.MetaFaults: "rate_limit,rate_limit,cut=100"})
	compare(b, "clean", func() { grpcCall(b, client, clean) }, func() { grpcCall(b, client, faulty) })
}

// compare runs base and subject alternately in the same loop, so that both
// see the same machine load, and reports subject's time as a multiple of
// base's ("x-<name>") and each one's time per operation.
func compare(b *testing.B, name string, base, subject func()) {
	var baseTime, subjectTime time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		base()
		t1 := time.Now()
		subject()
		baseTime += t1.Sub(t0)
		subjectTime += time.Since(t1)
	}
	b.ReportMetric(float64(subjectTime)/float64(baseTime), "x-"+name)
	b.ReportMetric(float64(subjectTime.Microseconds())/float64(b.N), "µs-subject/op")
	b.ReportMetric(float64(baseTime.Microseconds())/float64(b.N), "µs-"+name+"/op")
}

// BenchmarkLogging streams 1-word answers from the sim through the service
// with the server's JSON log at INFO (to /dev/null, a write per line as to
// stdout, through TraceLogHandler as the binary sets it up) and with logging off (ERROR):
// the difference is what logging costs a short answer, in time, in CPU
// (cpu-ns/op: the process's, client and server, from getrusage, steadier
// than the time on a busy machine) and in allocations.
func BenchmarkLogging(b *testing.B) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelError} {
		b.Run("level="+level.String(), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Routes, cfg.DefaultRoute = config.SimRoutes(sim.New(sim.Config{})), "sim"
			cfg.Logger = slog.New(telemetry.TraceLogHandler(slog.NewJSONHandler(testkit.DevNull(b), &slog.HandlerOptions{Level: level})))
			client, _ := grpcClient(b, cfg)
			req := prompt("Benchmark logging.", map[string]string{sim.MetaWords: "1"})
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				grpcCall(b, client, req)
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkLongAnswer streams answers of 1 000 and 30 000 tokens from an
// OpenAI-wire server on loopback through the service (the openai provider,
// gRPC over bufconn), and 30 000 tokens in four attempts — three cut by
// finish_reason length and continued (MAX_OUTPUT_TOKENS_RECOVERY) — to show
// that the cost per token does not grow with the answer or its
// continuations: nothing re-copies the answer per chunk. It reports per
// token the wall time (ns/token), the process's CPU time (cpu-ns/token,
// from getrusage: upstream, server and client, all in this process) and the
// allocations (allocs/token).
func BenchmarkLongAnswer(b *testing.B) {
	words := func(n int) []string {
		w := make([]string, n)
		for i := range w {
			w[i] = " token"
		}
		return w
	}
	whole := func(n int) providertest.Reply { return providertest.OK(providertest.Text(words(n)...)) }
	cut := providertest.OK(providertest.Answer{Text: words(7500), Limit: true})
	for _, tc := range []struct {
		name   string
		tokens int
		script providertest.Script
	}{
		{"tokens=1k", 1000, providertest.Always(whole(1000))},
		{"tokens=30k", 30000, providertest.Always(whole(30000))},
		{"tokens=30k/continuations=3", 30000, func(n int, _ time.Duration) providertest.Reply {
			if n%4 == 0 {
				return whole(7500)
			}
			return cut
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			upstream := providertest.NewOpenAI(b, tc.script)
			p, err := openai.New(openai.Config{BaseURL: upstream.URL, APIKey: "sk-bench"})
			if err != nil {
				b.Fatal(err)
			}
			route := &config.Route{Spec: recovery.Route{Name: "up", Provider: "openai", Model: "test-model",
				ContextWindow: 1_000_000, MaxOutputTokens: 64_000}, Upstream: p}
			cfg := DefaultConfig()
			cfg.Routes, cfg.DefaultRoute = map[string]*config.Route{"up": route}, "up"
			cfg.Policy.Truncation.Escalation, cfg.Policy.Truncation.MaxContinuations = false, 3
			client, _ := grpcClient(b, cfg)
			req := prompt("Benchmark a long answer.", nil)
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := processCPU(b)
			start := time.Now()
			for b.Loop() {
				if n := streamDeltas(b, client, req); n != tc.tokens {
					b.Fatalf("%d deltas, want %d", n, tc.tokens)
				}
			}
			wall, cpu := time.Since(start), processCPU(b)-cpu0
			runtime.ReadMemStats(&ms1)
			tokens := float64(b.N * tc.tokens)
			b.ReportMetric(float64(wall.Nanoseconds())/tokens, "ns/token")
			b.ReportMetric(float64(cpu.Nanoseconds())/tokens, "cpu-ns/token")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/tokens, "allocs/token")
		})
	}
}

// streamDeltas streams req and counts its text deltas.
func streamDeltas(b *testing.B, c completionv1.CompletionClient, req *completionv1.CompleteRequest) int {
	st, err := c.Stream(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			return n
		} else if err != nil {
			b.Fatal(err)
		}
		if d := ev.GetDelta(); d != nil && d.GetKind() == completionv1.DeltaKind_DELTA_KIND_TEXT {
			n++
		}
	}
}

// processCPU is the user and system time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleStreams is how many Streams BenchmarkIdleStreams and
// BenchmarkIdleStreamsOpenAI hold open at once.
const idleStreams = 1000

// BenchmarkIdleStreams holds 1 000 Streams open on an upstream that says
// nothing (holdProvider), and reports the Go heap, the goroutine stacks
// and the goroutines each one costs, the
// client's side (in this process too) included: what an idle open stream
// costs the server, without the provider's own connection (the load
// benchmark has that, and BenchmarkIdleStreamsOpenAI). With
// COMPLETIOND_IDLE_HEAPPROFILE set, it writes the heap profile taken while
// the streams are held there.
func BenchmarkIdleStreams(b *testing.B) {
	held := make(chan struct{}, idleStreams)
	routes := config.SimRoutes(sim.New(sim.Config{}))
	routes["sim"].Upstream = &holdProvider{Provider: routes["sim"].Upstream, entered: held, release: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Routes, cfg.DefaultRoute = routes, "sim"
	client, _ := grpcClient(b, cfg)
	grpcCall(b, client, prompt("Warm up.", nil)) // the connection and the server's lazy state
	measureIdle(b, client, prompt("Hold on.", map[string]string{metaHold: "1"}), func() {
		for range idleStreams {
			<-held
		}
	})
}

// BenchmarkIdleStreamsOpenAI is BenchmarkIdleStreams through the openai
// provider and its HTTP connections, against the load benchmark's mock
// upstream holding every stream silent after its headers, routed as the
// load benchmark routes it: what the load benchmark's idle streams keep
// in completiond, in one process with the upstream and the client (both
// of which cost the same whatever completiond does).
func BenchmarkIdleStreamsOpenAI(b *testing.B) {
	up := mock.New()
	srv := httptest.NewUnstartedServer(up)
	srv.Config.ConnState = up.ConnState
	srv.Start()
	b.Cleanup(func() { up.Close(); srv.Close() })
	p, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", APIKey: "sk-loadbench"})
	if err != nil {
		b.Fatal(err)
	}
	route := func(name, model string) *config.Route {
		return &config.Route{Spec: recovery.Route{Name: name, Provider: "openai", Model: model, ContextWindow: 128000, MaxOutputTokens: 4096},
			Upstream: p, Timeouts: provider.Timeouts{Headers: time.Minute, FirstToken: time.Hour, Idle: time.Hour, Total: time.Hour}}
	}
	cfg := DefaultConfig()
	cfg.Routes = map[string]*config.Route{"bench": route("bench", mock.Spec{Hold: true}.Model()), "warm": route("warm", mock.Spec{Tokens: 1}.Model())}
	cfg.DefaultRoute = "bench"
	client, _ := grpcClient(b, cfg)
	warm := prompt("Warm up.", nil)
	warm.Route = "warm"
	grpcCall(b, client, warm)
	measureIdle(b, client, prompt("Hold on.", nil), func() {
		for up.Stats().Held < idleStreams {
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// measureIdle opens idleStreams Streams of req on client, calls held to
// wait until the upstream holds them all, and reports what each costs: Go
// heap, goroutine stacks and goroutines, read after two GCs (which also
// shrink the stacks that can be).
func measureIdle(b *testing.B, client completionv1.CompletionClient, req *completionv1.CompleteRequest, held func()) {
	var perStream, stacks, goroutines float64
	for b.Loop() {
		b.StopTimer()
		heap0, stack0, g0 := settledMemory()
		b.StartTimer()
		ctx, cancel := context.WithCancel(context.Background())
		streams := make([]completionv1.Completion_StreamClient, idleStreams)
		for i := range streams {
			st, err := client.Stream(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Recv(); err != nil { // started
				b.Fatal(err)
			}
			streams[i] = st
		}
		held()
		b.StopTimer()
		heap1, stack1, g1 := settledMemory()
		perStream += (float64(heap1) - float64(heap0)) / idleStreams
		stacks += (float64(stack1) - float64(stack0)) / idleStreams
		goroutines += float64(g1-g0) / idleStreams
		if path := os.Getenv("COMPLETIOND_IDLE_HEAPPROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		cancel()
		for _, st := range streams {
			for {
				if _, err := st.Recv(); err != nil {
					break
				}
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(perStream/float64(b.N), "heap-B/stream")
	b.ReportMetric(stacks/float64(b.N), "stack-B/stream")
	b.ReportMetric(goroutines/float64(b.N), "goroutines/stream")
}

// settledMemory is the live heap, the goroutine stacks and the goroutines
// after two GCs.
func settledMemory() (heap, stack uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}
