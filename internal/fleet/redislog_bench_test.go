package fleet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		l.End(id, nil, &completionv1.CompletionEvent{Seq: benchEventsPerCompletion, Event: &completionv1.CompletionEvent_Result{Result: result}}, nil)
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

// BenchmarkGroupCommit appends events to the Redis log (a redis-server on
// loopback) from many completions at once, each writer appending its next
// event as soon as the last is acknowledged — the most one replica can ask
// of Redis — and reports what the group commit makes of it: events per
// second, Redis script calls and Redis CPU per 1 000 events, events per
// flush, and the time an Append waits (p50, p99). At writers=1 every flush
// carries one event: the cost per event without group commit.
func BenchmarkGroupCommit(b *testing.B) {
	for _, writers := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { benchGroupCommit(b, writers) })
	}
}

func benchGroupCommit(b *testing.B, writers int) { benchGroupCommitEvery(b, writers, 0, 0) }

// BenchmarkGroupCommitPaced is the load of a fleet's busy replica: 100 or
// 1 000 completions each appending one event every 20 ms (50 tokens a
// second, a fast model's pace), their phases spread over the period, on
// one RedisLog against a redis-server on loopback. It reports what the
// group commit costs there: the added latency of an event (its Append's
// wait, p50 and p99), the script calls and the Redis CPU per 1 000 events,
// and the CPU this process spent per 1 000 events (the writers' pacing
// included). Each writer holds its completion's lease, and its appends are
// fenced by it, as a fleet replica's are. b.N is the events in all:
// -benchtime 250000x paces 1 000 writers for 5 s.
func BenchmarkGroupCommitPaced(b *testing.B) {
	for _, writers := range []int{100, 1000} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { benchGroupCommitEvery(b, writers, 20*time.Millisecond, 0) })
	}
}

// BenchmarkGroupCommitAnswers is BenchmarkGroupCommitPaced with answers of
// 50 events, one completion after another on each writer, as a replica's
// streams come and go: each opens its log with its first event and its
// lease in one script and has its request join the log (a resumable
// Stream's open, OpenAhead), appends fenced, and ends, which gives its
// lease up; the Redis log keeps twice as many logs as there are writers,
// so that once it is full each open evicts the oldest ended one. Its script calls
// per 1 000 events are a replica's at that pace: the flushes and each
// completion's own calls.
func BenchmarkGroupCommitAnswers(b *testing.B) {
	for _, writers := range []int{100, 1000} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { benchGroupCommitEvery(b, writers, 20*time.Millisecond, 50) })
	}
}

// BenchmarkGroupCommitAnswersCluster is BenchmarkGroupCommitAnswers with
// 1 000 writers on a Redis Cluster of three primaries on this machine: a
// flush makes one script call per shard it writes (ClusterShards), so its
// script calls per 1 000 events, summed over the nodes, say what the
// shards cost in batching.
func BenchmarkGroupCommitAnswersCluster(b *testing.B) {
	benchGroupCommitOn(b, clusterBench(b), 1000, 20*time.Millisecond, 50)
}

// benchRedis is the Redis a benchmark runs on, and its script stats (all
// its nodes' together).
type benchRedis struct {
	rdb   redis.UniversalClient
	stats func(b *testing.B) scriptStats
}

// oneRedisBench is a redis-server of its own.
func oneRedisBench(b *testing.B) benchRedis {
	rdb := testkit.ServerRedisClient(b, redistest.Start(b))
	return benchRedis{rdb, func(b *testing.B) scriptStats { return redisStats(b, rdb) }}
}

