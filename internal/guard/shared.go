package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// The circuit breakers and the per-key limits are shared by the replicas of
// a fleet through Config.Redis. Whatever Redis does, a completion never fails
// because of it: when an operation on the shared state fails, the breakers
// and the limits fall back to the replica's own local state until the
// server's Health sees Redis answer again.

// sharedOpTimeout bounds one Redis operation of the shared breakers and
// limits, so that an unresponsive Redis delays a completion by this much at
// most before the local fallback answers.
const sharedOpTimeout = 250 * time.Millisecond

// Health is the server's one tracker of whether Redis answers
// (fleet.Health): the breakers and limits use the shared state while it
// says Redis is up, and tell it at once when an operation fails; its PINGs
// say when Redis is back. One tracker, so that the event log, the shared
// state and the health check never disagree about Redis.
type Health interface {
	// Up reports whether Redis answers.
	Up() bool
	// Failed marks Redis down after a failed operation.
	Failed(err error)
}

// RedisGate says whether the shared state in Redis is to be used.
type RedisGate struct {
	rdb    redis.UniversalClient
	health Health
	log    *slog.Logger
}

// NewRedisGate returns the gate of rdb, which health follows, logging to
// log; nil (no shared state) when rdb is nil.
func NewRedisGate(rdb redis.UniversalClient, health Health, log *slog.Logger) *RedisGate {
	if rdb == nil {
		return nil
	}
	return &RedisGate{rdb: rdb, health: health, log: log}
}

// usable reports whether to use the shared state now.
func (g *RedisGate) usable() bool { return g != nil && g.health.Up() }

// ctx is the context of one shared operation.
func (g *RedisGate) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sharedOpTimeout)
}

// observe records the outcome of an operation on Redis: a failure marks
// Redis down, which makes the breakers and limits local-only until a PING
// answers. It returns err (nil for redis.Nil, which is an answer).
func (g *RedisGate) observe(what string, err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		g.health.Failed(fmt.Errorf("%s: %w", what, err))
	}
	return err
}

// randomToken returns a random hex string: lock tokens, slot ids.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// renewLoop calls renew every period until stop is closed, then closes
// done: the keep-alive of a Redis key with an expiry (a breaker's probe,
// a key's concurrency slot) while its holder runs, so that a dead
// replica's keys lapse by themselves.
func renewLoop(period time.Duration, stop <-chan struct{}, done chan<- struct{}, renew func()) {
	defer close(done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			renew()
		}
	}
}
