package fleet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// terminalEvent is a terminal COMPLETED transition numbered seq.
func terminalEvent(seq uint64) *completionv1.CompletionEvent {
	return &completionv1.CompletionEvent{Seq: seq, Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{
		Reason: completionv1.TransitionReason_TRANSITION_REASON_COMPLETED, Terminal: true}}}
}

// TestEventLogEndWritesTheEventsBeforeTheResult: End appends the events
// before the result (a finishing step's: a tool call, the terminal
// transition) ahead of it, in seq order, and ends the log with the
// status; every implementation reads them back as one log.
func TestEventLogEndWritesTheEventsBeforeTheResult(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log) {
		l := newLog(config.EventLogLimits{}, time.Now)
		open(t, l, "c", "k")
		appendRun(l, "c", 3, false)
		status := []byte{8, 10}
		if err := l.End("c", []*completionv1.CompletionEvent{logEvent(4, false), terminalEvent(5)}, logEvent(6, true), status); err != nil {
			t.Fatal(err)
		}
		p, err := l.Read("c", 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3, 4, 5, 6}) || !p.Ended || string(p.Status) != string(status) {
			t.Fatalf("log %v ended %t status %v", testkit.Seqs(p.Events), p.Ended, p.Status)
		}
		if !p.Events[4].GetTransition().GetTerminal() || p.Events[5].GetResult() == nil {
			t.Fatalf("the end's events read back as %v", p.Events[3:])
		}
	})
}

// TestRedisLogEndIsOneWrite: the end's events and the result are one
// write of lua/commit.lua, which appends all of them or none. An end
// refused (its first seq not above the log's last: order; a lease another
// replica took: fenced) leaves the log as it was, live, with no terminal
// transition in it; an end written is counted exactly in the bound.
func TestRedisLogEndIsOneWrite(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	ls := NewRedisLeases(rdb, time.Minute)
	end := func(first uint64) []*completionv1.CompletionEvent {
		return []*completionv1.CompletionEvent{logEvent(first, false), terminalEvent(first + 1)}
	}
	for _, tc := range []struct {
		name   string
		before func(l *RedisLog, id string) // after events 1..3
		first  uint64                       // the end's first seq
		want   string
	}{
		{"written", func(*RedisLog, string) {}, 4, "ok"},
		{"order", func(*RedisLog, string) {}, 3, "order"},
		{"fenced", func(l *RedisLog, id string) {
			a, err := ls.Acquire(ctx, id, "A")
			if err != nil {
				t.Fatal(err)
			}
			l.Fence(id, a)
			if err := rdb.Del(ctx, LeaseKey(id)).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Acquire(ctx, id, "B"); err != nil {
				t.Fatal(err)
			}
		}, 4, "fenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewRedisLog(rdb, config.EventLogLimits{}, time.Now)
			t.Cleanup(l.Close)
			id := "end-" + tc.name
			open(t, l, id, "k")
			appendRun(l, id, 3, false)
			tc.before(l, id)
			status := []byte("a status")
			res, err := l.add(id, end(tc.first), logEvent(tc.first+2, true), status, true)
			if err != nil || res != tc.want {
				t.Fatalf("end: %s %v, want %s", res, err, tc.want)
			}
			p, err := l.Read(id, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "ok" {
				if !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3}) || p.Ended {
					t.Fatalf("a refused end left %v, ended %t: want the log as it was", testkit.Seqs(p.Events), p.Ended)
				}
				return
			}
			if !slices.Equal(testkit.Seqs(p.Events), []uint64{1, 2, 3, 4, 5, 6}) || !p.Ended {
				t.Fatalf("log %v ended %t", testkit.Seqs(p.Events), p.Ended)
			}
			var exact int64
			for _, e := range rdb.XRange(ctx, redisLogKey(id), "-", "+").Val() {
				exact += int64(len(e.Values["e"].(string)))
			}
			if size, _ := rdb.HGet(ctx, redisLogSizes, id).Int64(); size != exact+int64(len(status)) {
				t.Fatalf("the ended log is counted %d bytes, want its events' and status's %d", size, exact+int64(len(status)))
			}
		})
	}
}

// TestReshareBatchesEndWithTheEnd: a log published again from a
// replica's copy (appendAll: Redis lost it) goes redisReshareBatch events
// per call, and the last call carries the last of them: the end goes with
// the events before it, as End writes them, so that a replica that dies
// between two calls leaves no terminal transition without its result.
func TestReshareBatchesEndWithTheEnd(t *testing.T) {
	for _, n := range []int{1, 2, redisReshareBatch - 1, redisReshareBatch, redisReshareBatch + 1, 2*redisReshareBatch + 5} {
		writes := make([]commitWrite, n)
		for i := range writes {
			writes[i].seq = uint64(i + 1)
		}
		var sizes []int
		var seqs []uint64
		for _, b := range reshareBatches(writes) {
			sizes = append(sizes, len(b))
			for _, w := range b {
				seqs = append(seqs, w.seq)
			}
		}
		if last := sizes[len(sizes)-1]; last != min(n, redisReshareBatch) || slices.ContainsFunc(sizes, func(s int) bool { return s > redisReshareBatch || s == 0 }) {
			t.Errorf("%d writes in calls of %v, want the last of %d", n, sizes, min(n, redisReshareBatch))
		}
		if len(seqs) != n || !slices.IsSorted(seqs) || seqs[0] != 1 {
			t.Errorf("%d writes split into %v", n, seqs)
		}
	}
}
