package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Keys of the Redis event log. Every key is prefixed completiond: and names
// its kind; a completion's keys carry its id in braces.
const (
	// redisLogsLive is a sorted set of the live logs' ids, scored by the
	// time (Unix ms) their log lapses unless an event comes: a replica that
	// died leaves no live log behind for longer than RedisLog.LiveTTL.
	redisLogsLive = "completiond:logs:live"
	// redisLogsEnded is a sorted set of the ended logs' ids, scored by the
	// time (Unix ms) they ended, times 1000, plus a counter of the ends
	// modulo 1000 (completiond:logs:endseq), so that logs ended within the
	// same millisecond keep their order: the oldest is evicted first.
	redisLogsEnded = "completiond:logs:ended"
	// redisLogSizes is a hash of each log's encoded bytes kept.
	redisLogSizes = "completiond:logs:bytes"
	// redisLogBytes is the encoded bytes kept by every log.
	redisLogBytes = "completiond:logs:total"
	// redisLogChanged is the Pub/Sub channel on which every change of a
	// log publishes the log's id.
	redisLogChanged = "completiond:logchanged"
)

// redisLogKey is the Redis Stream of completion id's events: entry 0-N is
// the event of seq N, so that XRANGE from 0-(after+1) is exactly the events
// after a seq.
func redisLogKey(id string) string { return "completiond:log:{" + id + "}" }

// redisMetaKey is the hash of completion id's log: m (the encoded Meta),
// and once ended, ended (Unix ms) and status (a google.rpc.Status).
func redisMetaKey(id string) string { return "completiond:meta:{" + id + "}" }

// redisLogLib is the Lua shared by the scripts: drop removes a log and its
// accounting and wakes its followers; open opens one within the bound on
// completions, evicting the oldest ended ones (false when every log kept
// is live); expire drops the ended logs whose retention has passed and the
// live logs that lapsed. KEYS[1..4] are redisLogsLive, redisLogsEnded,
// redisLogSizes, redisLogBytes.
const redisLogLib = `
local function drop(id)
  redis.call('DEL', 'completiond:log:{' .. id .. '}', 'completiond:meta:{' .. id .. '}')
  local size = tonumber(redis.call('HGET', KEYS[3], id) or '0')
  redis.call('HDEL', KEYS[3], id)
  redis.call('DECRBY', KEYS[4], size)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('PUBLISH', 'completiond:logchanged', id)
end
local function open(id, metakey, meta, now, maxc, ttl)
  while redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) >= maxc do
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not oldest then return false end
    drop(oldest)
  end
  redis.call('HSET', metakey, 'm', meta)
  redis.call('PEXPIRE', metakey, ttl)
  redis.call('ZADD', KEYS[1], now + ttl, id)
  return true
end
local function expire(now, retention)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', (now - retention) * 1000 + 999, 'LIMIT', 0, 100)) do drop(id) end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)) do drop(id) end
end
`

// redisOpenScript opens a log. KEYS[5] is its meta; ARGV: id, encoded
// meta, now (ms), retention (ms), max completions, live TTL (ms). It
// answers ok, or full when every log kept is live.
var redisOpenScript = redis.NewScript(redisLogLib + `
local id, now, retention, maxc, ttl = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
expire(now, retention)
if redis.call('EXISTS', KEYS[5]) == 1 then return 'ok' end
if not open(id, KEYS[5], ARGV[2], now, maxc, ttl) then return 'full' end
return 'ok'
`)

// redisAppendScript appends an event, and with end=1 ends the log. KEYS[5]
// is its meta, KEYS[6] its stream; ARGV: id, seq, event, status, end, now
// (ms), retention (ms), max events, max bytes, live TTL (ms). It answers
// ok; missing when the log is not in Redis (never opened there, dropped,
// or Redis lost it); ended; or order for a seq not above the last.
var redisAppendScript = redis.NewScript(redisAppendBody)

