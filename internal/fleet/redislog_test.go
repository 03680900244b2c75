package fleet

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
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
