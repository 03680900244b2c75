package fleet

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/completiond/completiond/internal/telemetry"
)

// metrics are the fleet's instruments. They travel with the Redis client
// that Instrument returns, so that every part of the fleet built on that
// client (NewHealth, NewRedisLog and the PairLog over it, NewRedisLeases
// and the Ownerships of its leases) counts on them without being handed
// them one by one; a client that was not instrumented counts on no-ops.
type metrics struct {
	roundTrip metric.Float64Histogram
	outages   metric.Int64Counter
	fenced    metric.Int64Counter
	lapsed    metric.Int64Counter
	lost      metric.Int64Counter
	takeovers metric.Int64Counter
	// replaced counts the new Redis processes Health found serving the
	// logs, republished the logs published again for what Redis lost.
	replaced    metric.Int64Counter
	republished metric.Int64Counter
	batch       metric.Int64Histogram
	wait        metric.Float64Histogram // each event's time in the group commit
	failed      metric.Int64Counter     // takeovers that failed, by TakeoverFailure
}

// TakeoverFailure is why a takeover failed after this replica found the
// completion's lease free: the value of the completiond.takeover.reason
// attribute of completiond.takeovers.failed. Not failures, and not
// counted: a lease found held, or one another replica (or the owner,
// renewing) was granted between the look and the Acquire (ErrLeaseHeld:
// the completion goes on there, and the replica that took it over counts
// it in completiond.takeovers), a log that ended meanwhile, a caller that
// left.
type TakeoverFailure string

// The reasons of completiond.takeovers.failed.
const (
	// TakeoverStoreUnavailable: Redis did not answer while this replica
	// acquired the lease or read the log; the follower looks again at its
	// next check, so that one completion may count more than once.
	TakeoverStoreUnavailable TakeoverFailure = "store_unavailable"
	// TakeoverLogMissing: the completion's log was gone (expired or
	// evicted) once the lease was acquired: nobody can continue it.
	TakeoverLogMissing TakeoverFailure = "log_missing"
	// TakeoverCannotContinue: the log, its checkpoint or its logged request
	// cannot be continued on this replica (it does not decode, or is not
	// valid with this replica's configuration); the follower ends with
	// FAILED_PRECONDITION (TAKEOVER_FAILED).
	TakeoverCannotContinue TakeoverFailure = "cannot_continue"
)

// takeoverFailures are the values of TakeoverFailure, each a series from
// the start.
var takeoverFailures = []TakeoverFailure{TakeoverStoreUnavailable, TakeoverLogMissing, TakeoverCannotContinue}

// takeoverReasonKey is the attribute of completiond.takeovers.failed.
const takeoverReasonKey = attribute.Key("completiond.takeover.reason")

// roundTripBuckets are the bounds (s) of the Redis round-trip histogram
// and of the group commit's wait: a loopback round trip is tens of
// microseconds, a command is abandoned at RedisTimeout, and 2 ms is the
// bound the group commit's wait aims at (fleet.md), so that the share of
// events over it is read from a bucket rather than guessed between 1 and
// 2.5 ms.
var roundTripBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// noMetrics are the instruments of a client that was not instrumented.
var noMetrics = newMetrics(noop.NewMeterProvider())

// newMetrics creates the instruments on mp. Their errors are not fatal:
// the API then hands back working no-op instruments.
func newMetrics(mp metric.MeterProvider) *metrics {
	m := mp.Meter(telemetry.Instrumentation)
	var in metrics
	in.roundTrip, _ = m.Float64Histogram("db.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Redis round trips of this replica (a command, or a pipeline), by command; error.type when it failed."),
		metric.WithExplicitBucketBoundaries(roundTripBuckets...))
	in.outages, _ = m.Int64Counter("completiond.redis.outages", metric.WithUnit("{outage}"),
		metric.WithDescription("Times Redis stopped answering this replica (health turned NOT_SERVING; completiond.redis.degraded is 1 until it answers again)."))
	in.fenced, _ = m.Int64Counter("completiond.redis.fenced", metric.WithUnit("{write}"),
		metric.WithDescription("Writes of this replica to the shared log that Redis refused because another replica holds the completion's lease: this replica was superseded."))
	in.lapsed, _ = m.Int64Counter("completiond.lease.lapsed", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases of this replica not renewed within their length because Redis did not answer: the completion goes on here, and its lease is taken back when Redis answers unless another replica was granted it."))
	in.lost, _ = m.Int64Counter("completiond.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases of this replica's completions found granted to another replica (a renewal refused): this replica was paused or cut off past its lease, and another took the completion over."))
	in.takeovers, _ = m.Int64Counter("completiond.takeovers", metric.WithUnit("{completion}"),
		metric.WithDescription("Completions this replica took over from a replica whose lease lapsed (its death, a pause, a partition)."))
	in.replaced, _ = m.Int64Counter("completiond.redis.replaced", metric.WithUnit("{process}"),
		metric.WithDescription("Times this replica found a shard of the shared log served by another Redis process than before: a restart, or a replica promoted in a failover, which may lack writes the old one acknowledged."))
	in.republished, _ = m.Int64Counter("completiond.redis.republished", metric.WithUnit("{completion}"),
		metric.WithDescription("Completions whose log this replica published again from its memory because Redis had lost acknowledged events, the end or the whole of it (a failover, a restart, empty or from an older copy)."))
	in.batch, _ = m.Int64Histogram("completiond.redis.commit.batch", metric.WithUnit("{event}"),
		metric.WithDescription("Events per flush of this replica's group commit to the shared log: one Redis round trip carries them all (one script call per 256 events or 1 MiB)."),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	in.wait, _ = m.Float64Histogram("completiond.redis.commit.wait", metric.WithUnit("s"),
		metric.WithDescription("The time each event of this replica spent in the group commit before its caller could get it: from its append to Redis's acknowledgement of its flush (the wait for other events, a flush in flight, the round trip and the script)."),
		metric.WithExplicitBucketBoundaries(roundTripBuckets...))
	in.failed, _ = m.Int64Counter("completiond.takeovers.failed", metric.WithUnit("{takeover}"),
		metric.WithDescription("Takeovers this replica attempted, finding a completion's lease free, that failed, by completiond.takeover.reason: store_unavailable, log_missing, cannot_continue. A lease won by another replica is not a failure."))
	return &in
}

