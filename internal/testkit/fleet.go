package testkit

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// NoLeaks checks, when t ends (after its other cleanups), that the
// goroutines t started are gone: renewals, Redis clients, servers.
func NoLeaks(t *testing.T) {
	t.Helper()
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, current) })
}

// NoLeaksAfterOutage is NoLeaks for a test that takes Redis away: once
// the test's clients are closed, it first waits (up to 5 s) for the
// goroutine that go-redis's pool starts to dial again after its dials
// failed, which ends at its next try (a second apart) once Redis answers
// or the pool is closed, not at the client's Close.
func NoLeaksAfterOutage(t *testing.T) {
	t.Helper()
	NoLeaks(t)
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for redialing() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// redialing reports whether a goroutine of a go-redis pool is dialling
// again after failed dials.
func redialing() bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("pool.(*ConnPool).tryDial"))
}

// RedisClient is a client of addr, one per replica as in a fleet; closed
// when t ends.
func RedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ServerRedisClient is a client of addr as a server's event log and
// leases use one: deadlines from the context, a second to dial, read and
// write, so that a Redis that is down fails an operation instead of
// holding it; closed when t ends.
func ServerRedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ServerClusterClient is ServerRedisClient for the Redis Cluster of
// addrs (one of them is enough); closed when t ends.
func ServerClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// CommandCounter is a redis.Hook that counts the commands a client sends,
// a pipeline's each; the health check's PINGs, on their own clock, are
// left out.
type CommandCounter struct{ n atomic.Int64 }

// Count is the number of commands counted so far.
func (c *CommandCounter) Count() int64 { return c.n.Load() }

// DialHook implements redis.Hook.
func (c *CommandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *CommandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "ping" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *CommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
