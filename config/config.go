package config

import (
	"crypto/sha256"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
	"github.com/redis/go-redis/v9"
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
	// MaxThinkingBudget is the largest thinking budget a request may ask
	// of the route (kinds that think with a budget); 0 takes none.
	// LoadFile sets it from max_thinking_budget, else from thinking_budget.
	MaxThinkingBudget int
	// MaxReasoningEffort is the most reasoning effort a request may ask of
	// the route (kinds that reason with an effort: "minimal", "low",
	// "medium", "high"); "" takes none.
	MaxReasoningEffort string
	// Effort is the reasoning effort every call of the route sends
	// (OpenAI reasoning_effort); "" sends none. Set per completion by
	// Reasoning.
	Effort string
	// Interleaved lets the route's model think between tool calls. Set per
	// completion by Reasoning.
	Interleaved bool
	// StructuredOutput is how the route asks its upstream for an answer
	// that satisfies the request's output schema.
	StructuredOutput provider.StructuredOutput
	// Prices are what the route's tokens cost; the zero value, a route
	// without prices, leaves the cost of its attempts unknown.
	Prices Prices
}

// Capabilities is what the route can honour of a request's parameters:
// its provider kind's row of the capability table with the route's own
// ceilings, less what its own settings rule out (a thinking route's
// sampling and forced tool use).
func (r *Route) Capabilities() Capabilities {
	c := KindCapabilities(r.Spec.Provider)
	if c.ThinkingBudget {
		c.MaxThinkingBudget = r.MaxThinkingBudget
	}
	if c.ReasoningEffort {
		c.MaxReasoningEffort = r.MaxReasoningEffort
	}
	if r.Spec.Thinking {
		c = c.WithThinking()
	}
	switch r.StructuredOutput {
	case provider.StructuredTool:
		c.StructuredOutput = StructuredByTool
	case provider.StructuredHook:
		c.StructuredOutput = StructuredByStopHook
	default: // native: one way, where the kind has two
		if c.StructuredOutput == StructuredNativeOrTool {
			c.StructuredOutput = StructuredNatively
		}
	}
	return c
}

// ReasoningEfforts are the reasoning efforts, least first.
var ReasoningEfforts = []string{"minimal", "low", "medium", "high"}

// EffortRank is effort's place in ReasoningEfforts (0 for minimal), or -1
// for an unknown effort.
func EffortRank(effort string) int { return slices.Index(ReasoningEfforts, effort) }

