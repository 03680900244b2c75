package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/service"
)

// options are completiond's settings, from flags or the environment.
type options struct {
	addr         string
	config       string
	logLevel     slog.Level
	simPace      time.Duration
	simWords     int
	drain        time.Duration
	grace        time.Duration
	wait         time.Duration
	eventLog     config.EventLogLimits
	maxGrace     time.Duration
	metrics      string
	redisURL     string
	redisCluster bool
	leaseTTL     time.Duration
	delay        time.Duration
	replica      string
	safety       safety
	version      bool
}

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "COMPLETIOND_"

// redisPasswordEnv holds the Redis password; it has no flag.
const redisPasswordEnv = envPrefix + "REDIS_PASSWORD"

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("completiond", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "localhost:50051", "listen address (host:port)")
	fs.StringVar(&o.config, "config", "", "YAML file declaring providers, routes and fallbacks (see README); without it,\nANTHROPIC_API_KEY and OPENAI_API_KEY add the routes \"claude\" and \"gpt\"")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN, ERROR")
	fs.DurationVar(&o.simPace, "sim-pace", 20*time.Millisecond, "delay between two tokens of the sim provider")
	fs.IntVar(&o.simWords, "sim-words", 40, "answer length of the sim provider, in tokens")
	fs.DurationVar(&o.drain, "drain-timeout", 10*time.Second, "on SIGTERM/SIGINT, how long in-flight streams may run before they are ended;\nnew completions are refused meanwhile, Attach and Session resume still answered")
	fs.DurationVar(&o.grace, "shutdown-grace", config.DefaultAbortGrace, "after --drain-timeout, how long the ended streams get to return before the server stops hard;\nshutdown takes at most drain-timeout + shutdown-grace")
	fs.DurationVar(&o.wait, "caller-wait", 5*time.Minute, "how long a Session waits for the caller's tool results or stop-hook verdict")
	d := config.DefaultEventLogLimits()
	fs.IntVar(&o.eventLog.MaxEvents, "event-log-events", d.MaxEvents, "events kept per completion for Attach (the oldest are dropped past it)")
	fs.IntVar(&o.eventLog.MaxCompletions, "event-log-completions", d.MaxCompletions, "completions whose events are kept for Attach (the oldest ended are evicted first, never a running one)")
	fs.Int64Var(&o.eventLog.MaxBytes, "event-log-bytes", d.MaxBytes, "encoded size of all events kept for Attach")
	fs.DurationVar(&o.eventLog.Retention, "event-log-retention", d.Retention, "how long a completion's events are kept for Attach after its result")
	fs.DurationVar(&o.maxGrace, "max-resume-grace", config.DefaultMaxResumeGrace, "the longest resume_grace a request may ask for")
	fs.StringVar(&o.metrics, "metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics, e.g. localhost:9464 (empty: off);\ntraces and OTLP metrics follow the standard OTEL_* variables, see docs/observability.md")
	fs.StringVar(&o.redisURL, "redis-url", "", "the Redis the replicas of a fleet share: redis://host:port[/db], rediss:// for TLS (empty: redis.url\nof --config, else a single process); the password goes in "+redisPasswordEnv+",\nnot here, where a process list would show it")
	fs.BoolVar(&o.redisCluster, "redis-cluster", false, "the Redis of --redis-url (or redis.url) is a Redis Cluster: the URL names one of its nodes,\nmore as ?addr=host:port; the replicas spread their logs over "+strconv.Itoa(fleet.ClusterShards)+" shards, each keeping\nits share of the --event-log-* bounds (default: redis.cluster of --config)")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 0, "with Redis, the length of a resumable Stream's lease, which its replica renews at a third\nof it: a dead replica's completions are taken over by another replica about this long\nafter its death (0: redis.lease_ttl of --config, else "+config.DefaultLeaseTTL.String()+")")
	fs.DurationVar(&o.delay, "redis-commit-delay", 0, "with Redis, the longest a replica's group commit waits for more events before it writes\na batch to Redis while other completions write: longer, fewer and larger batches (less\nRedis and replica CPU per token), each event that much later to its caller (a first token,\na stop-hook request or an end 500µs at most; an idle replica's not at all) (0: redis.commit_delay of --config, else "+config.DefaultRedisCommitDelay.String()+"; at most "+config.MaxRedisCommitDelay.String()+")")
	fs.StringVar(&o.replica, "replica", "", "this replica's name in leases and logs (default: hostname:pid)")
	fs.BoolVar(&o.version, "version", false, "print the version, commit and Go version, and exit (also: completiond version)")
	o.safety.define(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: completiond [flags]\n"+
			"       completiond check-config FILE...   (validate --config files and print their routes)\n"+
			"       completiond version\n\n"+
			"Serves completion.v1.Completion over gRPC, with reflection and grpc.health.v1.\n"+
			"The embedded sim provider needs no API key; script its faults with the request\n"+
			"metadata key %q (see README).\n\n"+
			"Every flag but --version can also be set by an environment variable: %sFLAG_NAME, e.g. %sADDR.\n"+
			"Flags win over the environment, and both over the --config file.\n\n"+
			"Callers authenticate when keys are configured: %s (one key), --api-key-file,\n"+
			"auth.keys in --config, or client certificates (--tls-client-ca). Without any, the\n"+
			"server only listens on a loopback address unless --insecure-no-auth.\n\nFlags:\n", sim.MetaFaults, envPrefix, envPrefix, apiKeyEnv)
		fs.PrintDefaults()
	}
	if err := envDefaults(fs, getenv); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.safety.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.safety.set[f.Name] = true })
	return o, nil
}

