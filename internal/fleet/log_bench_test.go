package fleet

import (
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// BenchmarkEventLogAppend is the in-memory log's cost per text delta
// appended to a live completion that nobody follows.
func BenchmarkEventLogAppend(b *testing.B) {
	l := NewMemLog(config.EventLogLimits{MaxCompletions: 1, MaxEvents: 1 << 20, MaxBytes: 1 << 40}, time.Now)
	_ = l.Open("cmpl_bench", Meta{Owner: "bench"})
	ev := &completionv1.CompletionEvent{Seq: 1, Attempt: 1, Turn: 1,
		Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Kind: completionv1.DeltaKind_DELTA_KIND_TEXT, Text: " token"}}}
	b.ReportAllocs()
	for b.Loop() {
		ev.Seq++
		l.Append("cmpl_bench", ev)
	}
}
