package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
	"github.com/completiond/completiond/service"
)

// checkConfigUsage is the synopsis of the check-config subcommand.
const checkConfigUsage = "Usage: completiond check-config [FILE...]\n\n" +
	"Loads each --config FILE (default: $" + envPrefix + "CONFIG) as the server would, with the\n" +
	"API keys of its ${VAR} references read from the environment, builds its providers\n" +
	"without calling them, and prints the resolved routes, circuit breaker, auth keys\n" +
	"(names only), TLS files and limits. No secret is printed: neither API keys nor\n" +
	"key digests. A bad file is reported with an error that names the field; the\n" +
	"others are still checked, and the exit status is non-zero if any file is bad.\n"

// checkConfig answers `completiond check-config FILE...`: it loads each FILE
// with config.LoadFile and the real provider factories, as the server does at
// start, and prints what the server would serve. Building a provider makes
// no network call, so the check runs offline. The report names keys but
// never holds a secret: the specs it keeps have their API key removed, and
// key digests are not printed.
//
// Every file is checked, in order: a good file's report goes to stdout, a
// bad file's error to stderr, and the error returned counts the bad files.
// With one file, that file's error is returned as it is and nothing goes
// to stderr.
func checkConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("completiond check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkConfigUsage) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	paths := fs.Args()
	if len(paths) == 0 {
		if path := getenv(envPrefix + "CONFIG"); path != "" {
			paths = []string{path}
		}
	}
	if len(paths) == 0 || slices.Contains(paths, "") {
		return errors.New("check-config: want a configuration file (completiond check-config FILE...)")
	}
	if len(paths) == 1 {
		return checkConfigFile(paths[0], getenv, stdout)
	}
	var bad []string
	for i, path := range paths {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := checkConfigFile(path, getenv, stdout); err != nil {
			fmt.Fprintln(stderr, err)
			bad = append(bad, path)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("check-config: %d of %d files are bad: %s", len(bad), len(paths), strings.Join(bad, ", "))
	}
	return nil
}

// checkConfigFile checks the file at path and writes its report to w. Its
// error names the file (config.LoadFile's do).
func checkConfigFile(path string, getenv func(string) string, w io.Writer) error {
	specs := map[provider.Provider]config.ProviderSpec{}
	recording := make(map[string]config.Factory, len(factories)+1)
	for kind, f := range factories {
		recording[kind] = func(s config.ProviderSpec) (provider.Provider, error) {
			p, err := f(s)
			if err == nil {
				s.APIKey = "" // the report keeps no secret
				specs[p] = s
			}
			return p, err
		}
	}
	s := sim.New(sim.Config{})
	recording["sim"] = func(config.ProviderSpec) (provider.Provider, error) { return s, nil }
	base := config.Default()
	base.Routes = map[string]*config.Route{}
	cfg, err := config.LoadFile(path, base, getenv, recording)
	if err != nil {
		return err
	}
	return printConfig(w, path, cfg, specs)
}

// printConfig writes the report of check-config.
func printConfig(w io.Writer, path string, cfg config.Config, specs map[provider.Provider]config.ProviderSpec) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	p("%s: OK, %d routes", path, len(cfg.Routes))
	p("default route\t%s", cfg.DefaultRoute)
	for _, name := range slices.Sorted(maps.Keys(cfg.Routes)) {
		r := cfg.Routes[name]
		p("")
		p("route %s", name)
		p("  provider\t%s", r.Upstream.Kind())
		p("  base url\t%s", baseURL(r.Upstream, specs))
		p("  model\t%s", r.Spec.Model)
		p("  context window\t%s", tokens(r.Spec.ContextWindow))
		p("  max output\t%s", tokens(r.Spec.MaxOutputTokens))
		p("  prefill\t%t", r.Spec.Prefill)
		if body := specs[r.Upstream].PrefillBody; r.Spec.Prefill && body != nil {
			b, _ := json.Marshal(body) // LoadFile checked that it marshals
			p("  prefill body\t%s", b)
		}
		if r.ThinkingBudget > 0 {
			p("  thinking\t%d tokens (never continues by prefill)", r.ThinkingBudget)
		} else {
			p("  thinking\toff")
		}
		p("  reasoning\t%s", reasoningCeiling(r))
		p("  structured output\t%s", structuredOutputNames[r.StructuredOutput])
		if len(r.Fallbacks) == 0 {
			p("  fallbacks\tnone")
		} else {
			p("  fallbacks\t%s", strings.Join(r.Fallbacks, " → "))
		}
		t := r.Timeouts
		p("  timeouts\theaders %s, first token %s, idle %s, total %s", t.Headers, t.FirstToken, t.Idle, t.Total)
		p("  prices\t%s", pricesLine(r.Prices))
	}
	p("")
	switch b := cfg.Breaker; {
	case b.Failures < 0:
		p("circuit breaker\toff")
	case b.Failures == 0 && b.Cooldown == 0:
		p("circuit breaker\tdefault")
	default:
		p("circuit breaker\t%s failures, cooldown %s", orDefault(b.Failures), orDefaultDuration(b.Cooldown))
	}
	printAuth(p, cfg.Auth)
	printTLS(p, cfg.TLS)
	p("redis\t%s", redisShown(cfg.RedisURL))
	if cfg.RedisURL != "" {
		p("redis cluster\t%t", cfg.RedisCluster)
		p("lease ttl\t%s", cmp.Or(cfg.LeaseTTL, config.DefaultLeaseTTL))
		p("redis commit delay\t%s", cmp.Or(cfg.RedisCommitDelay, config.DefaultRedisCommitDelay))
	}
	printLimits(p, cfg.Limits)
	printPolicy(p, cfg.Policy)
	p("")
	p("Flags and %s* variables win over the auth, tls, redis and limits above at run time;", envPrefix)
	p("%s adds a key named default.", apiKeyEnv)
	return tw.Flush()
}

