package service

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// Route is one configured upstream route: what the machine knows about it,
// the provider that serves it, and its fallback chain.
type Route struct {
	// Spec is the route as the recovery machine sees it.
	Spec recovery.Route
	// Upstream serves the route.
	Upstream provider.Provider
	// Fallbacks are the routes tried after this one, in order.
	Fallbacks []string
	// Timeouts bound each attempt on this route.
	Timeouts provider.Timeouts
	// ThinkingBudget, when positive, asks the route's model to think with
	// about this many tokens (Anthropic extended thinking; other providers
	// ignore it). Spec.Thinking must be set with it, which keeps the
	// machine from continuing by prefill there; LoadFile sets both from
	// thinking_budget.
	ThinkingBudget int
}

// Limits are the server's bounds on what a request may ask for.
type Limits struct {
	// MaxOutputTokens is the largest max_output_tokens a request may set.
	MaxOutputTokens int
	// MaxRequestBytes is the largest encoded request accepted.
	MaxRequestBytes int
	// MaxImageBytes is the largest image accepted before calling.
	MaxImageBytes int
	// MaxMessages is the largest number of messages accepted.
	MaxMessages int
	// MaxTools is the largest number of tools accepted.
	MaxTools int
	// MaxMetadata is the largest number of metadata entries accepted.
	MaxMetadata int

	// MaxInFlight bounds the completions (Stream, Complete, Session) the
	// server runs at once; one more is shed with UNAVAILABLE and RetryInfo.
	// 0 is no bound.
	MaxInFlight int
	// KeyMaxConcurrent bounds the completions one authenticated key runs at
	// once; one more is refused with RESOURCE_EXHAUSTED and RetryInfo. 0 is
	// no bound.
	KeyMaxConcurrent int
	// KeyRate is how many completions per second one authenticated key may
	// start, with bursts of KeyBurst; one more is refused with
	// RESOURCE_EXHAUSTED and a RetryInfo saying when a token is due. 0 is no
	// bound.
	KeyRate float64
	// KeyBurst is the burst of KeyRate (at least 1).
	KeyBurst int
	// MaxConcurrentStreams bounds the concurrent RPCs of one connection;
	// more wait in the client. 0 is gRPC's default (no bound).
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is the shortest interval between a client's pings the
	// server tolerates; a client pinging more often is disconnected. 0 is
	// gRPC's default (5 min).
	KeepaliveMinTime time.Duration
	// KeepaliveTime is how long a connection may be silent before the server
	// pings it, and KeepaliveTimeout how long the answer may take before the
	// connection is closed. 0 is gRPC's default (2 h, 20 s).
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxConnectionIdle closes a connection without RPCs for this long; 0 is
	// no bound.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge sends GOAWAY to a connection this old, so that clients
	// reconnect and spread over replicas; its RPCs may then run for
	// MaxConnectionAgeGrace before the connection is closed. 0 is no bound.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// DefaultLimits returns the limits used when the configuration sets none.
func DefaultLimits() Limits {
	return Limits{
		MaxOutputTokens: 64000,
		MaxRequestBytes: 8 << 20,
		MaxImageBytes:   5 << 20,
		MaxMessages:     1000,
		MaxTools:        128,
		MaxMetadata:     64,

		MaxInFlight:           512,
		KeyMaxConcurrent:      64,
		KeyRate:               20,
		KeyBurst:              40,
		MaxConcurrentStreams:  128,
		KeepaliveMinTime:      10 * time.Second,
		KeepaliveTime:         2 * time.Minute,
		KeepaliveTimeout:      20 * time.Second,
		MaxConnectionIdle:     15 * time.Minute,
		MaxConnectionAge:      30 * time.Minute,
		MaxConnectionAgeGrace: 20 * time.Minute,
	}
}

// Config is the assembled configuration of a Server.
type Config struct {
	// DefaultRoute is used when a request names none.
	DefaultRoute string
	// Routes are the configured routes by name.
	Routes map[string]*Route
	// Policy is the server's recovery policy; requests may only tighten it.
	Policy recovery.Policy
	// Limits bound requests.
	Limits Limits
	// Breaker configures the per-route circuit breakers.
	Breaker BreakerSettings
	// CallerWait bounds how long a Session waits for the caller's tool
	// results or stop-hook verdict (default 5 min).
	CallerWait time.Duration
	// StreamDrain bounds how long in-flight streams may run after shutdown starts.
	StreamDrain time.Duration
	// AbortGrace is how long GRPC.Drain waits, once it has aborted the
	// in-flight completions, for their handlers to return before it stops
	// the server hard (default 3 s; see DefaultAbortGrace).
	AbortGrace time.Duration
	// SessionStartWait bounds how long a Session may stay open before its
	// first message, the start, arrives (default 10 s; see
	// DefaultSessionStartWait). A Session silent for longer ends with
	// DEADLINE_EXCEEDED.
	SessionStartWait time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Now returns the current time; nil uses time.Now. Tests inject a clock.
	Now func() time.Time
	// Rand returns a uniform number in [0, 1) for backoff jitter; nil uses math/rand/v2.
	Rand func() float64
	// Telemetry receives traces and metrics; the zero value turns them off.
	Telemetry Telemetry
	// Auth says who may call; the zero value lets everybody call.
	Auth Auth
	// TLS names the certificate files of the server; ServerTLS reads them.
	// The zero value serves plaintext.
	TLS TLSFiles
	// DisableReflection turns the gRPC reflection service off.
	DisableReflection bool
	// EventLog bounds the in-memory log of every completion's events that
	// Attach reads; zero fields take DefaultEventLogLimits.
	EventLog EventLogLimits
	// MaxResumeGrace bounds the resume_grace a request may ask for
	// (default 10 min; see DefaultMaxResumeGrace).
	MaxResumeGrace time.Duration
	// Redis, when set, is the Redis the replicas of a fleet share (see
	// NewRedisClient); nil runs a single process, with everything in its
	// memory. With it, the circuit breakers and the per-key limits are
	// shared (local while Redis does not answer), and every completion's
	// events are logged in Redis too
	// (RedisEventLog, with the bounds of EventLog), so that Attach and
	// Session resume of an ended Session work on any replica; health is
	// NOT_SERVING while Redis does not answer, and completions then keep
	// their events in this replica's memory only. The caller closes it,
	// after Server.Close.
	Redis redis.UniversalClient
	// RedisURL is the URL Redis was configured with, as the file or the
	// flags gave it (a password in it included): what NewRedisClient
	// builds Redis from. The server itself uses Redis only.
	RedisURL string
	// RedisPing is how often health PINGs Redis, each PING bounded by it
	// (default 1 s; see DefaultRedisPing).
	RedisPing time.Duration
	// Log, when set, is the event log instead of the in-memory one: the
	// log the replicas of a fleet share (the Redis log), or one that
	// in-process replicas share in tests.
	Log EventLog
	// Leases, when set, make the server a replica of a fleet that shares
	// Log: each Stream with a resume grace runs under a lease its replica
	// renews, and a replica serving an Attach of a completion whose lease
	// lapsed (its replica died) takes it over (takeover.go). nil: a single
	// process, no leases.
	Leases Leases
	// LeaseTTL is the lease length the file configuration asks for
	// (redis.lease_ttl), for whoever builds Leases (completiond: with
	// NewRedisLeases); 0: DefaultLeaseTTL. The server itself uses Leases.
	LeaseTTL time.Duration
	// Replica names this replica in leases and logs (default host:pid).
	Replica string
}

// DefaultMaxResumeGrace is the default Config.MaxResumeGrace.
const DefaultMaxResumeGrace = 10 * time.Minute

const (
	// DefaultAbortGrace is Config.AbortGrace when unset: enough for a
	// handler to send its typed end once its completion is aborted.
	DefaultAbortGrace = 3 * time.Second
	// DefaultSessionStartWait is Config.SessionStartWait when unset.
	DefaultSessionStartWait = 10 * time.Second
)

// SimRoutes returns the routes of the embedded simulator: a primary route
// with assistant prefill, a fallback without it, a large-context route for
// prompts that are too long, and a small-context route that shows the
// blocking limit and auto-compaction.
func SimRoutes(s *sim.Provider) map[string]*Route {
	r := func(name, model string, window, maxOut int, prefill bool, fallbacks ...string) *Route {
		return &Route{
			Spec: recovery.Route{Name: name, Provider: s.Kind(), Model: model, ContextWindow: window,
				MaxOutputTokens: maxOut, Prefill: prefill},
			Upstream:  s,
			Fallbacks: fallbacks,
			Timeouts:  provider.Timeouts{Headers: 10 * time.Second, FirstToken: 30 * time.Second, Idle: 2 * time.Second, Total: 5 * time.Minute},
		}
	}
	return map[string]*Route{
		"sim":           r("sim", "sim-1", 200_000, 64_000, true, "sim-fallback", "sim-large"),
		"sim-fallback":  r("sim-fallback", "sim-2", 200_000, 32_000, false, "sim-large"),
		"sim-noprefill": r("sim-noprefill", "sim-1", 200_000, 64_000, false, "sim-fallback", "sim-large"),
		"sim-large":     r("sim-large", "sim-large", 1_000_000, 64_000, true),
		"sim-small":     r("sim-small", "sim-small", 16_000, 8_000, true, "sim-large"),
	}
}

// DefaultConfig returns a configuration that serves the simulator only.
func DefaultConfig() Config {
	return Config{
		DefaultRoute: "sim",
		Routes:       SimRoutes(sim.New(sim.Config{Pace: 20 * time.Millisecond})),
		Policy:       recovery.DefaultPolicy(),
		Limits:       DefaultLimits(),
		StreamDrain:  10 * time.Second,
	}
}

// check reports the first inconsistency in c: a missing default route, a
// route without a provider, a thinking budget on a route the machine does
// not know thinks, or a fallback that names no route.
func (c *Config) check() error {
	if err := c.Policy.Check(); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if _, ok := c.Routes[c.DefaultRoute]; !ok {
		return fmt.Errorf("default route %q is not configured", c.DefaultRoute)
	}
	if err := c.Auth.check(c.Routes); err != nil {
		return err
	}
	for name, r := range c.Routes {
		if r.Upstream == nil {
			return fmt.Errorf("route %q has no provider", name)
		}
		if r.ThinkingBudget > 0 && !r.Spec.Thinking {
			return fmt.Errorf("route %q has a thinking budget but Spec.Thinking is not set", name)
		}
		for _, fb := range r.Fallbacks {
			if _, ok := c.Routes[fb]; !ok {
				return fmt.Errorf("route %q falls back to unknown route %q", name, fb)
			}
		}
	}
	return nil
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
	if c.CallerWait <= 0 {
		c.CallerWait = 5 * time.Minute
	}
	if c.AbortGrace <= 0 {
		c.AbortGrace = DefaultAbortGrace
	}
	if c.MaxResumeGrace <= 0 {
		c.MaxResumeGrace = DefaultMaxResumeGrace
	}
	if c.RedisPing <= 0 {
		c.RedisPing = DefaultRedisPing
	}
	c.EventLog.fillDefaults()
	if c.Replica == "" {
		host, _ := os.Hostname()
		c.Replica = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if c.SessionStartWait <= 0 {
		c.SessionStartWait = DefaultSessionStartWait
	}
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits()
	}
	if c.Policy == (recovery.Policy{}) {
		c.Policy = recovery.DefaultPolicy()
	}
}

// chain returns the routes a request will use: its route (or the default),
// then its fallbacks (or the route's configured chain), without repeats.
func (c *Config) chain(route string, fallbacks []string) []*Route {
	if route == "" {
		route = c.DefaultRoute
	}
	if len(fallbacks) == 0 {
		fallbacks = c.Routes[route].Fallbacks
	}
	out := make([]*Route, 0, 1+len(fallbacks))
	if r, ok := c.Routes[route]; ok {
		out = append(out, r)
	}
	for i, name := range fallbacks {
		if r, ok := c.Routes[name]; ok && name != route && !slices.Contains(fallbacks[:i], name) {
			out = append(out, r)
		}
	}
	return out
}