const redisAppendBody = redisLogLib + `
local id, seq, ev, status, fin = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, retention, maxe, maxb, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
expire(now, retention)
if redis.call('EXISTS', KEYS[5]) == 0 then return 'missing' end
if redis.call('HEXISTS', KEYS[5], 'ended') == 1 then return 'ended' end
local added = redis.pcall('XADD', KEYS[6], '0-' .. seq, 'e', ev)
if type(added) == 'table' and added.err then return 'order' end
local size = #ev + #status
redis.call('HINCRBY', KEYS[3], id, size)
local total = redis.call('INCRBY', KEYS[4], size)
while total > maxb do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  drop(oldest)
  total = tonumber(redis.call('GET', KEYS[4]) or '0')
end
local n = redis.call('XLEN', KEYS[6])
while n > 1 and (n > maxe or total > maxb) do
  local first = redis.call('XRANGE', KEYS[6], '-', '+', 'COUNT', 1)[1]
  local b = #first[2][2]
  redis.call('XDEL', KEYS[6], first[1])
  redis.call('HINCRBY', KEYS[3], id, -b)
  total = redis.call('DECRBY', KEYS[4], b)
  n = n - 1
end
if fin == '1' then
  local ck = redis.call('HSTRLEN', KEYS[5], 'ck')
  if ck > 0 then
    redis.call('HDEL', KEYS[5], 'ck')
    redis.call('HINCRBY', KEYS[3], id, -ck)
    redis.call('DECRBY', KEYS[4], ck)
  end
  redis.call('HSET', KEYS[5], 'status', status, 'ended', now)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], now * 1000 + redis.call('INCR', 'completiond:logs:endseq') % 1000, id)
  redis.call('PEXPIRE', KEYS[5], retention)
  redis.call('PEXPIRE', KEYS[6], retention)
else
  redis.call('ZADD', KEYS[1], now + ttl, id)
  redis.call('PEXPIRE', KEYS[5], ttl)
  redis.call('PEXPIRE', KEYS[6], ttl)
end
redis.call('PUBLISH', 'completiond:logchanged', id .. ' ' .. seq)
return 'ok'
`

// redisFencedAppendScript is redisAppendScript for the owner of a fenced
// completion: KEYS[1] is its LeaseKey and ARGV[1] its lease value, before
// the append's own keys and arguments; the append happens only while the
// writer still holds the lease, atomically with the check (LeaseCheckLua),
// which otherwise answers the error FENCED.
var redisFencedAppendScript = redis.NewScript(LeaseCheckLua + `table.remove(KEYS, 1)
table.remove(ARGV, 1)
` + redisAppendBody)

// redisExpireScript runs expire alone; ARGV: now (ms), retention (ms).
var redisExpireScript = redis.NewScript(redisLogLib + `
expire(tonumber(ARGV[1]), tonumber(ARGV[2]))
return 'ok'
`)

// redisDropScript drops the log ARGV[1] and its accounting.
var redisDropScript = redis.NewScript(redisLogLib + `
drop(ARGV[1])
return 'ok'
`)

// redisReshareScript prepares the log of a completion that ran on logged
// in its replica's memory only for a while, for the replica to append
// what Redis lacks (RedisLog.reshare). KEYS[1..4] redisLogKeys,
// KEYS[5] its meta, KEYS[6] its stream, KEYS[7] its LeaseKey, KEYS[8] the
// lease's token counter; ARGV: id, encoded meta, now (ms), retention
// (ms), max completions, live TTL (ms), the writer's lease value (empty:
// not fenced), its token, the lease TTL (ms), the counter's TTL (ms).
//
// Fenced, it answers fenced when another replica holds the lease, or was
// granted it since the writer's (the counter moved on), and takes the
// lease again when it is gone (as Leases.Renew does), so that nobody takes
// the completion over while the writer appends. It opens the log when
// Redis no longer has it, and answers "ok N" with N the last seq the log
// keeps (0: none), "ended" when it ended, or "full".
var redisReshareScript = redis.NewScript(redisLogLib + `
local id, now, retention, maxc, ttl = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if ARGV[7] ~= '' then
  local v = redis.call('GET', KEYS[7])
  if v and v ~= ARGV[7] then return 'fenced' end
  if not v then
    local t = redis.call('GET', KEYS[8])
    if t and t ~= ARGV[8] then return 'fenced' end
    redis.call('SET', KEYS[8], ARGV[8], 'PX', ARGV[10])
    redis.call('SET', KEYS[7], ARGV[7], 'PX', ARGV[9])
  end
end
expire(now, retention)
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('DEL', KEYS[6])
  if not open(id, KEYS[5], ARGV[2], now, maxc, ttl) then return 'full' end
end
if redis.call('HEXISTS', KEYS[5], 'ended') == 1 then return 'ended' end
local last = redis.call('XREVRANGE', KEYS[6], '+', '-', 'COUNT', 1)[1]
if not last then return 'ok 0' end
return 'ok ' .. string.match(last[1], '%d+$')
`)

