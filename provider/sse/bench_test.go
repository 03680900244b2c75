package sse

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// benchEvents is an answer's worth of events, framed as OpenAI frames them.
var benchEvents = strings.Repeat(`data: {"id":"chatcmpl-BXjv5Zy3aVvIUnf0uCWbbbNQWbAGu","object":"chat.completion.chunk","created":1747236303,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n", 200)

// BenchmarkFraming frames 200 events with the SDK's decoder (a
// bufio.Scanner) and with Reader; the figures are per event.
func BenchmarkFraming(b *testing.B) {
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := ssestream.NewDecoder(&http.Response{Body: io.NopCloser(strings.NewReader(benchEvents)), Header: http.Header{}})
			n := 0
			for d.Next() {
				n++
			}
			if n != 200 {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*200), "ns/event")
	})
	b.Run("lean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := NewReader(strings.NewReader(benchEvents), MaxEvent)
			n := 0
			for r.Next() {
				n++
			}
			if n != 200 {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*200), "ns/event")
	})
}
