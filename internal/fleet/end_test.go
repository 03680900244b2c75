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

// TestRedisLogRepublishesAnEndAsOneWrite: a log published again from a
// replica's copy (Redis lost it) ends with one write that carries the
// EndWith events before the result, as End writes them, so that no split
// of the writes into calls (redisReshareBatch, commitMaxBytes) and no
// death between two calls leaves a terminal transition without its
// result; published after a seq Redis kept, the end carries only what
// follows it. The log reads back whole either way.
func TestRedisLogRepublishesAnEndAsOneWrite(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	const n = redisReshareBatch + EndWith + 10
	m := NewMemLog(config.EventLogLimits{}, time.Now)
	open(t, m, "c", "k")
	appendRun(m, "c", n-2, false)
	m.End("c", []*completionv1.CompletionEvent{terminalEvent(n - 1)}, logEvent(n, true), []byte("st"))
	c, ok := m.copyOf("c")
	if !ok {
		t.Fatal("no copy")
	}
	for _, tc := range []struct {
		kept       uint64
		writes     int
		beforeEnds int
	}{
		{0, n - EndWith, EndWith},
		{n - 3, 1, 2},
	} {
		writes := reshareWrites("c", c, tc.kept, "")
		end := writes[len(writes)-1]
		if len(writes) != tc.writes || !end.end || end.beforeN != tc.beforeEnds || end.seq != n || !writes[0].renew {
			t.Fatalf("after seq %d: %d writes, the last end %t with %d before it, seq %d: want %d writes, the last the end with %d",
				tc.kept, len(writes), end.end, end.beforeN, end.seq, tc.writes, tc.beforeEnds)
		}
		for i, w := range writes[:len(writes)-1] {
			if w.seq != tc.kept+uint64(i)+1 || w.end || w.beforeN != 0 {
				t.Fatalf("write %d: seq %d end %t", i, w.seq, w.end)
			}
		}
	}
	l := NewRedisLog(rdb, config.EventLogLimits{}, time.Now)
	t.Cleanup(l.Close)
	open(t, l, "c", "k")
	if err := l.appendAll(ctx, "c", c, 0, ""); err != nil {
		t.Fatal(err)
	}
	seqs, ended, err := readWhole(l, "c")
	if err != nil || !ended {
		t.Fatalf("the log published again: ended %t, %v", ended, err)
	}
	if p, err := l.Read("c", n-1); err != nil || string(p.Status) != "st" {
		t.Fatalf("status %q, %v", p.Status, err)
	}
	if len(seqs) != n || seqs[0] != 1 || !slices.IsSorted(seqs) || seqs[n-1] != n {
		t.Fatalf("the log published again holds %d events, %v…", len(seqs), seqs[:min(5, len(seqs))])
	}
}

// TestCommitChunksCountEvents: a call of lua/commit.lua carries
// commitMaxEvents events at most, an end's write counting the events
// before it too; one write is never split.
func TestCommitChunksCountEvents(t *testing.T) {
	end := commitWrite{end: true, beforeN: EndWith}
	writes := []commitWrite{{}, end, end, end, end, {}}
	var sizes []int
	for _, ch := range commitChunks(writes) {
		n := 0
		for _, w := range ch {
			n += 1 + w.beforeN
		}
		if n > commitMaxEvents && len(ch) > 1 {
			t.Fatalf("a call of %d events", n)
		}
		sizes = append(sizes, len(ch))
	}
	if !slices.Equal(sizes, []int{4, 2}) {
		t.Fatalf("calls of %v writes, want 4 and 2 (1+3×65 events, then 65+1)", sizes)
	}
}