// errLogFenced: another replica holds the completion's lease, or was
// granted it since the writer's.
var errLogFenced = errors.New("the completion's lease is another replica's")

// ErrUnavailable wraps the errors of a Redis that does not answer.
var ErrUnavailable = errors.New("event log unavailable")

// DefaultRedisLiveTTL is RedisLog.LiveTTL when unset.
const DefaultRedisLiveTTL = time.Hour

// DefaultRedisOpTimeout bounds each command of the Redis event log.
const DefaultRedisOpTimeout = time.Second

// redisWakeAll is how often, at most, the followers of a Redis log read
// again without a notice: a notice lost while the subscription was down,
// or a log dropped by its TTL rather than by a script, is seen by then.
const redisWakeAll = 5 * time.Second

// RedisLog is the Log in Redis, shared by every replica: one
// Redis Stream per completion (completiond:log:{id}, entry 0-N for seq N),
// its meta in a hash (completiond:meta:{id}), and the bounds of
// EventLogLimits over the whole Redis (the completions and bytes kept,
// counted in completiond:logs:*), enforced by Lua scripts so that each
// Open and Append is one atomic round trip. Retention is kept both ways:
// the scripts drop the logs that ended Retention ago (by the log's clock),
// and every key also expires (PEXPIRE) on its own, so that nothing
// outlives a fleet that stopped. A live log lapses after LiveTTL without
// an event (its replica died).
//
// Following: one Pub/Sub subscription per process, on completiond:logchanged,
// whose messages name the log that changed and the seq appended ("id seq",
// or "id" for a log dropped); a Read's More is a channel of a per-id
// registry, closed when a notice of the id above the last seq the Read saw
// arrives (no goroutine and no Redis connection per follower; XREAD BLOCK
// per follower would hold a connection of the pool each). Every
// redisWakeAll, and on each resubscription, all of them are closed, so that
// a notice lost while the subscription was down delays a follower by that
// much at most.
//
// The scripts use keys they do not declare: a standalone Redis, or one
// behind Sentinel, not Redis Cluster.
type RedisLog struct {
	rdb    redis.UniversalClient
	limits config.EventLogLimits
	now    func() time.Time
	// LiveTTL is how long a live log is kept without an event.
	LiveTTL time.Duration
	// OpTimeout bounds each command.
	OpTimeout time.Duration
	// LeaseTTL is the length of the leases that fence the writes (Fence):
	// a replica publishing again a log it kept alone for a while takes its
	// lapsed lease back for this long (DefaultLeaseTTL when zero).
	LeaseTTL time.Duration

	fences sync.Map // id → the lease value its writes need (Fence)
	m      *metrics // rdb's (Instrument)

	wake   *wakeRegistry
	ps     *redis.PubSub
	stop   context.CancelFunc
	closed chan struct{}
}

// NewRedisLog returns the Log in rdb with limits (zero fields
// take their defaults) reading the time from now (nil: time.Now). It
// subscribes to the change notices at once; Close ends that.
func NewRedisLog(rdb redis.UniversalClient, limits config.EventLogLimits, now func() time.Time) *RedisLog {
	limits.FillDefaults()
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &RedisLog{rdb: rdb, limits: limits, now: now, LiveTTL: DefaultRedisLiveTTL, OpTimeout: DefaultRedisOpTimeout,
		m: metricsOf(rdb), wake: newWakeRegistry(), stop: cancel, closed: make(chan struct{})}
	ps := rdb.Subscribe(ctx, redisLogChanged)
	// The first confirmation is awaited here (within OpTimeout), so that a
	// Read made after New is woken by the next change, not by it.
	if _, err := ps.ReceiveTimeout(ctx, l.OpTimeout); err != nil {
		l.wake.all(2 * redisWakeAll) // harmless: nobody waits yet
	}
	l.ps = ps
	go l.listen(ctx, ps)
	return l
}