// batchBuckets are the bounds of the group commit's batch sizes: 1 when a
// replica is idle, tens to hundreds under load.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// recordBatch records the events of one flush of the group commit.
func (m *metrics) recordBatch(events int) { m.batch.Record(context.Background(), int64(events)) }

// recordWait records the time one event spent in the group commit.
func (m *metrics) recordWait(d time.Duration) { m.wait.Record(context.Background(), d.Seconds()) }

// zero records 0 on every counter, so that each series exists from the
// start: a rate over it is 0, not absent, until the first event.
func (m *metrics) zero() {
	ctx := context.Background()
	for _, c := range []metric.Int64Counter{m.outages, m.fenced, m.lapsed, m.lost, m.takeovers, m.replaced, m.republished} {
		c.Add(ctx, 0)
	}
	for _, r := range takeoverFailures {
		m.failed.Add(ctx, 0, metric.WithAttributes(takeoverReasonKey.String(string(r))))
	}
}

// TakeoverFailed counts a failed takeover (completiond.takeovers.failed)
// for reason on the instruments rdb carries (Instrument): those the
// takeovers that succeed are counted on (the PairLog over rdb). A client
// that was not instrumented, or nil, counts nothing.
func TakeoverFailed(rdb redis.UniversalClient, reason TakeoverFailure) {
	metricsOf(rdb).failed.Add(context.Background(), 1, metric.WithAttributes(takeoverReasonKey.String(string(reason))))
}

// instrumented is a Redis client with the fleet's instruments.
type instrumented struct {
	redis.UniversalClient
	m *metrics
}

// Instrument returns rdb with the fleet's metrics on mp (nil: none): the
// duration of every Redis round trip (db.client.operation.duration), and
// for the fleet built on the client it returns — pass that one to
// NewHealth, NewRedisLog and NewRedisLeases — Redis outages, writes
// refused by a lease's fence, leases lapsed and lost, takeovers and failed
// ones (completiond.redis.outages, completiond.redis.fenced,
// completiond.lease.lapsed, completiond.lease.lost,
// completiond.takeovers, completiond.takeovers.failed: TakeoverFailed).
// Call it once per client: the round-trip hook is added to rdb itself.
func Instrument(rdb redis.UniversalClient, mp metric.MeterProvider) redis.UniversalClient {
	if mp == nil {
		return rdb
	}
	m := newMetrics(mp)
	m.zero()
	rdb.AddHook(newRoundTripHook(m.roundTrip))
	return &instrumented{UniversalClient: rdb, m: m}
}

// metricsOf is the instruments rdb carries (Instrument), or no-ops.
func metricsOf(rdb redis.UniversalClient) *metrics {
	if c, ok := rdb.(*instrumented); ok {
		return c.m
	}
	return noMetrics
}

// roundTripHook times each command and pipeline of a client.
type roundTripHook struct {
	h metric.Float64Histogram
	// answered holds, by operation name, the attributes of a round trip
	// that did not fail, built once per name (a bounded set: the
	// commands this code sends): building an attribute set sorts and
	// hashes it, a twentieth of a busy replica's CPU when the group
	// commit built one per flush.
	answered *sync.Map // string → metric.MeasurementOption
}

func newRoundTripHook(h metric.Float64Histogram) roundTripHook {
	return roundTripHook{h: h, answered: new(sync.Map)}
}

// DialHook implements redis.Hook: a dial is timed as part of the command
// that needed it.
func (roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (r roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		r.record(ctx, start, strings.ToUpper(cmd.Name()), err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline is one round trip,
// named PIPELINE (MULTI for a transaction).
func (r roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		name := "PIPELINE"
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			name = "MULTI"
		}
		r.record(ctx, start, name, err)
		return err
	}
}

func (r roundTripHook) record(ctx context.Context, start time.Time, op string, err error) {
	// The caller's context may be done (the command timed out): the
	// measurement is still this replica's.
	r.h.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), r.attributes(op, errorType(err)))
}

// attributes are a round trip's: operation op, failed with errType
// unless it is empty.
func (r roundTripHook) attributes(op, errType string) metric.MeasurementOption {
	if errType == "" {
		if o, ok := r.answered.Load(op); ok {
			return o.(metric.MeasurementOption)
		}
	}
	attrs := []attribute.KeyValue{attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", op)}
	if errType != "" {
		attrs = append(attrs, attribute.String("error.type", errType))
		return metric.WithAttributes(attrs...)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	r.answered.Store(op, o)
	return o
}

// errorType names a round trip's failure with a bounded set of values: ""
// for none (a missing key is an answer), timeout, connection, the prefix
// of an error Redis answered (ERR, NOSCRIPT, FENCED, … up to 16 capitals),
// or _OTHER.
func errorType(err error) string {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return ""
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.As(err, &rerr):
		if prefix, _, _ := strings.Cut(rerr.Error(), " "); isErrorPrefix(prefix) {
			return prefix
		}
	case errors.As(err, &nerr), errors.Is(err, redis.ErrClosed):
		return "connection"
	}
	return "_OTHER"
}

// isErrorPrefix reports whether s looks like the prefix of a Redis error
// reply: 1 to 16 capital letters.
func isErrorPrefix(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}
