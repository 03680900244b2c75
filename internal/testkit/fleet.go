package testkit

import (
	"testing"

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

// RedisClient is a client of addr, one per replica as in a fleet; closed
// when t ends.
func RedisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
