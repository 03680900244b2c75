package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// clock is a settable time for the log's retention.
// clock is a test's clock: the log reads it from its own goroutines too
// (RedisLog's sweep), so that it is read and moved under a lock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// add moves the clock on by d.
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func logEvent(seq uint64, result bool) *completionv1.CompletionEvent {
	if result {
		return &completionv1.CompletionEvent{Seq: seq, Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{}}}
	}
	return &completionv1.CompletionEvent{Seq: seq, Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Text: "x"}}}
}

// appendRun appends events 1..n to id, the last being the result, which
// ends the log, when ended.
func appendRun(l Log, id string, n int, ended bool) {
	for i := 1; i <= n; i++ {
		if ended && i == n {
			l.End(id, nil, logEvent(uint64(i), true), nil)
			continue
		}
		l.Append(id, logEvent(uint64(i), false))
	}
}

// open opens the log of id owned by owner, failing the test if it cannot.
func open(t *testing.T, l Log, id, owner string) {
	t.Helper()
	if err := l.Open(id, Meta{Owner: owner}); err != nil {
		t.Fatal(err)
	}
}

// logImpl is one implementation of Log under the contract tests.
type logImpl struct {
	name string
	new  func(t *testing.T, limits config.EventLogLimits, now func() time.Time) Log
}

// logImpls are the implementations every contract test runs against: the
// in-memory log, the Redis log on a real redis-server, and on a real Redis
// Cluster of three with its keys laid out as cluster says (one per test,
// emptied for each log).
func logImpls(t *testing.T, cluster *keyspace) []logImpl {
	var addr string
	var nodes []string
	return []logImpl{
		{"memory", func(_ *testing.T, limits config.EventLogLimits, now func() time.Time) Log {
			return NewMemLog(limits, now)
		}},
		{"redis", func(t *testing.T, limits config.EventLogLimits, now func() time.Time) Log {
			if addr == "" {
				addr = redistest.Start(t)
			}
			rdb := testkit.ServerRedisClient(t, addr)
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			l := NewRedisLog(rdb, limits, now)
			t.Cleanup(l.Close)
			return l
		}},
		{"redis cluster", func(t *testing.T, limits config.EventLogLimits, now func() time.Time) Log {
			if nodes == nil {
				nodes = redistest.Addrs(redistest.NewCluster(t, 3))
			}
			rdb := testkit.ServerClusterClient(t, nodes)
			flushCluster(t, rdb)
			l := newRedisLogIn(cluster, rdb, limits, now)
			t.Cleanup(l.Close)
			return l
		}},
	}
}

// flushCluster empties every primary of rdb's cluster.
func flushCluster(t *testing.T, rdb *redis.ClusterClient) {
	t.Helper()
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return c.FlushAll(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// forEachLog runs f as a subtest per implementation, the cluster's keys
// over ClusterShards shards.
func forEachLog(t *testing.T, f func(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log)) {
	forEachLogIn(t, clusterRedis, f)
}

// forEachLogIn is forEachLog with the cluster's keys laid out as cluster
// says.
func forEachLogIn(t *testing.T, cluster *keyspace, f func(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log)) {
	for _, impl := range logImpls(t, cluster) {
		t.Run(impl.name, func(t *testing.T) {
			f(t, func(limits config.EventLogLimits, now func() time.Time) Log { return impl.new(t, limits, now) })
		})
	}
}

func TestEventLogRead(t *testing.T) {
	forEachLog(t, testEventLogRead)
}

func testEventLogRead(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log) {
	clk := &clock{t: time.Unix(0, 0)}
	l := newLog(config.EventLogLimits{}, clk.now)
	open(t, l, "live", "k1")
	appendRun(l, "live", 3, false)
	open(t, l, "done", "")
	appendRun(l, "done", 4, true)
	tests := []struct {
		name      string
		id        string
		after     uint64
		want      []uint64
		ended     bool
		err       error
		wantOwner string
	}{
		{name: "from the start", id: "live", after: 0, want: []uint64{1, 2, 3}, wantOwner: "k1"},
		{name: "after some", id: "live", after: 2, want: []uint64{3}, wantOwner: "k1"},
		{name: "caught up live", id: "live", after: 3, wantOwner: "k1"},
		{name: "beyond live", id: "live", after: 4, err: ErrOutOfRange},
		{name: "ended", id: "done", after: 1, want: []uint64{2, 3, 4}, ended: true},
		{name: "ended caught up", id: "done", after: 4, ended: true},
		{name: "beyond ended", id: "done", after: 5, err: ErrOutOfRange},
		{name: "unknown", id: "nope", err: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := l.Read(tt.id, tt.after)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if got := testkit.Seqs(p.Events); !slices.Equal(got, tt.want) || p.Ended != tt.ended || p.Meta.Owner != tt.wantOwner {
				t.Fatalf("got %v ended=%v owner=%q, want %v ended=%v owner=%q", got, p.Ended, p.Meta.Owner, tt.want, tt.ended, tt.wantOwner)
			}
		})
	}
}

func TestEventLogFollow(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log) {
		testEventLogFollow(t, newLog(config.EventLogLimits{}, time.Now))
	})
}

func testEventLogFollow(t *testing.T, l Log) {
	open(t, l, "c", "")
	appendRun(l, "c", 1, false)
	p, err := l.Read("c", 1)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.More:
		t.Fatal("More closed before an append")
	default:
	}
	l.End("c", nil, logEvent(2, true), nil)
	select {
	case <-p.More:
	case <-time.After(5 * time.Second):
		t.Fatal("More not closed by the append")
	}
	p, err = l.Read("c", 1)
	if err != nil || !p.Ended || !slices.Equal(testkit.Seqs(p.Events), []uint64{2}) {
		t.Fatalf("after the result: %v %+v", err, p)
	}
}

