package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// TestRedisLogAccountingAfterDrops: the logs that the bounds evict and
// the sweep expires are dropped by their own script after the one that
// chose them, and what is left is counted exactly: the sets hold the logs
// kept, the bytes add up, and no key of a dropped log remains; the drops
// load their script when Redis does not have it.
func TestRedisLogAccountingAfterDrops(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	// No script cached: the first drops find NOSCRIPT and load theirs.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1000, 0)}
	l := NewRedisLog(rdb, config.EventLogLimits{MaxCompletions: 4, MaxBytes: 200, Retention: time.Minute}, clk.now)
	t.Cleanup(l.Close)
	l.LiveTTL = 10 * time.Second

	for i := range 6 { // six ended logs: two evicted by the bound on completions, then by bytes
		id := fmt.Sprintf("ended%d", i)
		open(t, l, id, "k")
		appendRun(l, id, 3, true)
		clk.add(time.Millisecond)
	}
	open(t, l, "lapsed", "k") // its replica dies: no event for LiveTTL
	appendRun(l, "lapsed", 1, false)
	clk.add(11 * time.Second)
	open(t, l, "live", "k")
	appendRun(l, "live", 2, false)
	l.Expire(clk.now())

	live := rdb.ZRange(ctx, redisLogsLive, 0, -1).Val()
	ended := rdb.ZRange(ctx, redisLogsEnded, 0, -1).Val()
	kept := append(slices.Clone(live), ended...)
	if !slices.Equal(live, []string{"live"}) || len(kept) > 4 {
		t.Fatalf("live %v, ended %v: want only live among the live, at most 4 in all", live, ended)
	}
	sizes := rdb.HGetAll(ctx, redisLogSizes).Val()
	var sum int64
	for id, v := range sizes {
		if !slices.Contains(kept, id) {
			t.Errorf("the size of %s is still counted", id)
		}
		var n int64
		fmt.Sscan(v, &n)
		sum += n
	}
	if total, _ := rdb.Get(ctx, redisLogBytes).Int64(); total != sum || total > 200 {
		t.Errorf("total %d, sizes add up to %d (bound 200)", total, sum)
	}
	for _, id := range []string{"ended0", "ended1", "lapsed"} {
		if n := rdb.Exists(ctx, redisLogKey(id), redisMetaKey(id)).Val(); n != 0 || slices.Contains(kept, id) {
			t.Errorf("%s: %d keys left, kept %v; want it dropped", id, n, kept)
		}
	}

	// Retention: the ended logs go, their keys too; the live log that
	// goes on stays.
	clk.add(time.Minute)
	l.Append("live", logEvent(3, false))
	l.Expire(clk.now())
	if n := rdb.ZCard(ctx, redisLogsEnded).Val(); n != 0 {
		t.Errorf("%d ended logs kept past retention", n)
	}
	var left []string
	iter := rdb.Scan(ctx, 0, "completiond:meta:*", 0).Iterator()
	for iter.Next(ctx) {
		left = append(left, iter.Val())
	}
	if !slices.Equal(left, []string{redisMetaKey("live")}) {
		t.Errorf("meta keys left %v, want the live log's only", left)
	}
}