// Close stops following the change notices and wakes every follower.
func (l *RedisLog) Close() {
	l.stop()
	_ = l.ps.Close() // ends a Receive under way
	<-l.closed
}

// listen closes the More of every log whose notice arrives, and all of
// them on each (re)subscription and every redisWakeAll.
func (l *RedisLog) listen(ctx context.Context, ps *redis.PubSub) {
	defer close(l.closed)
	defer l.wake.all(2 * redisWakeAll)
	defer ps.Close()
	last := time.Now()
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, redisWakeAll)
		if testHookRedisReceive != nil {
			testHookRedisReceive(msg, err)
		}
		switch m := msg.(type) {
		case *redis.Message:
			l.wake.notice(parseNotice(m.Payload))
		case *redis.Subscription:
			l.wake.all(2 * redisWakeAll)
			last = time.Now()
		}
		if err != nil && ctx.Err() == nil {
			var nerr interface{ Timeout() bool }
			if !errors.As(err, &nerr) || !nerr.Timeout() {
				// Redis is away: the next Receive reconnects; do not spin.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		if time.Since(last) >= redisWakeAll {
			l.wake.all(2 * redisWakeAll)
			last = time.Now()
		}
	}
}

// testHookRedisReceive, when set, sees each Receive of the listener.
var testHookRedisReceive func(any, error)

func (l *RedisLog) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), l.OpTimeout)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

var redisLogKeys = []string{redisLogsLive, redisLogsEnded, redisLogSizes, redisLogBytes}

// Open implements Log.
func (l *RedisLog) Open(id string, meta Meta) error { return l.open(id, meta) }