// baseURL is the URL a route's provider calls, without credentials: the
// user info and the query are left out.
func baseURL(p provider.Provider, specs map[provider.Provider]config.ProviderSpec) string {
	spec, ok := specs[p]
	if !ok {
		return "none (embedded simulator)"
	}
	if spec.BaseURL == "" {
		switch spec.Kind {
		case anthropic.Kind:
			return anthropic.DefaultBaseURL + " (default)"
		case openai.Kind:
			return openai.DefaultBaseURL + " (default)"
		}
		return "default"
	}
	u, err := url.Parse(spec.BaseURL)
	if err != nil { // the provider accepted it, so this does not happen
		return "(not a URL)"
	}
	u.User = nil
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	return u.String()
}

// printAuth writes the keys' names, their routes and how each
// authenticates; never the key or its digest.
func printAuth(p func(string, ...any), a config.Auth) {
	if !a.On() {
		p("auth\toff")
		return
	}
	p("auth\t%d keys, client certificates %s", len(a.Keys), onOff(a.ClientCertificates))
	for _, k := range a.Keys {
		how := "API key"
		if k.SHA256 == ([32]byte{}) {
			how = "client certificate only"
		}
		routes := "all routes"
		if k.Routes != nil {
			routes = "routes " + strings.Join(k.Routes, ", ")
			if len(k.Routes) == 0 {
				routes = "no route"
			}
		}
		p("  key %s\t%s, %s%s", k.Name, how, routes, budgetLine(k.Budget))
	}
}

// budgetLine is a key's budget as check-config reports it, after its
// routes; "" without one.
func budgetLine(b *config.Budget) string {
	if b == nil {
		return ""
	}
	var limits []string
	if b.USD > 0 {
		limits = append(limits, fmt.Sprintf("%g USD", b.USD))
	}
	if b.Tokens > 0 {
		limits = append(limits, fmt.Sprintf("%d tokens", b.Tokens))
	}
	return fmt.Sprintf(", budget %s per %s (UTC)", strings.Join(limits, " or "), b.Period)
}

// printTLS writes the certificate files, or that the server speaks
// plaintext.
func printTLS(p func(string, ...any), t config.TLSFiles) {
	if !t.On() {
		p("tls\toff (plaintext)")
		return
	}
	reload := t.ReloadInterval
	if reload == 0 {
		reload = config.DefaultTLSReload
	}
	p("tls\tcert %s, key %s, reload %s", t.CertFile, t.KeyFile, reload)
	if t.ClientCAFile != "" {
		p("  client CA\t%s", t.ClientCAFile)
	}
}

// printPolicy writes the recovery policy's fields that differ from
// recovery.DefaultPolicy, by their config-file names.
func printPolicy(p func(string, ...any), pol recovery.Policy) {
	d := recovery.DefaultPolicy()
	r, dr := pol.Retry, d.Retry
	var lines []string
	add := func(name string, val, deflt any) {
		if val != deflt {
			lines = append(lines, fmt.Sprintf("  %s\t%+v (default %+v)", name, val, deflt))
		}
	}
	add("retry.max_retries", r.MaxRetries, dr.MaxRetries)
	add("retry.fallback_retries", r.FallbackRetries, dr.FallbackRetries)
	add("retry.fallback_wait", r.FallbackWait, dr.FallbackWait)
	add("retry.backoff_base", r.BackoffBase, dr.BackoffBase)
	add("retry.backoff_max", r.BackoffMax, dr.BackoffMax)
	add("retry.backoff_jitter", r.BackoffJitter, dr.BackoffJitter)
	add("retry.retry_after_ceiling", r.RetryAfterCeiling, dr.RetryAfterCeiling)
	add("retry.overloads_before_fallback", r.OverloadsBeforeFallback, dr.OverloadsBeforeFallback)
	add("retry.fallback", r.Fallback, dr.Fallback)
	add("truncation", pol.Truncation, d.Truncation)
	add("overflow", pol.Overflow, d.Overflow)
	add("budget", pol.Budget, d.Budget)
	add("turns", pol.Turns, d.Turns)
	add("media", pol.Media, d.Media)
	if len(lines) == 0 {
		p("policy	default (recovery.DefaultPolicy)")
		return
	}
	p("policy (what differs from the defaults)")
	for _, l := range lines {
		p("%s", l)
	}
}