func TestEventLogBounds(t *testing.T) {
	tests := []struct {
		name     string
		limits   config.EventLogLimits
		run      func(l Log, clk *clock)
		present  []string
		absent   []string
		firstSeq map[string]uint64
	}{
		{
			name:   "completions: the oldest ended goes first, never a live one",
			limits: config.EventLogLimits{MaxCompletions: 3},
			run: func(l Log, clk *clock) {
				for _, id := range []string{"live", "a", "b"} {
					_ = l.Open(id, Meta{})
					appendRun(l, id, 2, false)
				}
				l.End("b", nil, logEvent(3, true), nil) // b ends first
				l.End("a", nil, logEvent(3, true), nil)
				_ = l.Open("c", Meta{})
			},
			present: []string{"live", "a", "c"},
			absent:  []string{"b"},
		},
		{
			name:   "completions: all live, the new one is not logged",
			limits: config.EventLogLimits{MaxCompletions: 2},
			run: func(l Log, clk *clock) {
				for _, id := range []string{"x", "y", "z"} {
					_ = l.Open(id, Meta{})
					appendRun(l, id, 1, false)
				}
			},
			present: []string{"x", "y"},
			absent:  []string{"z"},
		},
		{
			name:   "events per completion: the oldest are dropped",
			limits: config.EventLogLimits{MaxEvents: 3},
			run: func(l Log, clk *clock) {
				_ = l.Open("c", Meta{})
				appendRun(l, "c", 5, false)
			},
			present:  []string{"c"},
			firstSeq: map[string]uint64{"c": 3},
		},
		{
			name:   "bytes: ended logs evicted before a live log is trimmed",
			limits: config.EventLogLimits{MaxBytes: 30},
			run: func(l Log, clk *clock) {
				_ = l.Open("old", Meta{})
				appendRun(l, "old", 3, true)
				_ = l.Open("live", Meta{})
				appendRun(l, "live", 4, false)
			},
			present: []string{"live"},
			absent:  []string{"old"},
		},
		{
			name:   "retention: ended logs expire, live ones stay",
			limits: config.EventLogLimits{Retention: time.Minute},
			run: func(l Log, clk *clock) {
				open(t, l, "done", "")
				appendRun(l, "done", 2, true)
				_ = l.Open("live", Meta{})
				appendRun(l, "live", 2, false)
				clk.add(time.Minute)
				l.Expire(clk.now())
			},
			present: []string{"live"},
			absent:  []string{"done"},
		},
	}
	// On a Cluster, each shard keeps its share of the bounds
	// (TestRedisLogClusterShardsBounds): one shard here, so that the
	// bounds are the fleet's, as on one Redis.
	forEachLogIn(t, newKeyspace(1), func(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				clk := &clock{t: time.Unix(0, 0)}
				l := newLog(tt.limits, clk.now)
				tt.run(l, clk)
				for _, id := range tt.present {
					p, err := l.Read(id, 0)
					if errors.Is(err, ErrOutOfRange) {
						p, err = l.Read(id, tt.firstSeq[id]-1)
					}
					if err != nil {
						t.Errorf("%s: %v", id, err)
						continue
					}
					if want, ok := tt.firstSeq[id]; ok && (len(p.Events) == 0 || p.Events[0].GetSeq() != want) {
						t.Errorf("%s: first kept seq %v, want %d", id, testkit.Seqs(p.Events), want)
					}
				}
				for _, id := range tt.absent {
					if gone, err := goneSoon(l, id); !gone {
						t.Errorf("%s: err = %v, want not found", id, err)
					}
				}
			})
		}
	})
}

// goneSoon reads log id until it is not found, for at most 10 s, and
// reports whether it went, with the last read's error: a RedisLog drops
// the logs a write's bound evicted on its evictor's goroutine, after the
// write has returned (committer), so an evicted log is gone soon, not at
// once (on a loaded machine a read right after the write found it).
func goneSoon(l Log, id string) (bool, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := l.Read(id, 0)
		if errors.Is(err, ErrNotFound) {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, err
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEventLogPages: a long log is read a page at a time; a page that does
// not reach the end has More closed already and is not Done, the last page
// is; every page of the ended log says so, with its status.
func TestEventLogPages(t *testing.T) {
	forEachLog(t, func(t *testing.T, newLog func(config.EventLogLimits, func() time.Time) Log) {
		testEventLogPages(t, newLog(config.EventLogLimits{}, time.Now))
	})
}

func testEventLogPages(t *testing.T, l Log) {
	open(t, l, "c", "")
	n := 2*logPageSize + 10
	for i := 1; i < n; i++ {
		l.Append("c", logEvent(uint64(i), false))
	}
	l.End("c", nil, logEvent(uint64(n), true), []byte{8, 10})
	var got []uint64
	for after := uint64(0); ; {
		p, err := l.Read("c", after)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, testkit.Seqs(p.Events)...)
		if !p.Ended || string(p.Status) != "\x08\x0a" {
			t.Fatalf("page after %d: ended %v, status %x", after, p.Ended, p.Status)
		}
		if p.Done() {
			if len(p.Events) != 10 {
				t.Errorf("last page: %d events", len(p.Events))
			}
			break
		}
		select {
		case <-p.More:
		default:
			t.Fatalf("a page after %d that does not reach the end waits", after)
		}
		if len(p.Events) != logPageSize {
			t.Fatalf("page after %d: %d events", after, len(p.Events))
		}
		after = p.Events[len(p.Events)-1].GetSeq()
	}
	if len(got) != n || got[0] != 1 || got[n-1] != uint64(n) {
		t.Errorf("read %d events, %v … %v; want 1 … %d", len(got), got[:1], got[len(got)-1:], n)
	}
}