// open is Open, with errLogFull or the error of a Redis that did not answer.
func (l *RedisLog) open(id string, meta Meta) error {
	m, err := encodeLogMeta(meta)
	if err != nil {
		return err
	}
	ctx, cancel := l.ctx()
	defer cancel()
	keys := append(append([]string(nil), redisLogKeys...), redisMetaKey(id))
	res, err := redisOpenScript.Run(ctx, l.rdb, keys, id, m, ms(l.now()), l.limits.Retention.Milliseconds(),
		l.limits.MaxCompletions, l.LiveTTL.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if res == "full" {
		return errLogFull
	}
	return nil
}

// Append implements Log.
func (l *RedisLog) Append(id string, ev *completionv1.CompletionEvent) {
	_, _ = l.add(id, ev, nil, false)
}

// End implements Log.
func (l *RedisLog) End(id string, result *completionv1.CompletionEvent, status []byte) {
	_, _ = l.add(id, result, status, true)
}

// Fenced implements Log: Redis checks a lease with each write.
func (l *RedisLog) Fenced() bool { return true }

// Fence implements Log: from now on, the writes of id happen only
// while l is its lease, checked by the append script atomically with each
// write (it starts with LeaseCheckLua: KEYS[1] = LeaseKey(id), ARGV[1] =
// the lease's Value); a write refused is dropped (add answers fenced).
func (l *RedisLog) Fence(id string, lease Lease) { l.fences.Store(id, lease.Value()) }

// Unfence implements Log.
func (l *RedisLog) Unfence(id string) { l.fences.Delete(id) }

// KeptHere implements Log: nothing is kept apart from Redis.
func (l *RedisLog) KeptHere(string) bool { return false }

// Adopt implements Log: a completion taken over is logged in Redis
// already.
func (l *RedisLog) Adopt(string, Meta, []*completionv1.CompletionEvent, uint64, []byte) {}

// add appends ev to the log of id, and with end ends it with status. It
// answers what the script did (ok, missing, ended, order, or fenced when
// id is fenced and its lease is no longer the writer's) or the error of a
// Redis that did not answer.
func (l *RedisLog) add(id string, ev *completionv1.CompletionEvent, status []byte, end bool) (string, error) {
	b, err := proto.Marshal(ev)
	if err != nil {
		return "", err // cannot happen: the service builds every event
	}
	ctx, cancel := l.ctx()
	defer cancel()
	fence, _ := l.fences.Load(id)
	v, _ := fence.(string)
	script, keys, args := l.appendCall(id, ev.GetSeq(), b, status, end, v)
	return l.runFenced(ctx, script, keys, args)
}

// runFenced runs a log script that may be fenced by a lease: it answers
// what the script answered, fenced when the lease refused the write, or
// the error of a Redis that did not answer.
func (l *RedisLog) runFenced(ctx context.Context, script *redis.Script, keys []string, args []any) (string, error) {
	res, err := script.Run(ctx, l.rdb, keys, args...).Text()
	if err != nil && strings.HasPrefix(err.Error(), "FENCED") {
		l.refused()
		return "fenced", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return res, nil
}

// refused counts a write that Redis refused because another replica holds
// the completion's lease.
func (l *RedisLog) refused() { l.m.fenced.Add(context.Background(), 1) }

// appendCall is the script, keys and arguments that append the encoded
// event b of seq to the log of id, and with end end it with status;
// fenced by the lease value fence unless it is empty.
func (l *RedisLog) appendCall(id string, seq uint64, b, status []byte, end bool, fence string) (*redis.Script, []string, []any) {
	fin := "0"
	if end {
		fin = "1"
	}
	keys := append(append([]string(nil), redisLogKeys...), redisMetaKey(id), redisLogKey(id))
	args := []any{id, seq, b, status, fin, ms(l.now()),
		l.limits.Retention.Milliseconds(), l.limits.MaxEvents, l.limits.MaxBytes, l.LiveTTL.Milliseconds()}
	if fence == "" {
		return redisAppendScript, keys, args
	}
	return redisFencedAppendScript, append([]string{LeaseKey(id)}, keys...), append([]any{fence}, args...)
}

// Read implements Log: the meta, the page and the first and last
// entries kept are read in one MULTI, so that they agree.
func (l *RedisLog) Read(id string, after uint64) (Page, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	var meta *redis.SliceCmd
	var page, first, last *redis.XMessageSliceCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HMGet(ctx, redisMetaKey(id), "m", "ended", "status")
		page = p.XRangeN(ctx, redisLogKey(id), "0-"+strconv.FormatUint(after+1, 10), "+", logPageSize+1)
		first = p.XRangeN(ctx, redisLogKey(id), "-", "+", 1)
		last = p.XRevRangeN(ctx, redisLogKey(id), "+", "-", 1)
		return nil
	})
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	f := meta.Val()
	m, ok := f[0].(string)
	if !ok {
		return Page{}, ErrNotFound
	}
	var p Page
	if p.Meta, err = decodeLogMeta(m); err != nil {
		return Page{}, err
	}
	if e, ok := f[1].(string); ok {
		ended, _ := strconv.ParseInt(e, 10, 64)
		if l.now().Sub(time.UnixMilli(ended)) >= l.limits.Retention {
			return Page{}, ErrNotFound // expired; the next script drops it
		}
		p.Ended = true
		if s, ok := f[2].(string); ok && s != "" {
			p.Status = []byte(s)
		}
	}
	lo, hi := uint64(1), uint64(0)
	if len(first.Val()) > 0 && len(last.Val()) > 0 {
		lo, hi = entrySeq(first.Val()[0].ID), entrySeq(last.Val()[0].ID)
	}
	if after+1 < lo || after > hi {
		return Page{}, &RangeError{First: lo}
	}
	msgs := page.Val()
	// A notice above hi that came before wait is kept by the registry, so
	// that none is lost between the read and the wait.
	p.More = l.wake.wait(id, hi)
	if len(msgs) > logPageSize {
		msgs, p.More = msgs[:logPageSize], closed
	}
	p.Events = make([]*completionv1.CompletionEvent, len(msgs))
	for i, msg := range msgs {
		s, _ := msg.Values["e"].(string)
		p.Events[i] = &completionv1.CompletionEvent{}
		if err := proto.Unmarshal([]byte(s), p.Events[i]); err != nil {
			return Page{}, fmt.Errorf("event %s of %s: %w", msg.ID, id, err)
		}
	}
	return p, nil
}

// reshare publishes again to Redis the log of id that this replica kept
// in its memory alone for a while (Redis did not answer, or lost it),
// from c, its copy: Redis gets the events it lacks, after the last it
// kept (those it kept are the same events: the writer is the same, and
// the fence below refuses it when another replica wrote since), and the
// End. A fenced id is refused (errLogFenced) once another replica was
// granted its lease; its lease is taken again if it lapsed. The appends
// are pipelined, in batches.
func (l *RedisLog) reshare(id string, c logCopy) error {
	fence, _ := l.fences.Load(id)
	v, _ := fence.(string)
	return l.reshareFenced(id, c, v)
}

