package fleet

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// meter is an in-memory meter provider and the reader of what it records.
type meter struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeter(t *testing.T) meter {
	r := sdkmetric.NewManualReader()
	return meter{t: t, reader: r, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

// instrumented is an instrumented client of a fresh redis-server.
func (m meter) client(addr string) redis.UniversalClient {
	return Instrument(testkit.ServerRedisClient(m.t, addr), m.mp)
}

// find returns the metric called name, and whether it was recorded.
func (m meter) find(name string) (metricdata.Metrics, bool) {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, got := range sm.Metrics {
			if got.Name == name {
				return got, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// count is the value of counter name (summed over its attributes); the
// counter must exist.
func (m meter) count(name string) int64 {
	m.t.Helper()
	got, ok := m.find(name)
	if !ok {
		m.t.Fatalf("no metric %s", name)
	}
	sum, ok := got.Data.(metricdata.Sum[int64])
	if !ok {
		m.t.Fatalf("%s is a %T, want a counter", name, got.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		n += dp.Value
	}
	return n
}

// roundTrips are the number of round trips recorded by operation name and
// error.type ("" for none), as "NAME error".
func (m meter) roundTrips() map[string]uint64 {
	m.t.Helper()
	got, ok := m.find("db.client.operation.duration")
	if !ok {
		m.t.Fatal("no db.client.operation.duration")
	}
	out := map[string]uint64{}
	for _, dp := range got.Data.(metricdata.Histogram[float64]).DataPoints {
		sys, _ := dp.Attributes.Value("db.system.name")
		if sys.AsString() != "redis" {
			m.t.Errorf("db.system.name = %q", sys.AsString())
		}
		op, _ := dp.Attributes.Value("db.operation.name")
		kind, _ := dp.Attributes.Value(attribute.Key("error.type"))
		out[op.AsString()+" "+kind.AsString()] += dp.Count
	}
	return out
}

var fleetCounters = []string{"completiond.redis.outages", "completiond.redis.fenced", "completiond.lease.lapsed",
	"completiond.lease.lost", "completiond.takeovers", "completiond.takeovers.failed", "completiond.redis.replaced",
	"completiond.redis.republished"}

// TestInstrumentRoundTrips: every command and pipeline of an instrumented
// client is timed, by command, with error.type when it failed (a missing
// key is not a failure); the fleet's counters exist at 0 from the start.
func TestInstrumentRoundTrips(t *testing.T) {
	m := newMeter(t)
	rdb := m.client(redistest.Start(t))
	ctx := context.Background()
	for _, name := range fleetCounters {
		if n := m.count(name); n != 0 {
			t.Errorf("%s = %d at the start, want 0", name, n)
		}
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil {
		t.Fatal("an unknown command answered")
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); p.Ping(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	// The same command answered, failed, answered: each round trip under
	// its own attributes, whichever came first (answered ones are built
	// once and kept).
	if err := rdb.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "GET").Err(); err == nil {
		t.Fatal("GET without a key answered")
	}
	if err := rdb.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	got := m.roundTrips()
	for _, want := range []string{"PING ", "GET ", "GET ERR", "NOSUCHCOMMAND ERR", "PIPELINE ", "MULTI "} {
		if got[want] == 0 {
			t.Errorf("no round trip %q recorded; have %v", want, got)
		}
	}
	if got["GET "] != 3 || got["GET ERR"] != 1 {
		t.Errorf("GET round trips: %d answered, %d failed; want 3 and 1", got["GET "], got["GET ERR"])
	}

	plain := testkit.ServerRedisClient(t, "127.0.0.1:1")
	if Instrument(plain, nil) != plain || metricsOf(plain) != noMetrics {
		t.Error("a client without a meter provider carries instruments")
	}
}

// replyError is an error Redis answered, as go-redis types them.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{redis.Nil, ""},
		{context.DeadlineExceeded, "timeout"},
		{&net.OpError{Op: "read", Err: timeoutError{}}, "timeout"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, "connection"},
		{redis.ErrClosed, "connection"},
		{replyError("NOSCRIPT No matching script"), "NOSCRIPT"},
		{replyError("FENCED lease lost"), "FENCED"},
		{replyError("weird reply of some module"), "_OTHER"},
		{errors.New("something else"), "_OTHER"},
	} {
		if got := errorType(tc.err); got != tc.want {
			t.Errorf("errorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestMetricsFencedWrites: the writes of a superseded owner that Redis
// refuses — an append and a checkpoint — are counted; the new owner's are
// not.
func TestMetricsFencedWrites(t *testing.T) {
	m := newMeter(t)
	rdb := m.client(redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	ls := NewRedisLeases(rdb, time.Minute)
	if err := l.Open("c1", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	l.Fence("c1", a)
	if res, err := l.add("c1", nil, logEvent(1, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("the owner's append: %s %v", res, err)
	}
	if n := m.count("completiond.redis.fenced"); n != 0 {
		t.Fatalf("fenced = %d after the owner's own write", n)
	}
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, "c1", "B"); err != nil {
		t.Fatal(err)
	}
	if res, err := l.add("c1", nil, logEvent(2, false), nil, false); res != "fenced" || err != nil {
		t.Fatalf("the superseded owner's append: %s %v", res, err)
	}
	if res, err := l.saveCheckpoint("c1", 1, []byte("ck"), a.Value()); res != "fenced" || err != nil {
		t.Fatalf("the superseded owner's checkpoint: %s %v", res, err)
	}
	if n := m.count("completiond.redis.fenced"); n != 2 {
		t.Errorf("fenced = %d, want 2", n)
	}
}

// TestMetricsCommitWait: each event appended through the group commit
// records its wait, from its append to its flush's reply, and each flush
// its size.
func TestMetricsCommitWait(t *testing.T) {
	m := newMeter(t)
	l := NewRedisLog(m.client(redistest.Start(t)), config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	if err := l.Open("c1", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(3) {
		if err := l.Append("c1", logEvent(seq+1, false)); err != nil {
			t.Fatal(err)
		}
	}
	got, ok := m.find("completiond.redis.commit.wait")
	if !ok {
		t.Fatal("no completiond.redis.commit.wait")
	}
	var n uint64
	var sum float64
	for _, dp := range got.Data.(metricdata.Histogram[float64]).DataPoints {
		n, sum = n+dp.Count, sum+dp.Sum
		// The share of events over the design's bound is read from a
		// bucket (make fleetbench's report does).
		if !slices.Contains(dp.Bounds, 0.002) {
			t.Errorf("commit wait buckets %v: none at 2 ms", dp.Bounds)
		}
	}
	if n != 3 || sum <= 0 {
		t.Errorf("commit waits: %d recorded, %g s in all; want 3, more than 0", n, sum)
	}
	batches, ok := m.find("completiond.redis.commit.batch")
	if !ok {
		t.Fatal("no completiond.redis.commit.batch")
	}
	var events int64
	for _, dp := range batches.Data.(metricdata.Histogram[int64]).DataPoints {
		events += dp.Sum
	}
	if events != 3 {
		t.Errorf("the flushes' sizes sum to %d events, want 3", events)
	}
}

// await waits for c, bounded so that a hang fails rather than stalls.
func await(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
	}
}

// TestMetricsLeaseLost: a renewal that finds the lease granted to another
// replica counts a lost lease, before the owner is told.
func TestMetricsLeaseLost(t *testing.T) {
	m := newMeter(t)
	rdb := m.client(redistest.Start(t))
	ctx := context.Background()
	ls := NewRedisLeases(rdb, 300*time.Millisecond)
	from := time.Now()
	a, err := ls.Acquire(ctx, "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{})
	o := Own(ls, a, from, true, func() bool { close(lost); return true }, nil)
	defer o.End()
	if err := rdb.Del(ctx, LeaseKey("c1")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, "c1", "B"); err != nil {
		t.Fatal(err)
	}
	await(t, lost, "lost lease")
	if n := m.count("completiond.lease.lost"); n != 1 {
		t.Errorf("lost = %d, want 1", n)
	}
	if n := m.count("completiond.lease.lapsed"); n != 0 {
		t.Errorf("lapsed = %d, want 0", n)
	}
}

// TestMetricsLeaseLapsed: a lease not renewed in time because Redis does
// not answer counts a lapse once, however many renewals fail after it.
func TestMetricsLeaseLapsed(t *testing.T) {
	m := newMeter(t)
	rs := redistest.New(t)
	rdb := m.client(rs.Addr)
	ls := NewRedisLeases(rdb, 300*time.Millisecond)
	from := time.Now()
	a, err := ls.Acquire(context.Background(), "c1", "A")
	if err != nil {
		t.Fatal(err)
	}
	rs.Stop()
	stale := make(chan struct{})
	o := Own(ls, a, from, true, func() bool { t.Error("lost"); return true }, func() { close(stale) })
	defer o.End()
	await(t, stale, "lapse")
	if n := m.count("completiond.lease.lapsed"); n != 1 {
		t.Errorf("lapsed = %d, want 1", n)
	}
	if got := m.roundTrips(); got["EVALSHA connection"]+got["EVALSHA timeout"] == 0 {
		t.Errorf("no failed renewal among the round trips: %v", got)
	}
}

// TestMetricsOutage: Health counts each time Redis stops answering, not
// each failed PING.
func TestMetricsOutage(t *testing.T) {
	m := newMeter(t)
	rs := redistest.New(t)
	h := NewHealth(m.client(rs.Addr), time.Hour, slog.New(slog.DiscardHandler))
	defer h.Close()
	if !h.Up() || m.count("completiond.redis.outages") != 0 {
		t.Fatalf("up %t, outages %d at the start", h.Up(), m.count("completiond.redis.outages"))
	}
	rs.Stop()
	pingAndSettle(context.Background(), h)
	pingAndSettle(context.Background(), h)
	if h.Up() {
		t.Fatal("Redis stopped, health up")
	}
	if n := m.count("completiond.redis.outages"); n != 1 {
		t.Errorf("outages = %d after one outage, want 1", n)
	}
	rs.Restart()
	pingAndSettle(context.Background(), h)
	if !h.Up() || m.count("completiond.redis.outages") != 1 {
		t.Errorf("after the restart: up %t, outages %d", h.Up(), m.count("completiond.redis.outages"))
	}
}

// pair is a replica's PairLog on the Redis at addr, instrumented on m,
// with its Health (PINGed once an hour: the test PINGs).
func (m meter) pair(addr string) *PairLog {
	m.t.Helper()
	rdb := m.client(addr)
	quiet := slog.New(slog.DiscardHandler)
	h := NewHealth(rdb, time.Hour, quiet)
	m.t.Cleanup(h.Close)
	rl := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	m.t.Cleanup(rl.Close)
	return NewPairLog(NewMemLog(config.EventLogLimits{}, time.Now), rl, h, quiet, RedisInstruments(m.mp, h.Up))
}

// TestMetricsTakeover: a replica adopting a completion it took over
// counts a takeover.
func TestMetricsTakeover(t *testing.T) {
	m := newMeter(t)
	f := m.pair(redistest.Start(t))
	f.Adopt("c1", Meta{Replica: "A"}, nil, 0, nil)
	if n := m.count("completiond.takeovers"); n != 1 {
		t.Errorf("takeovers = %d, want 1", n)
	}
}

// byReason is counter name by completiond.takeover.reason: each series
// recorded, with its value.
func (m meter) byReason(name string) map[string]int64 {
	m.t.Helper()
	got, ok := m.find(name)
	if !ok {
		m.t.Fatalf("no metric %s", name)
	}
	out := map[string]int64{}
	for _, dp := range got.Data.(metricdata.Sum[int64]).DataPoints {
		r, _ := dp.Attributes.Value(takeoverReasonKey)
		out[r.AsString()] += dp.Value
	}
	return out
}

// TestMetricsRedisReplaced: a restarted Redis is counted as a new
// process once; a log published again for an end Redis lost, one for
// events it lost, and one restored whole are counted as republished.
func TestMetricsRedisReplaced(t *testing.T) {
	m := newMeter(t)
	rs := redistest.New(t)
	f := m.pair(rs.Addr)
	rdb, h := f.redis.rdb, f.watch
	ks := keyspaceOf(rdb)
	for _, id := range []string{"ended", "running"} {
		if err := f.Open(id, Meta{Replica: "A"}); err != nil {
			t.Fatal(err)
		}
		appendRun(f, id, 2, false)
	}
	loseKeys(t, rdb, []string{ks.log("ended"), ks.meta("ended")}, func() { appendRun(&seqFrom{f, 2}, "ended", 1, true) })
	loseWrites(t, rdb, "running", func() { appendRun(&seqFrom{f, 2}, "running", 1, false) })
	if err := f.Open("whole", Meta{Replica: "A"}); err != nil {
		t.Fatal(err)
	}
	appendRun(f, "whole", 2, true)
	rdb.Del(context.Background(), ks.log("whole"), ks.meta("whole"))
	// The end is published again now, the log lost whole restored; the running one's next write
	// checks, finds the hole, and publishes it again.
	f.redisReplaced()
	if err := f.Append("running", logEvent(4, false)); err != nil {
		t.Fatal(err)
	}
	if n := m.count("completiond.redis.republished"); n != 3 {
		t.Errorf("republished = %d, want 3", n)
	}
	rs.Restart()
	pingAndSettle(context.Background(), h)
	pingAndSettle(context.Background(), h)
	if n := m.count("completiond.redis.replaced"); n != 1 {
		t.Errorf("replaced = %d after one restart, want 1", n)
	}
}

// TestMetricsTakeoverFailed: completiond.takeovers.failed has a series at
// 0 for every reason from the start, and TakeoverFailed counts on the one
// of its reason, on the instruments of the client it is given; a client
// that was not instrumented (or none) counts nowhere.
func TestMetricsTakeoverFailed(t *testing.T) {
	m := newMeter(t)
	addr := redistest.Start(t)
	rdb := m.client(addr)
	want := map[string]int64{}
	for _, r := range takeoverFailures {
		want[string(r)] = 0
	}
	if got := m.byReason("completiond.takeovers.failed"); !maps.Equal(got, want) {
		t.Fatalf("at the start: %v, want %v", got, want)
	}
	for _, tc := range []struct {
		rdb    redis.UniversalClient
		reason TakeoverFailure
		counts bool
	}{
		{rdb, TakeoverStoreUnavailable, true},
		{rdb, TakeoverLogMissing, true},
		{rdb, TakeoverLogMissing, true},
		{rdb, TakeoverCannotContinue, true},
		{testkit.ServerRedisClient(t, addr), TakeoverCannotContinue, false},
		{nil, TakeoverCannotContinue, false},
	} {
		TakeoverFailed(tc.rdb, tc.reason)
		if tc.counts {
			want[string(tc.reason)]++
		}
		if got := m.byReason("completiond.takeovers.failed"); !maps.Equal(got, want) {
			t.Errorf("after a %s failure (instrumented %t): %v, want %v", tc.reason, tc.counts, got, want)
		}
	}
	if n := m.count("completiond.takeovers"); n != 0 {
		t.Errorf("takeovers = %d after failed ones only", n)
	}
}
