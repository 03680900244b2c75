package guard

import (
	"context"
	"strings"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// The per-key limits of a fleet live in Redis: a key's rate is a GCRA
// (github.com/go-redis/redis_rate) at completiond:rate:{key}, its running
// completions a sorted set at completiond:inflight:{key} of slot ids scored
// by their expiry (Redis's clock, in ms). A replica renews its slots while
// their RPCs run; a dead replica's slots lapse after slotTTL, so its
// completions stop counting against the key. The process-wide in-flight cap
// stays local: it protects this replica.

// defaultSlotTTL is how long a slot outlives its replica's last renewal; the
// replica renews it every third of that.
const defaultSlotTTL = 30 * time.Second

// sharedLimits are the per-key limits in Redis.
type sharedLimits struct {
	g       *RedisGate
	rate    *redis_rate.Limiter
	slotTTL time.Duration
}

func NewSharedLimits(g *RedisGate) *sharedLimits {
	if g == nil {
		return nil
	}
	return &sharedLimits{g: g, rate: redis_rate.NewLimiter(rateKeys{g.rdb}), slotTTL: defaultSlotTTL}
}

// rateKeys is the client redis_rate runs its scripts with: it names the
// keys redis_rate calls "rate:{key}" completiond:rate:{key}, like the
// fleet's other keys.
type rateKeys struct{ redis.UniversalClient }

func rateKey(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		if strings.HasPrefix(k, "rate:") {
			k = "completiond:" + k
		}
		out[i] = k
	}
	return out
}

func (r rateKeys) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.UniversalClient.Eval(ctx, script, rateKey(keys), args...)
}

func (r rateKeys) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return r.UniversalClient.EvalSha(ctx, sha1, rateKey(keys), args...)
}

func (r rateKeys) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.UniversalClient.EvalRO(ctx, script, rateKey(keys), args...)
}

func (r rateKeys) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return r.UniversalClient.EvalShaRO(ctx, sha1, rateKey(keys), args...)
}

func (r rateKeys) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return r.UniversalClient.Del(ctx, rateKey(keys)...)
}

// Admit counts one more completion of key against l's limits in Redis, or
// refuses it with the status of the local limits. shared is false when
// Redis could not answer: the caller then applies the local limits.
func (s *sharedLimits) Admit(key string, l config.Limits) (release func(), shared bool, err error) {
	var slot *heldSlot
	if l.KeyMaxConcurrent > 0 {
		id := randomToken()
		ctx, cancel := s.g.ctx()
		res, err := takeSlotScript.Run(ctx, s.g.rdb, key, id, l.KeyMaxConcurrent, s.slotTTL.Milliseconds()).Int64Slice()
		cancel()
		if s.g.observe("key concurrency", err) != nil {
			return nil, false, nil
		}
		if res[0] == 0 {
			return nil, true, concurrencyRefusal(key, int(res[1]))
		}
		slot = &heldSlot{s: s, key: key, id: id}
	}
	if l.KeyRate > 0 {
		ctx, cancel := s.g.ctx()
		res, err := s.rate.Allow(ctx, key, redis_rate.Limit{
			Rate: 1, Period: time.Duration(float64(time.Second) / l.KeyRate), Burst: max(l.KeyBurst, 1),
		})
		cancel()
		if s.g.observe("key rate", err) != nil {
			slot.drop()
			return nil, false, nil
		}
		if res.Allowed == 0 {
			slot.drop()
			return nil, true, rateRefusal(key, l.KeyRate, res.RetryAfter)
		}
	}
	if slot == nil {
		return func() {}, true, nil
	}
	slot.stop, slot.done = make(chan struct{}), make(chan struct{})
	go slot.renew()
	return slot.release, true, nil
}

// heldSlot is one running completion's slot in its key's set.
type heldSlot struct {
	s          *sharedLimits
	key, id    string
	stop, done chan struct{}
}

// renew keeps the slot alive while its RPC runs.
func (h *heldSlot) renew() {
	renewLoop(h.s.slotTTL/3, h.stop, h.done, func() {
		ctx, cancel := h.s.g.ctx()
		err := renewSlotScript.Run(ctx, h.s.g.rdb, h.key, h.id, h.s.slotTTL.Milliseconds()).Err()
		cancel()
		h.s.g.observe("key concurrency renew", err)
	})
}

// release stops the renewal and gives the slot back.
func (h *heldSlot) release() {
	close(h.stop)
	<-h.done
	h.drop()
}

// drop gives the slot back; if Redis fails, the slot lapses by itself.
func (h *heldSlot) drop() {
	if h == nil {
		return
	}
	ctx, cancel := h.s.g.ctx()
	defer cancel()
	h.s.g.observe("key concurrency release", h.s.g.rdb.ZRem(ctx, inflightKey(h.key), h.id).Err())
}