// EffortBudgets are the thinking budgets a reasoning effort stands for on
// a route that thinks with a budget (capped at its MaxThinkingBudget).
var EffortBudgets = map[string]int{"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}

// BudgetEffort is the reasoning effort a thinking budget stands for on a
// route that reasons with an effort: up to 2048 low, up to 8192 medium,
// above high.
func BudgetEffort(budget int) string {
	switch {
	case budget <= 2048:
		return "low"
	case budget <= 8192:
		return "medium"
	}
	return "high"
}

// Reasoning is the route as one completion calls it when its request asks
// for reasoning: a copy that thinks with budget, or the budget effort
// stands for, when the route thinks with a budget, and reasons with effort,
// or the effort budget stands for, when it reasons with an effort — each
// capped at the route's ceiling (the request validation refuses a value
// over it; a mapped one is capped). A zero budget and an empty effort
// leave the route as it is, with interleaved thinking added when asked.
// The machine sees a thinking route (Spec.Thinking): no prefill there.
func (r *Route) Reasoning(budget int, effort string, interleaved bool) *Route {
	if budget <= 0 && effort == "" && !interleaved {
		return r
	}
	c := *r
	c.Interleaved = interleaved
	kind := KindCapabilities(r.Spec.Provider)
	if kind.ThinkingBudget && (budget > 0 || effort != "") {
		b := budget
		if b <= 0 {
			b = EffortBudgets[effort]
		}
		if r.MaxThinkingBudget > 0 {
			b = min(b, r.MaxThinkingBudget)
		}
		c.ThinkingBudget, c.Spec.Thinking = max(b, MinThinkingBudget), true
	}
	if kind.ReasoningEffort && (budget > 0 || effort != "") {
		e := effort
		if e == "" {
			e = BudgetEffort(budget)
		}
		if m := EffortRank(r.MaxReasoningEffort); m >= 0 && EffortRank(e) > m {
			e = r.MaxReasoningEffort
		}
		c.Effort = e
	}
	return &c
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

	// MaxInFlight bounds the completions (Stream, Complete, Session,
	// Attach) the server runs at once; one more is shed at once with
	// UNAVAILABLE, ErrorInfo OVERLOADED and RetryInfo. 0 is no bound; Auto
	// (the default) derives it from the memory the process may use when
	// the server starts (Resolve, InFlightFor).
	MaxInFlight int
	// KeyMaxConcurrent bounds the completions one authenticated key runs at
	// once; one more is refused with RESOURCE_EXHAUSTED and RetryInfo. 0,
	// the default, is no bound: a backend holding thousands of streams
	// under one key is normal load, and MaxInFlight already protects the
	// process. It is for sharing a server between callers fairly.
	KeyMaxConcurrent int
	// KeyRate is how many completions per second one authenticated key may
	// start, with bursts of KeyBurst; one more is refused with
	// RESOURCE_EXHAUSTED and a RetryInfo saying when a token is due. 0, the
	// default, is no bound (as KeyMaxConcurrent, an opt-in).
	KeyRate float64
	// KeyBurst is the burst of KeyRate (at least 1).
	KeyBurst int
	// MaxConcurrentStreams bounds the concurrent RPCs of one connection
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, and grpc-go's bound on the
	// handlers one connection runs at once); more wait in the client,
	// silently. 0 is no bound; Auto (the default) is twice MaxInFlight
	// once resolved, so that one connection may carry every completion
	// the server admits, and the ones past MaxInFlight are refused at once
	// by the handler rather than held in the client.
	MaxConcurrentStreams int
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

	// MaxConnections bounds the connections the server holds at once,
	// handshaking or not; past it, new ones wait in the kernel's backlog
	// until one closes. 0 is no bound.
	MaxConnections int
	// MaxHandshakes bounds the connections still in their handshake (TLS
	// and the HTTP/2 preface) at once, part of MaxConnections; past it,
	// new ones wait in the backlog. 0 is no bound.
	MaxHandshakes int
	// HandshakeTimeout bounds a connection's handshake; one that takes
	// longer is closed. 0 is gRPC's default (120 s).
	HandshakeTimeout time.Duration
	// MaxHealthWatches bounds the Health.Watch streams open at once,
	// which need no credentials; one more is refused on its headers with
	// RESOURCE_EXHAUSTED. 0 is no bound.
	MaxHealthWatches int
	// MaxHealthChecks bounds the Health.Check calls running at once; one
	// more is refused on its headers with RESOURCE_EXHAUSTED. 0 is no
	// bound.
	MaxHealthChecks int
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

		MaxInFlight:           Auto,
		KeyBurst:              40,
		MaxConcurrentStreams:  Auto,
		KeepaliveMinTime:      10 * time.Second,
		KeepaliveTime:         2 * time.Minute,
		KeepaliveTimeout:      20 * time.Second,
		MaxConnectionIdle:     15 * time.Minute,
		MaxConnectionAge:      30 * time.Minute,
		MaxConnectionAgeGrace: 20 * time.Minute,
		MaxConnections:        4096,
		MaxHandshakes:         256,
		HandshakeTimeout:      10 * time.Second,
		MaxHealthWatches:      256,
		MaxHealthChecks:       64,
	}
}

// Auto, as Limits.MaxInFlight or Limits.MaxConcurrentStreams, has the
// server derive the limit from the memory the process may use when it
// starts (Limits.Resolve).
const Auto = -1

// StreamBudget is the memory an Auto MaxInFlight gives each completion
// (and the garbage collector as much again, see InFlightFor): about three
// times what a held stream costs in the load benchmark (docs/performance.md
// has the measurement, dated), for requests and answers larger than the
// benchmark's one-line prompt and 50 tokens.
const StreamBudget = 128 << 10

// ReservedMemory is what an Auto MaxInFlight leaves aside before it
// budgets streams: the event log's default bound (256 MiB, all of it
// should every completion be logged at once) and the process's own
// baseline.
const ReservedMemory = 320 << 20