// printLimits writes the server's limits, marking those at their default;
// an auto one also says what it would be in this process, and why.
func printLimits(p func(string, ...any), l config.Limits) {
	d := config.DefaultLimits()
	mem := service.ReadMemoryLimit()
	r := l.Resolve(mem.Bytes)
	auto := func(v, resolved int) any {
		if v != config.Auto {
			return v
		}
		return fmt.Sprintf("auto (%d here: %d MiB of memory, %s)", resolved, mem.Bytes>>20, mem.Source)
	}
	p("limits")
	for _, f := range []struct {
		name       string
		val, deflt any
	}{
		{"max_request_bytes", l.MaxRequestBytes, d.MaxRequestBytes},
		{"max_in_flight", auto(l.MaxInFlight, r.MaxInFlight), auto(d.MaxInFlight, r.MaxInFlight)},
		{"key_max_concurrent", l.KeyMaxConcurrent, d.KeyMaxConcurrent},
		{"key_rate", l.KeyRate, d.KeyRate},
		{"key_burst", l.KeyBurst, d.KeyBurst},
		{"max_streams_per_connection", auto(l.MaxConcurrentStreams, r.MaxConcurrentStreams), auto(d.MaxConcurrentStreams, r.MaxConcurrentStreams)},
		{"keepalive_min_time", l.KeepaliveMinTime, d.KeepaliveMinTime},
		{"keepalive_time", l.KeepaliveTime, d.KeepaliveTime},
		{"keepalive_timeout", l.KeepaliveTimeout, d.KeepaliveTimeout},
		{"max_connection_idle", l.MaxConnectionIdle, d.MaxConnectionIdle},
		{"max_connection_age", l.MaxConnectionAge, d.MaxConnectionAge},
		{"max_connection_age_grace", l.MaxConnectionAgeGrace, d.MaxConnectionAgeGrace},
		{"max_connections", l.MaxConnections, d.MaxConnections},
		{"max_handshakes", l.MaxHandshakes, d.MaxHandshakes},
		{"handshake_timeout", l.HandshakeTimeout, d.HandshakeTimeout},
		{"max_health_watches", l.MaxHealthWatches, d.MaxHealthWatches},
		{"max_health_checks", l.MaxHealthChecks, d.MaxHealthChecks},
	} {
		note := ""
		if f.val == f.deflt {
			note = " (default)"
		}
		p("  %s\t%v%s", f.name, f.val, note)
	}
}

func tokens(n int) string {
	if n <= 0 {
		return "not set"
	}
	return strconv.Itoa(n) + " tokens"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orDefault(n int) string {
	if n == 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func orDefaultDuration(d time.Duration) string {
	if d == 0 {
		return "default"
	}
	return d.String()
}

// reasoningCeiling says what a request's reasoning may ask of route r.
func reasoningCeiling(r *config.Route) string {
	var parts []string
	if r.MaxThinkingBudget > 0 {
		parts = append(parts, fmt.Sprintf("budget up to %d tokens", r.MaxThinkingBudget))
	}
	if r.MaxReasoningEffort != "" {
		parts = append(parts, "effort up to "+r.MaxReasoningEffort)
	}
	if len(parts) == 0 {
		return "none (requests asking for reasoning are refused)"
	}
	return strings.Join(parts, ", ")
}

// structuredOutputNames are the structured_output values, by mode.
var structuredOutputNames = map[provider.StructuredOutput]string{
	provider.StructuredNative: "native", provider.StructuredTool: "tool (a forced tool)", provider.StructuredHook: "hook (the stop hook alone)",
}

// pricesLine is a route's prices as check-config reports them, the cache
// prices LoadFile derived from input included, so that the defaults show.
func pricesLine(pr config.Prices) string {
	if !pr.Known {
		return "none (cost unknown)"
	}
	return fmt.Sprintf("USD per million tokens: input %g, output %g, cache write %g, cache read %g",
		pr.Input, pr.Output, pr.CacheWrite, pr.CacheRead)
}
