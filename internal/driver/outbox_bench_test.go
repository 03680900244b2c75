package driver

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/fleet"
)

// BenchmarkEventLogMemory measures what the in-memory event log holds for
// a completion it retains: the heap per completion of 1 000 tokens
// (bytes/1k-tokens, after a GC), and the encoded size it accounts against
// --event-log-bytes (encoded-bytes/1k-tokens). Each completion is what
// the outbox logs for a plain answer: started, 1 000 text deltas, usage,
// the terminal transition and the result, whose message repeats the text.
func BenchmarkEventLogMemory(b *testing.B) {
	const completions, tokens = 20, 1000
	var heap, encoded int64
	for range b.N {
		l := fleet.NewMemLog(config.EventLogLimits{MaxCompletions: completions, MaxEvents: 2 * tokens, MaxBytes: 1 << 30}, time.Now)
		before := heapAfterGC()
		for i := range completions {
			logAnswer(l, fmt.Sprintf("cmpl_%024d", i), tokens)
		}
		heap += heapAfterGC() - before
		encoded += l.Bytes
		runtime.KeepAlive(l)
	}
	per := float64(b.N * completions * tokens / 1000)
	b.ReportMetric(float64(heap)/per, "bytes/1k-tokens")
	b.ReportMetric(float64(encoded)/per, "encoded-bytes/1k-tokens")
}

func heapAfterGC() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// logAnswer logs, through an outbox as the driver does, a completion of
// id answering tokens words.
func logAnswer(l fleet.Log, id string, tokens int) {
	_ = l.Open(id, fleet.Meta{Owner: "bench"})
	out := New(Spec{ID: id, Log: l, Send: func(*completionv1.CompletionEvent) error { return nil }}).out
	out.event(0, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{
		CompletionId: id, Route: "sim", Model: "sim-1", Provider: "sim"}}})
	var text strings.Builder
	for i := range tokens {
		word := fmt.Sprintf(" tok%d", i%10)
		text.WriteString(word)
		_ = out.output(1, 1, completionv1.DeltaKind_DELTA_KIND_TEXT, word)
	}
	out.event(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Usage{Usage: &completionv1.Usage{InputTokens: 12, OutputTokens: int64(tokens)}}})
	out.event(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{
		Reason: completionv1.TransitionReason_TRANSITION_REASON_COMPLETED, Terminal: true}}})
	out.end(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{
		Reason:  completionv1.TransitionReason_TRANSITION_REASON_COMPLETED,
		Message: &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{convert.TextBlock(text.String())}},
	}}}, nil)
}