// reshareFenced is reshare with the writer's lease value given (empty:
// not fenced), for a completion whose run is over (its fence is gone).
func (l *RedisLog) reshareFenced(id string, c logCopy, fence string) error {
	meta := c.meta
	if c.ended {
		meta.Request = nil // an ended completion is never taken over
	}
	m, err := encodeLogMeta(meta)
	if err != nil {
		return err
	}
	var token any = ""
	if lease, ok := parseLease(id, fence); ok {
		token = lease.Token
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.OpTimeout+time.Duration(len(c.events)/redisReshareBatch+1)*l.OpTimeout)
	defer cancel()
	keys := append(append([]string(nil), redisLogKeys...), redisMetaKey(id), redisLogKey(id), LeaseKey(id), leaseTokenKey(id))
	res, err := redisReshareScript.Run(ctx, l.rdb, keys, id, m, ms(l.now()), l.limits.Retention.Milliseconds(),
		l.limits.MaxCompletions, l.LiveTTL.Milliseconds(), fence, token, l.leaseTTL().Milliseconds(), leaseTokenTTL.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var kept uint64
	switch {
	case res == "fenced":
		l.refused()
		return errLogFenced
	case res == "full":
		return errLogFull
	case res == "ended":
		return nil
	default:
		kept, _ = strconv.ParseUint(strings.TrimPrefix(res, "ok "), 10, 64)
	}
	if err := l.appendAll(ctx, id, c, kept, fence); err != nil {
		return err
	}
	return l.publishCheckpoint(id, c, fence)
}

// redisReshareBatch is how many appends a reshare pipelines at once.
const redisReshareBatch = 128

// appendAll appends the events of c after seq kept, pipelined.
func (l *RedisLog) appendAll(ctx context.Context, id string, c logCopy, kept uint64, fence string) error {
	script, _, _ := l.appendCall(id, 0, nil, nil, false, fence)
	if err := script.Load(ctx, l.rdb).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	for i := 0; i < len(c.events); {
		pipe := l.rdb.Pipeline()
		var cmds []*redis.Cmd
		for ; i < len(c.events) && len(cmds) < redisReshareBatch; i++ {
			if c.seqs[i] <= kept {
				continue
			}
			end := c.ended && i == len(c.events)-1
			var status []byte
			if end {
				status = c.status
			}
			_, keys, args := l.appendCall(id, c.seqs[i], c.events[i], status, end, fence)
			cmds = append(cmds, pipe.EvalSha(ctx, script.Hash(), keys, args...))
		}
		if len(cmds) == 0 {
			continue
		}
		_, _ = pipe.Exec(ctx)
		for _, cmd := range cmds {
			res, err := cmd.Text()
			switch {
			case err != nil && strings.HasPrefix(err.Error(), "FENCED"):
				l.refused()
				return errLogFenced
			case err != nil:
				return fmt.Errorf("%w: %w", ErrUnavailable, err)
			case res == "missing" || res == "ended":
				return fmt.Errorf("%w: the log went while it was published again (%s)", ErrUnavailable, res)
			}
		}
	}
	return nil
}

// leaseTTL is LeaseTTL, or DefaultLeaseTTL when unset.
func (l *RedisLog) leaseTTL() time.Duration {
	if l.LeaseTTL > 0 {
		return l.LeaseTTL
	}
	return config.DefaultLeaseTTL
}

// entrySeq is the seq of stream entry 0-N.
func entrySeq(entry string) uint64 {
	_, n, _ := strings.Cut(entry, "-")
	seq, _ := strconv.ParseUint(n, 10, 64)
	return seq
}

// drop removes the log of id from Redis.
func (l *RedisLog) drop(id string) error {
	ctx, cancel := l.ctx()
	defer cancel()
	return redisDropScript.Run(ctx, l.rdb, redisLogKeys, id).Err()
}

// redisFencedDropScript is redisDropScript for the owner of a fenced
// completion (KEYS[5] its LeaseKey, ARGV[2] its lease value): a log whose
// lease another replica holds is left alone.
var redisFencedDropScript = redis.NewScript(redisLogLib + `
local v = redis.call('GET', KEYS[5])
if v and v ~= ARGV[2] then return 'fenced' end
drop(ARGV[1])
return 'ok'
`)

// dropUnlessFenced removes the log of id from Redis, unless id is fenced
// and another replica holds its lease.
func (l *RedisLog) dropUnlessFenced(id string) error {
	v, ok := l.fences.Load(id)
	if !ok {
		return l.drop(id)
	}
	ctx, cancel := l.ctx()
	defer cancel()
	keys := append(append([]string(nil), redisLogKeys...), LeaseKey(id))
	return redisFencedDropScript.Run(ctx, l.rdb, keys, id, v).Err()
}

// Expire implements Log: it drops what the bounds of the time now
// no longer keep (each Open and Append does as well).
func (l *RedisLog) Expire(now time.Time) { _ = l.expire(now) }

func (l *RedisLog) expire(now time.Time) error {
	ctx, cancel := l.ctx()
	defer cancel()
	return redisExpireScript.Run(ctx, l.rdb, redisLogKeys, ms(now), l.limits.Retention.Milliseconds()).Err()
}

// encodeLogMeta is the blob a shared log keeps of a Meta: its JSON, so
// that a field added to Meta travels without a change here. A field
// that encoding/json cannot read back (a proto message with a oneof)
// needs a type with MarshalJSON and UnmarshalJSON (protojson).
func encodeLogMeta(m Meta) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode log meta: %w", err)
	}
	return string(b), nil
}