// clusterBench is a Redis Cluster of three of its own.
func clusterBench(b *testing.B) benchRedis {
	rdb := testkit.ServerClusterClient(b, redistest.Addrs(redistest.NewCluster(b, 3)))
	return benchRedis{rdb, func(b *testing.B) scriptStats {
		var mu sync.Mutex
		var sum scriptStats
		err := rdb.ForEachMaster(context.Background(), func(_ context.Context, c *redis.Client) error {
			st := redisStats(b, c)
			mu.Lock()
			sum.calls, sum.run, sum.cpu = sum.calls+st.calls, sum.run+st.run, sum.cpu+st.cpu
			mu.Unlock()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return sum
	}}
}

// benchGroupCommitEvery runs writers completions on one RedisLog, each
// appending b.N/writers events: every this long (their phases spread over
// it), or each as soon as the last is acknowledged when every is 0. With
// answer events per completion (not 0), each writer runs one completion
// after another (benchAnswerEvent), in a log of 2 × writers logs.
func benchGroupCommitEvery(b *testing.B, writers int, every time.Duration, answer int) {
	benchGroupCommitOn(b, oneRedisBench(b), writers, every, answer)
}

// benchGroupCommitOn is benchGroupCommitEvery on r.
func benchGroupCommitOn(b *testing.B, r benchRedis, writers int, every time.Duration, answer int) {
	rdb := r.rdb
	limits := config.EventLogLimits{MaxCompletions: writers + 10}
	if answer > 0 {
		limits.MaxCompletions = 2 * writers // room for the live ones, and as many ended
	}
	l := NewRedisLog(rdb, limits, nil)
	defer l.Close()
	if answer == 0 { // with answers, each writer opens its own as it goes
		for w := range writers {
			id := fmt.Sprint("w", w)
			if every == 0 {
				if err := l.Open(id, Meta{Owner: "bench"}); err != nil {
					b.Fatal(err)
				}
				continue
			}
			// Paced, each writer holds its completion's lease and its writes
			// are fenced, as a fleet replica's resumable completions are.
			token, err := l.openLeased(id, Meta{Owner: "bench"}, "bench", time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			l.Fence(id, Lease{ID: id, Token: token, Replica: "bench"})
		}
	}
	before := r.stats(b)
	perWriter := max(1, b.N/writers)
	waits := make([][]time.Duration, writers)
	var wg sync.WaitGroup
	b.ResetTimer()
	self0 := processCPU(b)
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprint("w", w)
			waits[w] = make([]time.Duration, 0, perWriter)
			next := start.Add(every * time.Duration(w) / time.Duration(writers))
			for i := range perWriter {
				time.Sleep(time.Until(next)) // at once when every is 0
				t := time.Now()
				var err error
				var then func()
				if answer > 0 {
					// The writers' answers begin at different events, as
					// streams come and go, not all opens at once: writer
					// w's first is cut short by w mod (answer-1) events.
					p := i + w%(answer-1)
					e := p % answer
					if p < answer {
						e = i
					}
					then, err = benchAnswerEvent(l, fmt.Sprint(id, "-", p/answer), e, p%answer == answer-1 || i == perWriter-1)
				} else {
					err = l.Append(id, logEvent(uint64(i)+1, false))
				}
				if err != nil {
					b.Error(err)
					return
				}
				waits[w] = append(waits[w], time.Since(t))
				if then != nil {
					then()
				}
				next = next.Add(every)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	self1 := processCPU(b)
	b.StopTimer()
	after := r.stats(b)
	calls := float64(after.calls - before.calls)
	events := float64(perWriter * writers)
	all := slices.Concat(waits...)
	slices.Sort(all)
	b.ReportMetric(events/elapsed.Seconds(), "events/s")
	b.ReportMetric(calls*1000/events, "redis-calls/1k-events")
	b.ReportMetric(float64((after.cpu-before.cpu).Microseconds())/events, "redis-cpu-ms/1k-events")
	b.ReportMetric(float64((after.run-before.run).Microseconds())/calls, "redis-µs/flush")
	b.ReportMetric(float64((self1-self0).Microseconds())/events, "process-cpu-ms/1k-events")
	b.ReportMetric(events/calls, "events/flush")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "append-p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "append-p99-µs")
}

// benchAnswerEvent writes event i (from 0) of completion id, its last when
// last: the first opens its log with it under a lease, as a resumable
// Stream's open does (what is left, the request's join, is then), the
// last ends it, and the others are appended.
func benchAnswerEvent(l *RedisLog, id string, i int, last bool) (then func(), err error) {
	seq := uint64(i) + 1
	switch {
	case i == 0:
		meta := Meta{Owner: "bench", Replica: "bench", Request: []byte("the request")}
		token, _, err := l.openFirst(id, meta, "bench", time.Minute, logEvent(seq, false))
		if err != nil {
			return nil, err
		}
		l.Fence(id, Lease{ID: id, Token: token, Replica: "bench"})
		return func() { l.joinRequest(id) }, nil
	case last:
		err = l.End(id, nil, logEvent(seq, true), nil)
		l.Unfence(id)
		return nil, err
	default:
		return nil, l.Append(id, logEvent(seq, false))
	}
}

// processCPU is the CPU this process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scriptStats are the script calls (EVALSHA and EVAL) Redis has served,
// the time it spent running them, and the CPU it has used.
type scriptStats struct {
	calls int
	run   time.Duration
	cpu   time.Duration
}

// redisStats are Redis's scriptStats now.
func redisStats(b *testing.B, rdb *redis.Client) scriptStats {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return parseRedisStats(info)
}

// parseRedisStats reads, in the text of INFO, the calls of EVALSHA and
// EVAL and their usec (commandstats) and the CPU Redis used (cpu:
// used_cpu_sys + used_cpu_user), each 0 when its section is not there.
func parseRedisStats(info string) scriptStats {
	var st scriptStats
	var secs float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if v, ok := strings.CutPrefix(line, cmd); ok {
				for _, f := range strings.Split(v, ",") {
					var n int64
					if c, ok := strings.CutPrefix(f, "calls="); ok {
						fmt.Sscan(c, &n)
						st.calls += int(n)
					} else if u, ok := strings.CutPrefix(f, "usec="); ok {
						fmt.Sscan(u, &n)
						st.run += time.Duration(n) * time.Microsecond
					}
				}
			}
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				var s float64
				fmt.Sscan(v, &s)
				secs += s
			}
		}
	}
	st.cpu = time.Duration(secs * float64(time.Second))
	return st
}