// MinAutoInFlight is the least an Auto MaxInFlight gives, however little
// memory there is: a server that sheds its 65th completion is of no use,
// and a process that small is better given more memory.
const MinAutoInFlight = 64

// InFlightFor is the Auto MaxInFlight of a process that may use mem
// bytes: half of what is left after ReservedMemory — the other half is
// the garbage collector's headroom (at GOGC=100 the heap grows to twice
// what is live before a collection) — divided by StreamBudget, and at
// least MinAutoInFlight. 512 MiB gives 768, 1 GiB 2 816, 4 GiB 15 104.
func InFlightFor(mem int64) int {
	n := (mem - ReservedMemory) / 2 / StreamBudget
	return int(max(n, MinAutoInFlight))
}

// Resolve returns l with its Auto limits made numbers for a process that
// may use mem bytes: MaxInFlight is InFlightFor(mem), and
// MaxConcurrentStreams twice MaxInFlight (0, no bound, when MaxInFlight is
// 0).
func (l Limits) Resolve(mem int64) Limits {
	if l.MaxInFlight == Auto {
		l.MaxInFlight = InFlightFor(mem)
	}
	if l.MaxConcurrentStreams == Auto {
		l.MaxConcurrentStreams = 2 * l.MaxInFlight
	}
	return l
}

// Config is what configures a Server that is a value: routes, policy,
// limits, durations and the names of files and stores; LoadFile reads it.
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
	// RedisURL is the URL Redis was configured with, as the file or the
	// flags gave it (a password in it included): what NewRedisClient
	// builds Redis from. The server itself uses Redis only.
	RedisURL string
	// RedisCluster says RedisURL names a node of a Redis Cluster
	// (redis.cluster): NewRedisClient builds a cluster client, and the
	// fleet lays its keys out in shards (fleet.ClusterShards).
	RedisCluster bool
	// RedisPing is how often health PINGs Redis, each PING bounded by it
	// (default 1 s; see DefaultRedisPing).
	RedisPing time.Duration
	// LeaseTTL is the lease length the file configuration asks for
	// (redis.lease_ttl), for whoever builds Leases (completiond: with
	// NewRedisLeases); 0: DefaultLeaseTTL. The server itself uses Leases.
	LeaseTTL time.Duration
	// RedisCommitDelay is the longest the group commit of the fleet's
	// event log waits for more events before it writes a batch to Redis,
	// while other completions of the replica are writing (redis.commit_delay;
	// 0: DefaultRedisCommitDelay): a longer one makes fewer, larger
	// batches (less Redis and replica CPU per token) for that much more
	// time before an event reaches its caller. An idle replica's events
	// never wait for it.
	RedisCommitDelay time.Duration
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
			// The sim reasons on request, to show thinking from grpcurl.
			MaxThinkingBudget: 32_000, MaxReasoningEffort: "high", StructuredOutput: provider.StructuredHook,
			Timeouts: provider.Timeouts{Headers: 10 * time.Second, FirstToken: 30 * time.Second, Idle: 2 * time.Second, Total: 5 * time.Minute},
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

