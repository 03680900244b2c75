package providertest

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// BenchTokens is the length of the answer BenchStream streams.
const BenchTokens = 200

// BenchStream measures what one streamed answer costs the provider per
// chunk: a BenchTokens-token answer as newServer's wire renders it (with
// usage and terminator), replayed byte for byte by a second server that
// sends the whole body at once, so that the figures are the client's —
// request, framing, decode, reader — and not the pacing of the server.
// Beside the usual figures per op (one answer) it reports ns/chunk,
// allocs/chunk and B/chunk, a chunk being one emitted token; the
// in-process server's own allocations per request are in them too, spread
// over the chunks.
func BenchStream(b *testing.B, newServer func(testing.TB, Script) *Server, build func(*Server) (provider.Provider, error)) {
	words := make([]string, BenchTokens)
	for i := range words {
		words[i] = fmt.Sprintf(" w%03d", i)
	}
	answer := Answer{Model: "bench-model-2026-01-01", Text: words, Usage: Usage{Input: 1200, Output: BenchTokens, CacheRead: 1000}}
	body := newServer(b, Always(OK(answer))).Body(b)
	p, err := build(newServer(b, Always(Reply{SSE: body})))
	if err != nil {
		b.Fatal(err)
	}
	req := &provider.Request{Attempt: 1, Model: "bench-model", MaxTokens: 1024,
		Messages: []recovery.Message{recovery.UserText("Say something long.")}}
	chunks := 0
	emit := func(provider.Chunk) error {
		chunks++
		return nil
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		fin, err := p.Stream(b.Context(), req, emit)
		if err != nil || fin.StopReason != recovery.StopEndTurn {
			b.Fatalf("stream ended with %v, %+v", err, fin)
		}
	}
	runtime.ReadMemStats(&after)
	if chunks != b.N*BenchTokens {
		b.Fatalf("%d chunks emitted in %d answers, want %d each", chunks, b.N, BenchTokens)
	}
	n := float64(chunks)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/chunk")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/chunk")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/chunk")
}
