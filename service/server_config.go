package service

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/redis/go-redis/v9"
)

// Config is the assembled configuration of a Server: its values and the
// Running parts the process hands it (logger, clock, telemetry, the fleet's
// stores).
type Config struct {
	config.Config

	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Now returns the current time; nil uses time.Now. Tests inject a clock.
	Now func() time.Time
	// Rand returns a uniform number in [0, 1) for backoff jitter; nil uses math/rand/v2.
	Rand func() float64
	// Telemetry receives traces and metrics; the zero value turns them off.
	Telemetry telemetry.Telemetry
	// Redis, when set, is the Redis the replicas of a fleet share (see
	// fleet.NewRedisClient); nil runs a single process, with everything in its
	// memory. With it, the circuit breakers and the per-key limits are
	// shared (local while Redis does not answer), and every completion's
	// events are logged in Redis too
	// (fleet.RedisLog, with the bounds of EventLog), so that Attach and
	// Session resume of an ended Session work on any replica; health is
	// NOT_SERVING while Redis does not answer, and completions then keep
	// their events in this replica's memory only. The caller closes it,
	// after Server.Close.
	Redis redis.UniversalClient
	// Log, when set, is the event log instead of the in-memory one: the
	// log the replicas of a fleet share (the Redis log), or one that
	// in-process replicas share in tests.
	Log fleet.Log
	// Leases, when set, make the server a replica of a fleet that shares
	// Log: each Stream with a resume grace runs under a lease its replica
	// renews, and a replica serving an Attach of a completion whose lease
	// lapsed (its replica died) takes it over (takeover.go). nil: a single
	// process, no leases.
	Leases fleet.Leases
	// Memory is the memory the process may use, from which the Auto
	// limits of Limits are derived when the server is made (New); its zero
	// value reads it (ReadMemoryLimit).
	Memory MemoryLimit
}

// DefaultConfig returns a configuration that serves the simulator only.
func DefaultConfig() Config {
	return Config{Config: config.Default()}
}

func (c *Config) fillDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	c.Config.FillDefaults()
	if c.Limits.MaxInFlight == config.Auto || c.Limits.MaxConcurrentStreams == config.Auto {
		if c.Memory.Bytes <= 0 {
			c.Memory = ReadMemoryLimit()
		}
		c.Limits = c.Limits.Resolve(c.Memory.Bytes)
	}
}
