package fleet

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// TestPairLogRestoresALogRedisLostWhole: a completion ends through A,
// then Redis comes back empty (a restart without persistence; a replica
// promoted without the log). Once A finds the new process
// (redisReplaced), the log is back whole and ended from A's memory, in
// its place among the ended logs (scored by its end) for what is left of
// its retention — unless the bounds would have it gone: its retention
// passed, or the bounds are full of logs that ended after it (it would be
// the first evicted); an older ended log makes room for it. One another
// replica took over meanwhile is left alone.
func TestPairLogRestoresALogRedisLostWhole(t *testing.T) {
	const retention = time.Minute
	for _, tc := range []struct {
		name string
		// keysOnly: Redis lost the log's own keys only, its place in the
		// bounds' counts left behind (not a restart: FLUSHALL otherwise).
		keysOnly  bool
		meantime  func(t *testing.T, rdb redis.UniversalClient, clk *clock, leases Leases)
		restored  bool
		wantKept  []string // the other logs Redis keeps after
		wantEnded float64  // the ended log's score when restored: its end's ms × 1000
	}{
		{name: "restored", restored: true},
		{name: "retention passed", meantime: func(_ *testing.T, _ redis.UniversalClient, clk *clock, _ Leases) {
			clk.add(retention)
		}},
		{name: "taken over meanwhile", meantime: func(t *testing.T, _ redis.UniversalClient, _ *clock, leases Leases) {
			if _, err := leases.Acquire(t.Context(), "c1", "B"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "the bounds full of later logs", meantime: func(t *testing.T, rdb redis.UniversalClient, clk *clock, _ Leases) {
			endLogs(t, rdb, clk.now(), "later1", "later2")
		}, wantKept: []string{"later1", "later2"}},
		{name: "an older log makes room", meantime: func(t *testing.T, rdb redis.UniversalClient, clk *clock, _ Leases) {
			endLogs(t, rdb, clk.now().Add(-20*time.Second), "older") // 10s before c1's end
			endLogs(t, rdb, clk.now(), "later")
		}, restored: true, wantKept: []string{"later"}},
		{name: "its keys lost, its counts left", keysOnly: true, meantime: func(t *testing.T, rdb redis.UniversalClient, clk *clock, _ Leases) {
			endLogs(t, rdb, clk.now(), "later") // the bounds full, counting c1 still
		}, restored: true, wantKept: []string{"later"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := testkit.ServerRedisClient(t, redistest.Start(t))
			clk := &clock{t: time.Unix(1_000_000, 0)}
			limits := config.EventLogLimits{MaxCompletions: 2, Retention: retention}
			f, _ := newPairLimits(t, rdb, limits, clk.now)
			leases := NewRedisLeases(rdb, 2*time.Second)
			l, leaseErr, err := OpenLeased(t.Context(), f, leases, "c1", "A", Meta{Replica: "A", Request: []byte("request")})
			if err != nil || leaseErr != nil {
				t.Fatal(err, leaseErr)
			}
			f.Fence("c1", *l)
			appendRun(f, "c1", 5, true)
			ended := clk.now()
			clk.add(10 * time.Second)
			var lost error
			if ks := keyspaceOf(rdb); tc.keysOnly {
				lost = rdb.Del(t.Context(), ks.meta("c1"), ks.log("c1")).Err()
			} else {
				lost = rdb.FlushAll(t.Context()).Err() // Redis back empty
			}
			if lost != nil {
				t.Fatal(lost)
			}
			if tc.meantime != nil {
				tc.meantime(t, rdb, clk, leases)
			}
			if !f.redisReplaced() {
				t.Fatal("the restore failed")
			}
			other := NewRedisLog(rdb, limits, clk.now)
			t.Cleanup(other.Close)
			seqs, isEnded, err := readWhole(other, "c1")
			if !tc.restored {
				if err == nil {
					t.Fatalf("restored: %v (ended %t)", seqs, isEnded)
				}
			} else {
				if err != nil || !slices.Equal(seqs, seqsTo(5)) || !isEnded {
					t.Fatalf("the log after: %v ended %t (%v); want seqs 1-5, ended", seqs, isEnded, err)
				}
				ks := keyspaceOf(rdb)
				if score := rdb.ZScore(t.Context(), redisLogsEnded, "c1").Val(); score != float64(ended.UnixMilli()*1000) {
					t.Errorf("restored among the ended logs at %v, want its end's time %v", score, ended.UnixMilli()*1000)
				}
				if ttl := rdb.PTTL(t.Context(), ks.meta("c1")).Val(); ttl > retention-10*time.Second || ttl < retention-20*time.Second { // 50s, less the test's own time
					t.Errorf("restored for %v, want what is left of its retention (50s)", ttl)
				}
				if p, err := other.Read("c1", 4); err != nil || !p.Ended || p.Meta.Request != nil || p.Meta.Replica != "A" {
					t.Errorf("the restored log's end and meta: %+v %v", p, err)
				}
				var sum int64
				for _, v := range rdb.HVals(t.Context(), redisLogSizes).Val() {
					n, _ := strconv.ParseInt(v, 10, 64)
					sum += n
				}
				if got, _ := rdb.Get(t.Context(), redisLogBytes).Int64(); got == 0 || got != sum {
					t.Errorf("the bound of bytes counts %d, the logs' sizes sum to %d", got, sum)
				}
			}
			for _, id := range tc.wantKept {
				if _, _, err := readWhole(other, id); err != nil {
					t.Errorf("%s evicted: %v", id, err)
				}
			}
			kept := rdb.ZRange(t.Context(), redisLogsEnded, 0, -1).Val()
			want := slices.Clone(tc.wantKept)
			if tc.restored {
				want = append([]string{"c1"}, want...)
			}
			if !slices.Equal(kept, want) {
				t.Errorf("the ended logs kept, oldest first: %v, want %v", kept, want)
			}
		})
	}
}

// endLogs opens and ends, at, the logs of ids in rdb (two events each),
// through a RedisLog of its own.
func endLogs(t *testing.T, rdb redis.UniversalClient, at time.Time, ids ...string) {
	t.Helper()
	l := NewRedisLog(rdb, config.EventLogLimits{MaxCompletions: 2}, func() time.Time { return at })
	defer l.Close()
	for _, id := range ids {
		open(t, l, id, "other")
		appendRun(l, id, 2, true)
	}
}