// adder appends an event of seq to the log of id in l, answering what
// lua/commit.lua replied; it fails the test when Redis does not answer.
func adder(t *testing.T, l *RedisLog, id string) func(seq uint64) string {
	return func(seq uint64) string {
		t.Helper()
		res, err := l.add(id, nil, logEvent(seq, false), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
}

// TestRedisLogRenewsAtItsFirstWriteThenEverySixteenth: a writer renews a
// live log (its place in the live set, and the keys' TTL) at its first
// write and then once LiveTTL/16 has passed, not at every event; between
// renewals an event goes only to a log that is there, so a log dropped
// meanwhile is missing, and the next write checks it again.
func TestRedisLogRenewsAtItsFirstWriteThenEverySixteenth(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	clk := &clock{t: time.Unix(1000, 0)}
	l := NewRedisLog(rdb, config.EventLogLimits{}, clk.now)
	t.Cleanup(l.Close)
	l.LiveTTL = 16 * time.Second
	open(t, l, "c", "k")
	lapse := func() float64 { return rdb.ZScore(ctx, redisLogsLive, "c").Val() }
	add := adder(t, l, "c")
	if res := add(1); res != "ok" {
		t.Fatalf("first append: %s", res)
	}
	first := lapse()
	if want := float64(ms(clk.now()) + 16_000); first != want {
		t.Fatalf("lapse %v after the first write, want %v", first, want)
	}
	clk.add(999 * time.Millisecond)
	if res := add(2); res != "ok" || lapse() != first {
		t.Fatalf("append within LiveTTL/16: %s, lapse %v; want ok and no renewal (%v)", res, lapse(), first)
	}
	clk.add(time.Millisecond)
	if res := add(3); res != "ok" || lapse() != first+1000 {
		t.Fatalf("append at LiveTTL/16: %s, lapse %v; want ok and renewed to %v", res, lapse(), first+1000)
	}
	if err := l.dropAll(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	if res := add(4); res != "missing" {
		t.Fatalf("append to a dropped log between renewals: %s, want missing", res)
	}
	if n := rdb.Exists(ctx, redisLogKey("c")).Val(); n != 0 {
		t.Fatal("the append made a stream for a dropped log")
	}
	if _, ok := l.writing.Load("c"); ok {
		t.Error("a missing log is still counted as renewed: its next write would not check it")
	}
}

// TestRedisLogCountsSizesLate: a writer passes its events' bytes to the
// bound at its log's renewals, at its end, and once sizeEvery of them
// wait, not at every event; the total always equals the sum of the logs'
// sizes, and an ended log is counted exactly.
func TestRedisLogCountsSizesLate(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	clk := &clock{t: time.Unix(1000, 0)}
	each := int64(proto.Size(logEvent(2, false))) // one digit of seq: every delta here is this long
	const completions = 10
	l := NewRedisLog(rdb, config.EventLogLimits{MaxCompletions: completions, MaxBytes: 3 * each * 16 * completions}, clk.now)
	t.Cleanup(l.Close)
	l.LiveTTL = 16 * time.Second
	if l.sizeEvery() != 3*each {
		t.Fatalf("sizeEvery %d, want %d", l.sizeEvery(), 3*each)
	}
	open(t, l, "c", "k")
	counted := func() int64 {
		t.Helper()
		size, _ := rdb.HGet(ctx, redisLogSizes, "c").Int64()
		total, _ := rdb.Get(ctx, redisLogBytes).Int64()
		if total != size {
			t.Fatalf("the total is %d, the only log's size %d", total, size)
		}
		return size
	}
	for _, step := range []struct {
		seq     uint64
		advance time.Duration
		want    int64 // events counted
	}{
		{1, 0, 1},                      // the first write renews: counted
		{2, 0, 1},                      // one waits
		{3, 0, 1},                      // two wait
		{4, 0, 4},                      // three: sizeEvery
		{5, 0, 4},                      // one waits
		{6, time.Second, 6},            // a renewal (LiveTTL/16) counts what waits
		{7, 500 * time.Millisecond, 6}, // no renewal
	} {
		clk.add(step.advance)
		if res, err := l.add("c", nil, logEvent(step.seq, false), nil, false); res != "ok" || err != nil {
			t.Fatalf("append %d: %s %v", step.seq, res, err)
		}
		if got := counted(); got != step.want*each {
			t.Fatalf("after append %d: %d bytes counted, want %d events' (%d)", step.seq, got, step.want, step.want*each)
		}
	}
	status := []byte("a status")
	if res, err := l.add("c", nil, logEvent(8, true), status, true); res != "ok" || err != nil {
		t.Fatalf("end: %s %v", res, err)
	}
	var exact int64
	for _, e := range rdb.XRange(ctx, redisLogKey("c"), "-", "+").Val() {
		exact += int64(len(e.Values["e"].(string)))
	}
	if got := counted(); got != exact+int64(len(status)) {
		t.Fatalf("the ended log is counted %d bytes, want its events' and status's %d", got, exact+int64(len(status)))
	}
	if _, ok := l.writing.Load("c"); ok {
		t.Error("the writer of an ended log is kept")
	}
}

// TestRedisLogReadFailsWhenItsReadsFail: the Read that marks a log
// followed for the first time gets no value back for the mark (a Nil
// reply, first in its transaction); a failure of its reads behind it is
// still a failure, not an empty page.
func TestRedisLogReadFailsWhenItsReadsFail(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	open(t, l, "c", "k")
	if err := rdb.Set(ctx, redisLogKey("c"), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read("c", 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a Read whose XRANGE failed: %v, want ErrUnavailable", err)
	}
}

// TestRedisLogEvictsAheadAtTheBound: an open that finds the Redis log full
// evicts the oldest ended logs a 64th of the bound at a time, so that the
// next opens find room without evicting (no drop call, no second round
// trip before the open returns) until the log is full again.
func TestRedisLogEvictsAheadAtTheBound(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	const bound = 128 // evicts 2 at a time
	l := NewRedisLog(rdb, config.EventLogLimits{MaxCompletions: bound}, nil)
	t.Cleanup(l.Close)
	endedLogs(t, l, bound)
	kept := func(i int) bool { return rdb.Exists(context.Background(), redisMetaKey(fmt.Sprint("e", i))).Val() == 1 }
	for _, step := range []struct {
		open       string
		gone, kept []int // ended logs, by their order of ending
	}{
		{open: "n1", gone: []int{0, 1}, kept: []int{2}}, // full: the two oldest go
		{open: "n2", kept: []int{2}},                    // room for one: nothing goes
		{open: "n3", gone: []int{2, 3}, kept: []int{4}}, // full again
	} {
		open(t, l, step.open, "k")
		for _, i := range step.gone {
			if kept(i) {
				t.Errorf("after %s's open, e%d is kept, want it evicted", step.open, i)
			}
		}
		for _, i := range step.kept {
			if !kept(i) {
				t.Errorf("after %s's open, e%d is gone, want it kept", step.open, i)
			}
		}
	}
}

// TestRedisLogOpensAtOnceEvictDifferentLogs: the logs an open evicts at
// the bound leave its counts in the same script, before anyone drops
// them, so that two opens before either's drop (two replicas at once)
// evict two logs, not the same one twice; and the bound of bytes no longer
// counts them.
func TestRedisLogOpensAtOnceEvictDifferentLogs(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{MaxCompletions: 4}, nil)
	t.Cleanup(l.Close)
	endedLogs(t, l, 4)
	size := func(id string) int64 { n, _ := rdb.HGet(ctx, redisLogSizes, id).Int64(); return n }
	kept := size("e2") + size("e3")
	openAlone := func(id string) []string { // what open.lua answers, its drop left undone
		t.Helper()
		res, err := oneRedis.scripts.open.Run(ctx, rdb, id, id, "{}", ms(time.Now()), 4, time.Minute.Milliseconds(), "", 0, 0, "", 1).StringSlice()
		if err != nil || len(res) < 3 || res[0] != "ok" {
			t.Fatalf("open %s: %v %v", id, res, err)
		}
		return res[3:]
	}
	if got := openAlone("n1"); !slices.Equal(got, []string{"e0"}) {
		t.Fatalf("the first open evicted %v, want [e0]", got)
	}
	if got := openAlone("n2"); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("the second open evicted %v, want [e1]: not e0 again", got)
	}
	if n := rdb.ZCard(ctx, redisLogsEnded).Val(); n != 2 {
		t.Errorf("%d ended logs counted, want 2", n)
	}
	if got, _ := rdb.Get(ctx, redisLogBytes).Int64(); got != kept {
		t.Errorf("bytes counted %d, want %d: the evicted logs' sizes out", got, kept)
	}
	// Their drop deletes their keys and takes nothing more off the counts.
	if err := l.dropAll(ctx, []string{"e0", "e1"}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, redisLogKey("e0"), redisMetaKey("e1")).Val(); n != 0 {
		t.Errorf("%d keys of the evicted logs left after their drop", n)
	}
	if got, _ := rdb.Get(ctx, redisLogBytes).Int64(); got != kept {
		t.Errorf("bytes counted %d after the drop, want %d", got, kept)
	}
}

// TestRedisLogFlushesAtOnceEvictDifferentLogs: the logs a flush evicts for
// the bound of bytes leave its counts in the same script, so that the next
// flush, before any drop (a flush beside it, another replica's), evicts
// the next oldest, not the same one again.
func TestRedisLogFlushesAtOnceEvictDifferentLogs(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	fill := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(fill.Close)
	endedLogs(t, fill, 4)
	open(t, fill, "w", "k")
	total, _ := rdb.Get(ctx, redisLogBytes).Int64()
	l := NewRedisLog(rdb, config.EventLogLimits{MaxBytes: total}, nil) // full
	t.Cleanup(l.Close)
	each, _ := rdb.HGet(ctx, redisLogSizes, "e0").Int64() // the four are alike
	var evicted []string
	for seq := range uint64(2) {
		size := each // past the bound by one log: one goes
		_, ev, err := l.commitWrites(ctx, []commitWrite{{id: "w", seq: seq + 1, event: []byte("x"), renew: true, size: size}})
		if err != nil {
			t.Fatal(err)
		}
		evicted = append(evicted, ev...)
	}
	if !slices.Equal(evicted, []string{"e0", "e1"}) {
		t.Fatalf("two flushes evicted %v, want [e0 e1]: not e0 twice", evicted)
	}
	if got, _ := rdb.Get(ctx, redisLogBytes).Int64(); got > total {
		t.Errorf("bytes counted %d, past the bound %d after the evictions", got, total)
	}
}

// endedLogs opens n logs in l, e0 to e(n-1) in that order, and ends each
// after two events: the oldest ended log is e0.
func endedLogs(t *testing.T, l Log, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprint("e", i)
		open(t, l, id, "k")
		appendRun(l, id, 2, true)
	}
}

// TestLogWriterFirstOutput: a writer's urgent writes are the first output
// (a delta or a tool call) of each attempt and turn — what a caller waits
// for as its time to first token, after the start, a retry or a Session's
// next turn — and no other event.
func TestLogWriterFirstOutput(t *testing.T) {
	delta := func(attempt, turn int32) *completionv1.CompletionEvent {
		return &completionv1.CompletionEvent{Attempt: attempt, Turn: turn, Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Text: "x"}}}
	}
	tool := func(attempt, turn int32) *completionv1.CompletionEvent {
		return &completionv1.CompletionEvent{Attempt: attempt, Turn: turn, Event: &completionv1.CompletionEvent_ToolCall{ToolCall: &completionv1.ToolCall{}}}
	}
	other := func(attempt, turn int32) *completionv1.CompletionEvent {
		return &completionv1.CompletionEvent{Attempt: attempt, Turn: turn, Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{}}}
	}
	steps := []struct {
		name   string
		ev     *completionv1.CompletionEvent
		urgent bool
	}{
		{"started", &completionv1.CompletionEvent{Turn: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{}}}, false},
		{"transition before any output", other(0, 1), false},
		{"first token of attempt 0", delta(0, 1), true},
		{"second token", delta(0, 1), false},
		{"tool call after tokens", tool(0, 1), false},
		{"retry's transition", other(1, 1), false},
		{"first token of attempt 1", delta(1, 1), true},
		{"its second", delta(1, 1), false},
		{"next turn's first output, a tool call", tool(1, 2), true},
		{"its token", delta(1, 2), false},
		{"attempt 0 of turn 3", delta(0, 3), true},
		{"usage", &completionv1.CompletionEvent{Attempt: 0, Turn: 3, Event: &completionv1.CompletionEvent_Usage{Usage: &completionv1.Usage{}}}, false},
	}
	var lw logWriter
	for _, s := range steps {
		if got := lw.firstOutput(s.ev); got != s.urgent {
			t.Errorf("%s: urgent %v, want %v", s.name, got, s.urgent)
		}
	}
}
