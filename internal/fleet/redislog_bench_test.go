package fleet

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// benchEventsPerCompletion is the length of a benchmark completion: 40
// token deltas and the result, as the sim's default answer.
const benchEventsPerCompletion = 41

// runCompletions logs n events as completions of benchEventsPerCompletion
// events, each opened, appended and ended, and returns the time it took.
func runCompletions(b *testing.B, l Log, prefix string, n int) time.Duration {
	b.Helper()
	delta := func(seq uint64) *completionv1.CompletionEvent {
		return &completionv1.CompletionEvent{Seq: seq, Attempt: 1, Turn: 1,
			Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Text: " token"}}}
	}
	result := &completionv1.Result{Route: "sim", Message: &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT,
		Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{
			Text: strings.Repeat(" token", benchEventsPerCompletion-1)}}}}}}
	start := time.Now()
	for c, done := 0, 0; done < n; c++ {
		id := prefix + strconv.Itoa(c)
		if err := l.Open(id, Meta{Owner: "bench"}); err != nil {
			b.Fatal(err)
		}
		for seq := uint64(1); seq < benchEventsPerCompletion && done < n; seq++ {
			l.Append(id, delta(seq))
			done++
		}
		l.End(id, &completionv1.CompletionEvent{Seq: benchEventsPerCompletion, Event: &completionv1.CompletionEvent_Result{Result: result}}, nil)
		done++
	}
	return time.Since(start)
}

// BenchmarkEventLogRedisVsMemory logs the same events in the in-memory
// log and in the Redis log (a redis-server on loopback), in one run, and
// reports the time per event of each and their ratio (redis/mem: the cost
// of an append is one round trip to Redis), then Redis's memory per ended
// completion (INFO memory's used_memory before and after 500 completions,
// divided by 500).
func BenchmarkEventLogRedisVsMemory(b *testing.B) {
	addr := redistest.Start(b)
	rdb := testkit.ServerRedisClient(b, addr)
	mem := NewMemLog(config.EventLogLimits{}, time.Now)
	rl := NewRedisLog(rdb, config.EventLogLimits{}, time.Now)
	defer rl.Close()
	b.ResetTimer()
	memT := runCompletions(b, mem, "m", b.N)
	redisT := runCompletions(b, rl, "r", b.N)
	b.StopTimer()
	memNs, redisNs := float64(memT.Nanoseconds())/float64(b.N), float64(redisT.Nanoseconds())/float64(b.N)
	b.ReportMetric(memNs, "mem-ns/event")
	b.ReportMetric(redisNs, "redis-ns/event")
	b.ReportMetric(redisNs/memNs, "redis/mem")

	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	used := func() int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("no used_memory in INFO memory")
		return 0
	}
	const completions = 500
	before := used()
	runCompletions(b, rl, "mem", completions*benchEventsPerCompletion)
	after := used()
	b.ReportMetric(float64(after-before)/completions, "redis-B/completion")
	if testing.Verbose() {
		fmt.Printf("redis used_memory %d → %d over %d completions of %d events\n", before, after, completions, benchEventsPerCompletion)
	}
}