func decodeLogMeta(s string) (Meta, error) {
	var m Meta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return m, fmt.Errorf("decode log meta: %w", err)
	}
	return m, nil
}

// wakeRegistry hands out, per log id, the channel that the next change of
// that log closes. A change carries its version, the seq it appended (or
// the largest one for a log dropped): a notice can arrive after a Read that
// already saw its change, and only wakes the waiters that read less.
type wakeRegistry struct {
	mu      sync.Mutex
	waiters map[string]map[uint64]chan struct{} // id → version read → channel
	latest  map[string]noticed                  // the last notice of each id
}

type noticed struct {
	version uint64
	at      time.Time
}

func newWakeRegistry() *wakeRegistry {
	return &wakeRegistry{waiters: map[string]map[uint64]chan struct{}{}, latest: map[string]noticed{}}
}

// wait returns the channel closed at the first notice of id above version:
// closed already when one came.
func (w *wakeRegistry) wait(id string, version uint64) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.latest[id]; ok && n.version > version {
		return closed
	}
	byVersion := w.waiters[id]
	if byVersion == nil {
		byVersion = map[uint64]chan struct{}{}
		w.waiters[id] = byVersion
	}
	c, ok := byVersion[version]
	if !ok {
		c = make(chan struct{})
		byVersion[version] = c
	}
	return c
}

// notice closes the channels of id that wait for a version below version.
func (w *wakeRegistry) notice(id string, version uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.latest[id]; version > n.version {
		w.latest[id] = noticed{version: version, at: time.Now()}
	}
	for v, c := range w.waiters[id] {
		if v < version {
			close(c)
			delete(w.waiters[id], v)
		}
	}
	if len(w.waiters[id]) == 0 {
		delete(w.waiters, id)
	}
}

// all closes every channel, and forgets the notices older than keep: the
// registry holds no more than the ids read or noticed since.
func (w *wakeRegistry) all(keep time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, byVersion := range w.waiters {
		for _, c := range byVersion {
			close(c)
		}
		delete(w.waiters, id)
	}
	for id, n := range w.latest {
		if time.Since(n.at) > keep {
			delete(w.latest, id)
		}
	}
}

// parseNotice reads the payload of a change notice: "id seq" for an
// append, "id" for a log dropped (every version is below it).
func parseNotice(payload string) (string, uint64) {
	i := strings.LastIndexByte(payload, ' ')
	if i < 0 {
		return payload, math.MaxUint64
	}
	v, err := strconv.ParseUint(payload[i+1:], 10, 64)
	if err != nil {
		return payload, math.MaxUint64
	}
	return payload[:i], v
}