// Default returns configuration values that serve the simulator only.
func Default() Config {
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
func (c *Config) Check() error {
	if err := c.Policy.Check(); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if d := c.RedisCommitDelay; d != 0 {
		if err := CheckRedisCommitDelay(d); err != nil {
			return fmt.Errorf("redis commit delay: %w", err)
		}
	}
	if _, ok := c.Routes[c.DefaultRoute]; !ok {
		return fmt.Errorf("default route %q is not configured", c.DefaultRoute)
	}
	if err := c.Auth.Check(c.Routes); err != nil {
		return err
	}
	if l := c.Limits; l.MaxInFlight < Auto || l.MaxConcurrentStreams < Auto {
		return fmt.Errorf("limits: max in flight %d and max streams per connection %d must be counts (0: no bound) or Auto", l.MaxInFlight, l.MaxConcurrentStreams)
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

// fillDefaults gives every unset value its default.
func (c *Config) FillDefaults() {
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
	c.EventLog.FillDefaults()
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
func (c *Config) Chain(route string, fallbacks []string) []*Route {
	if route == "" {
		route = c.DefaultRoute
	}
	if r, ok := c.Routes[route]; ok && len(fallbacks) == 0 {
		fallbacks = r.Fallbacks
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

// BreakerSettings configure the circuit breaker of every route.
type BreakerSettings struct {
	// Failures is the number of consecutive upstream failures that opens a
	// route's circuit (default 5); negative disables the breakers.
	Failures int
	// Cooldown is how long an open circuit stays open before one probe is
	// let through (default 30 s).
	Cooldown time.Duration
}

// EventLogLimits bound the in-memory event log.
type EventLogLimits struct {
	// MaxEvents bounds the events kept per completion (default 10 000);
	// past it the oldest events are dropped, and an attach that would need
	// them is OUT_OF_RANGE.
	MaxEvents int
	// MaxCompletions bounds the completions kept (default 1 000).
	MaxCompletions int
	// MaxBytes bounds the encoded size of all events kept (default 256 MiB).
	MaxBytes int64
	// Retention is how long a completion's log is kept after its result
	// (default 5 min).
	Retention time.Duration
}

// DefaultEventLogLimits returns the limits used when the configuration sets none.
func DefaultEventLogLimits() EventLogLimits {
	return EventLogLimits{MaxEvents: 10_000, MaxCompletions: 1_000, MaxBytes: 256 << 20, Retention: 5 * time.Minute}
}

func (l *EventLogLimits) FillDefaults() {
	d := DefaultEventLogLimits()
	if l.MaxEvents <= 0 {
		l.MaxEvents = d.MaxEvents
	}
	if l.MaxCompletions <= 0 {
		l.MaxCompletions = d.MaxCompletions
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.Retention <= 0 {
		l.Retention = d.Retention
	}
}

// TLSFiles name the PEM files of the server's TLS.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate chain and private
	// key. Both empty: plaintext.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the CA certificates that sign client
	// certificates (mTLS). A client certificate is then verified when the
	// client sends one, and authenticates the caller (see Auth).
	ClientCAFile string
	// ReloadInterval is how often, at most, a handshake checks whether the
	// certificate or key file changed; 0 is DefaultTLSReload.
	ReloadInterval time.Duration
}

// DefaultTLSReload is how often, at most, the certificate files are checked
// for a change.
const DefaultTLSReload = 5 * time.Second

// On reports whether the server serves TLS.
func (f TLSFiles) On() bool { return f.CertFile != "" || f.KeyFile != "" }

// Auth says who may call the server. With no keys and ClientCertificates
// off, authentication is off and every caller may use every route.
type Auth struct {
	// Keys are the API keys callers present as `authorization: Bearer <key>`.
	Keys []APIKey
	// ClientCertificates lets a caller authenticate with a client certificate
	// the server's TLS configuration verified (mTLS, --tls-client-ca): the
	// certificate's CommonName or one of its DNS SANs names the key whose
	// routes it may use; a certificate that names no key may use every route,
	// under its CommonName.
	ClientCertificates bool
}

// On reports whether callers must authenticate.
func (a Auth) On() bool { return len(a.Keys) > 0 || a.ClientCertificates }

// APIKey is one caller's key: its name, which appears in logs, spans and
// metrics, the SHA-256 of the key itself, which appears nowhere, and the
// routes it may use.
type APIKey struct {
	// Name identifies the caller in logs, spans and metrics.
	Name string
	// SHA256 is the SHA-256 digest of the key; all zero for an entry that
	// only names a client certificate.
	SHA256 [sha256.Size]byte
	// Routes are the routes the key may use; nil means every route.
	Routes []string
	// Budget bounds what the key spends per period; nil is no bound.
	Budget *Budget
}

// HashKey returns the SHA-256 digest of key, as APIKey.SHA256 holds it.
func HashKey(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// check reports a key without a name, two keys of one name, two keys with
// one key, and a key allowed a route that is not configured.
func (a Auth) Check(routes map[string]*Route) error {
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]string{}
	for i, k := range a.Keys {
		field := fmt.Sprintf("auth.keys[%d]", i)
		if k.Name == "" {
			return fmt.Errorf("%s.name: a name is required", field)
		}
		if names[k.Name] {
			return fmt.Errorf("%s.name: key %q is declared twice", field, k.Name)
		}
		names[k.Name] = true
		if k.SHA256 != ([sha256.Size]byte{}) {
			if other, ok := sums[k.SHA256]; ok {
				return fmt.Errorf("%s: key %q has the same key as %q", field, k.Name, other)
			}
			sums[k.SHA256] = k.Name
		}
		if k.Routes != nil && len(k.Routes) == 0 {
			return fmt.Errorf("%s.routes: an empty list allows nothing (write all for every route)", field)
		}
		for _, r := range k.Routes {
			if _, ok := routes[r]; !ok {
				return fmt.Errorf("%s.routes: unknown route %q", field, r)
			}
		}
	}
	return nil
}

// DefaultRedisPing is Config.RedisPing when unset.
const DefaultRedisPing = time.Second

// DefaultLeaseTTL is the lease length when the configuration sets none:
// a dead replica's completions are taken over about this long after its
// death (its owner renews at a third of it).
const DefaultLeaseTTL = 2 * time.Second

// DefaultRedisCommitDelay is the group commit's delay when the
// configuration sets none (Config.RedisCommitDelay).
const DefaultRedisCommitDelay = 500 * time.Microsecond

// MaxRedisCommitDelay bounds Config.RedisCommitDelay: every event of a
// busy replica may wait that long before its caller sees it.
const MaxRedisCommitDelay = 100 * time.Millisecond

// CheckRedisCommitDelay says whether d is a commit delay the server takes:
// positive and at most MaxRedisCommitDelay.
func CheckRedisCommitDelay(d time.Duration) error {
	if d <= 0 || d > MaxRedisCommitDelay {
		return fmt.Errorf("%s is not a duration in (0, %s]", d, MaxRedisCommitDelay)
	}
	return nil
}

// ParseRedisURL checks a Redis URL and returns its options; the error
// names the URL without its password.
func ParseRedisURL(rawURL string) (*redis.Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		return nil, fmt.Errorf("redis url %s: want redis://[user[:password]@]host:port[/db] or rediss://…", RedactRedisURL(rawURL))
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, redisURLError(rawURL, u, err)
	}
	return opt, nil
}

// redisURLError is go-redis's error about the URL rawURL (parsed as u),
// which names it without its password.
func redisURLError(rawURL string, u *url.URL, err error) error {
	msg := err.Error()
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return fmt.Errorf("redis url %s: %s", RedactRedisURL(rawURL), msg)
}

// ParseRedisClusterURL checks the URL of a Redis Cluster's node,
// redis://[user[:password]@]host:port or rediss://, more nodes to start
// from as ?addr=host:port parameters, and returns its options; the error
// names the URL without its password. A Cluster has one database: a path
// other than /0 is refused.
func ParseRedisClusterURL(rawURL string) (*redis.ClusterOptions, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		return nil, fmt.Errorf("redis url %s: want redis://[user[:password]@]host:port[?addr=host:port…] or rediss://… for a Redis Cluster", RedactRedisURL(rawURL))
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return nil, fmt.Errorf("redis url %s: a Redis Cluster has database 0 only", RedactRedisURL(rawURL))
	}
	u.Path = ""
	opt, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return nil, redisURLError(rawURL, u, err)
	}
	return opt, nil
}

// CheckRedisURL checks rawURL as ParseRedisURL does, or as
// ParseRedisClusterURL does for a Redis Cluster.
func CheckRedisURL(rawURL string, cluster bool) error {
	var err error
	if cluster {
		_, err = ParseRedisClusterURL(rawURL)
	} else {
		_, err = ParseRedisURL(rawURL)
	}
	return err
}

// RedactRedisURL is the URL with its password, if any, replaced by xxxxx:
// what logs and check-config show. A string that is not a URL shows as
// its scheme, if it has one.
func RedactRedisURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if scheme, _, ok := strings.Cut(rawURL, "://"); ok && !strings.ContainsAny(scheme, "@:/") {
			return scheme + "://(not a valid URL)"
		}
		return "(not a valid URL)"
	}
	return u.Redacted()
}