// actionFlags are the flags that are commands rather than settings: they
// make the server do something else than serve, so they are never read
// from the environment (COMPLETIOND_VERSION=1 must not turn a server into
// a program that prints its version).
var actionFlags = map[string]bool{"version": true}

// envDefaults sets each flag but the action flags from its environment
// variable, if set.
func envDefaults(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if actionFlags[f.Name] {
			return
		}
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && err == nil {
			if e := fs.Set(f.Name, v); e != nil { // fs.Set: Visit sees the flag as set
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// memoryShown says the memory limit the auto limits came from, if any
// was auto.
func memoryShown(m service.MemoryLimit) string {
	if m.Bytes <= 0 {
		return "not read (no limit is auto)"
	}
	return fmt.Sprintf("%d MiB (%s)", m.Bytes>>20, m.Source)
}

// run serves until ctx is done, then drains.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "version" {
		printVersion(stdout)
		return nil
	}
	if len(args) > 0 && args[0] == "check-config" {
		return checkConfig(args[1:], getenv, stdout, stderr)
	}
	o, err := parseOptions(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.version {
		printVersion(stdout)
		return nil
	}
	log := slog.New(telemetry.TraceLogHandler(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: o.logLevel})))
	cfg := service.DefaultConfig()
	cfg.Logger = log
	if cfg, err = loadRoutes(cfg, o.config, sim.New(sim.Config{Pace: o.simPace, Words: o.simWords}), getenv); err != nil {
		return err
	}
	cfg.StreamDrain, cfg.CallerWait, cfg.AbortGrace = o.drain, o.wait, o.grace
	cfg.EventLog, cfg.MaxResumeGrace = o.eventLog, o.maxGrace
	if err := o.safety.apply(&cfg, o.addr, getenv); err != nil {
		return err
	}
	tel, err := setupTelemetry(ctx, o.metrics, getenv, log)
	if err != nil {
		return err
	}
	defer tel.close(log)
	cfg.Telemetry = tel.Telemetry
	opts, err := serverOptions(cfg, log) // after telemetry: the certificate's expiry is a metric
	if err != nil {
		return err
	}
	if o.redisURL != "" {
		cfg.RedisURL = o.redisURL
	}
	cfg.RedisCluster = cfg.RedisCluster || o.redisCluster
	if cfg.RedisCluster && cfg.RedisURL == "" {
		return errors.New("--redis-cluster: no Redis: give --redis-url or redis.url in --config")
	}
	if o.delay != 0 {
		if err := config.CheckRedisCommitDelay(o.delay); err != nil {
			return fmt.Errorf("--redis-commit-delay: %w", err)
		}
		cfg.RedisCommitDelay = o.delay
	}
	if cfg.RedisURL != "" {
		fleet.SetRedisLogger(log)
		if cfg.Redis, err = fleet.NewRedisClient(cfg.RedisURL, getenv(redisPasswordEnv), cfg.RedisCluster); err != nil {
			return err
		}
		// Before anything is built on it: the fleet's parts count on the
		// instruments the client carries.
		cfg.Redis = fleet.Instrument(cfg.Redis, cfg.Telemetry.MeterProvider)
		defer cfg.Redis.Close()
		ttl := cmp.Or(o.leaseTTL, cfg.LeaseTTL, config.DefaultLeaseTTL)
		if ttl < 0 {
			return fmt.Errorf("--lease-ttl %s: must be positive", ttl)
		}
		cfg.Leases = fleet.NewRedisLeases(cfg.Redis, ttl)
	}
	if cfg.Replica = o.replica; cfg.Replica == "" {
		host, _ := os.Hostname()
		cfg.Replica = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	srv, err := service.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	g := service.NewGRPC(srv, append(opts, tel.grpcOptions...)...)
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	limits, mem := srv.Limits()
	log.Info("serving", "addr", lis.Addr().String(), "default_route", cfg.DefaultRoute, "routes", routeNames(cfg),
		"tls", cfg.TLS.On(), "auth_keys", keyNames(cfg), "client_certificates", cfg.Auth.ClientCertificates,
		"redis", redisShown(cfg.RedisURL), "redis_cluster", cfg.RedisCluster, "replica", cfg.Replica, "lease_ttl", leaseTTL(cfg), "redis_commit_delay", commitDelay(cfg),
		"max_in_flight", limits.MaxInFlight, "max_streams_per_conn", limits.MaxConcurrentStreams, "memory_limit", memoryShown(mem))
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Bounded: Drain returns at most cfg.AbortGrace after dctx is done, even
	// if a handler ignores its cancellation.
	// Durations as strings ("10s"): the JSON handler would print nanoseconds.
	log.Info("draining", "timeout", o.drain.String(), "grace", o.grace.String())
	dctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	g.Drain(dctx)
	log.Info("stopped")
	return nil
}

// leaseTTL is the lease length cfg runs with, "" without leases.
func leaseTTL(cfg service.Config) string {
	if cfg.Leases == nil {
		return ""
	}
	return cfg.Leases.TTL().String()
}

// commitDelay is the group commit's delay cfg runs with, "" without Redis.
func commitDelay(cfg service.Config) string {
	if cfg.Redis == nil {
		return ""
	}
	return cmp.Or(cfg.RedisCommitDelay, config.DefaultRedisCommitDelay).String()
}

// redisShown is the Redis URL as logs and check-config show it: without
// its password.
func redisShown(url string) string {
	if url == "" {
		return "off (single process)"
	}
	return config.RedactRedisURL(url)
}

func routeNames(cfg service.Config) []string {
	names := make([]string, 0, len(cfg.Routes))
	for n := range cfg.Routes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
