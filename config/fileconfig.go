package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// ProviderSpec is what a provider factory needs to build a provider.
type ProviderSpec struct {
	// Kind is the provider kind: anthropic or openai.
	Kind string
	// BaseURL is the API's base URL; empty uses the provider's default.
	BaseURL string
	// APIKey is the key, already expanded from the environment.
	APIKey string
	// PrefillBody are the JSON fields an openai provider sets in the body of
	// a request that carries an assistant prefill, so that the server
	// continues the final assistant message (openai.Config.PrefillBody).
	// LoadFile fills in DefaultPrefillBody for kind openai with a base_url
	// when the file sets none; nil for every other provider.
	PrefillBody map[string]any
}

// DefaultPrefillBody is the prefill_body of an openai provider with a
// base_url when the file sets none: vLLM's continue_final_message=true and
// add_generation_prompt=false (openai.DefaultPrefillBody; the service knows
// providers only through their factories). Without them vLLM answers a final
// assistant message afresh, repeating it; recent llama-server takes the
// same pair, and servers that do not know the fields ignore them.
func DefaultPrefillBody() map[string]any {
	return map[string]any{"continue_final_message": true, "add_generation_prompt": false}
}

// Factory builds a provider from its spec.
type Factory func(ProviderSpec) (provider.Provider, error)

// FileConfig is the YAML configuration file. Unknown fields are errors.
type FileConfig struct {
	// DefaultRoute is used when a request names none.
	DefaultRoute string `yaml:"default_route"`
	// Providers are the upstream accounts by name.
	Providers map[string]FileProvider `yaml:"providers"`
	// Routes are the routes by name.
	Routes map[string]FileRoute `yaml:"routes"`
	// Breaker configures the per-route circuit breakers.
	Breaker *FileBreaker `yaml:"circuit_breaker"`
	// Auth declares the keys callers present; without it anybody may call.
	Auth *FileAuth `yaml:"auth"`
	// TLS names the server's certificate files; without it the server
	// speaks plaintext.
	TLS *FileTLS `yaml:"tls"`
	// Limits bound the load the server accepts; unset fields keep their
	// defaults.
	Limits *FileLimits `yaml:"limits"`
	// Policy overrides the server's recovery policy, field by field (see
	// fileconfig_policy.go and recovery.Policy); requests may only tighten it.
	Policy yaml.Node `yaml:"policy"`
	// Redis is the Redis the replicas of a fleet share; without it the
	// server runs as a single process.
	Redis *FileRedis `yaml:"redis"`
}

// FileRedis configures the shared Redis.
type FileRedis struct {
	// URL is redis://[user[:password]@]host:port[/db], or rediss:// for
	// TLS; ${ENV_VAR} references are expanded. Keep the password out of
	// the file: in ${VAR}, or in COMPLETIOND_REDIS_PASSWORD.
	URL string `yaml:"url"`
	// LeaseTTL is the length of a completion's lease (a Go duration, e.g.
	// 2s; default DefaultLeaseTTL): a dead replica's resumable Streams are
	// taken over by another replica about this long after its death.
	LeaseTTL string `yaml:"lease_ttl"`
	// CommitDelay is the longest the group commit waits for more events
	// while other completions write (a Go duration, at most 100ms;
	// default DefaultRedisCommitDelay): see Config.RedisCommitDelay.
	CommitDelay string `yaml:"commit_delay"`
	// Cluster says URL names a node of a Redis Cluster (more nodes to
	// start from as ?addr=host:port parameters): the replicas spread
	// their logs over its shards (see Config.RedisCluster).
	Cluster bool `yaml:"cluster"`
}

// FileProvider declares one upstream account.
type FileProvider struct {
	// Kind is anthropic, openai (also for OpenAI-compatible servers) or sim.
	Kind string `yaml:"kind"`
	// BaseURL overrides the API's base URL, e.g. http://localhost:8000/v1 for vLLM.
	BaseURL string `yaml:"base_url"`
	// APIKey is the key; write it as ${ENV_VAR} to keep it out of the file.
	APIKey string `yaml:"api_key"`
	// PrefillBody (kind openai only) are JSON fields set at the top level of
	// the request body when a call carries an assistant prefill, asking the
	// server to continue the final assistant message. Unset, it is
	// DefaultPrefillBody() when base_url is set; {} sends nothing (a server
	// that continues on its own, such as llama-server).
	PrefillBody map[string]any `yaml:"prefill_body"`
}

// FileRoute declares one route.
type FileRoute struct {
	// Provider names an entry of providers.
	Provider string `yaml:"provider"`
	// Model is the upstream model.
	Model string `yaml:"model"`
	// ContextWindow is the model's context window in tokens.
	ContextWindow int `yaml:"context_window"`
	// MaxOutputTokens is the model's own output limit.
	MaxOutputTokens int `yaml:"max_output_tokens"`
	// Prefill says whether the route accepts an assistant prefill.
	Prefill bool `yaml:"prefill"`
	// ThinkingBudget, when set, asks the model to think with about this
	// many tokens (Anthropic extended thinking: at least 1024, cut to half
	// of max_tokens when it does not fit under it). A route that thinks
	// never continues by prefill, whatever prefill says.
	ThinkingBudget int `yaml:"thinking_budget"`
	// MaxThinkingBudget (kind anthropic) is the largest thinking budget a
	// request's reasoning may ask for (at least 1024); unset, it is
	// thinking_budget, and a route with neither takes no reasoning.
	MaxThinkingBudget int `yaml:"max_thinking_budget"`
	// MaxReasoningEffort (kind openai) is the most reasoning_effort a
	// request's reasoning may ask for: minimal, low, medium or high; unset,
	// the route takes no reasoning (its model is not a reasoning model).
	MaxReasoningEffort string `yaml:"max_reasoning_effort"`
	// StructuredOutput is how the route asks for an answer that satisfies
	// a request's output_json_schema: native (the default: OpenAI
	// response_format json_schema, Anthropic output_config.format), tool
	// (kind anthropic: a forced tool whose input is the answer, for models
	// without native structured output) or hook (nothing sent upstream:
	// the built-in stop hook alone, for servers without structured output).
	StructuredOutput string `yaml:"structured_output"`
	// Fallbacks are the routes tried after this one, in order.
	Fallbacks []string `yaml:"fallbacks"`
	// Timeouts bound each attempt.
	Timeouts FileTimeouts `yaml:"timeouts"`
	// Prices are what the route's tokens cost, in USD per million tokens;
	// without them the cost of the route's attempts is unknown.
	Prices *FilePrices `yaml:"prices"`
}

// FileTimeouts bound each attempt on a route; empty fields keep the defaults.
type FileTimeouts struct {
	// Headers bounds the wait for response headers.
	Headers string `yaml:"headers"`
	// FirstToken bounds the wait for the first token.
	FirstToken string `yaml:"first_token"`
	// Idle bounds the silence between two chunks.
	Idle string `yaml:"idle"`
	// Total bounds the whole attempt.
	Total string `yaml:"total"`
}

// FileBreaker configures the circuit breakers.
type FileBreaker struct {
	// Failures is the number of consecutive failures that opens a circuit.
	Failures int `yaml:"failures"`
	// Cooldown is how long a circuit stays open, e.g. "30s".
	Cooldown string `yaml:"cooldown"`
}

// DefaultTimeouts suit real models: a reasoning model may think for minutes
// before its first token, but a healthy API sends headers within seconds.
func DefaultTimeouts() provider.Timeouts {
	return provider.Timeouts{Headers: 30 * time.Second, FirstToken: 5 * time.Minute, Idle: 90 * time.Second, Total: 20 * time.Minute}
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LoadFile reads the configuration file at path and builds the routes it
// declares, plus the sim routes, into base. An invalid file is an error that
// names the field.
func LoadFile(path string, base Config, getenv func(string) string, factories map[string]Factory) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return base, err
	}
	var fc FileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) { // an empty file configures nothing
		return base, fmt.Errorf("%s: %w", path, err)
	}
	cfg, err := fc.apply(base, getenv, factories)
	if err != nil {
		return base, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

func (fc *FileConfig) apply(base Config, getenv func(string) string, factories map[string]Factory) (Config, error) {
	providers := map[string]provider.Provider{}
	for _, name := range SortedKeys(fc.Providers) {
		p, err := buildProvider(name, fc.Providers[name], getenv, factories)
		if err != nil {
			return base, err
		}
		providers[name] = p
	}
	cfg := base
	cfg.Routes = cloneRoutes(base.Routes)
	for _, name := range SortedKeys(fc.Routes) {
		r, err := buildRoute(name, fc.Routes[name], providers, fc.Providers)
		if err != nil {
			return base, err
		}
		cfg.Routes[name] = r
	}
	if fc.DefaultRoute != "" {
		cfg.DefaultRoute = fc.DefaultRoute
	} else if _, ok := cfg.Routes[cfg.DefaultRoute]; !ok { // e.g. "sim", which a file serves only when it declares it
		return base, fmt.Errorf("default_route: required: no route %q is declared", cfg.DefaultRoute)
	}
	if err := fc.applyBreaker(&cfg); err != nil {
		return base, err
	}
	policy, err := applyPolicy(&fc.Policy, base.Policy)
	if err != nil {
		return base, err
	}
	cfg.Policy = policy
	if err := fc.applySafety(&cfg, getenv); err != nil {
		return base, err
	}
	if fc.Redis != nil {
		u, err := expandEnv(fc.Redis.URL, getenv)
		if err != nil {
			return base, fmt.Errorf("redis.url: %w", err)
		}
		if u == "" {
			return base, fmt.Errorf("redis.url: required: redis://host:port or rediss://host:port")
		}
		if err := CheckRedisURL(u, fc.Redis.Cluster); err != nil {
			return base, fmt.Errorf("redis.url: %w", err)
		}
		cfg.RedisURL, cfg.RedisCluster = u, fc.Redis.Cluster
		if fc.Redis.LeaseTTL != "" {
			d, err := time.ParseDuration(fc.Redis.LeaseTTL)
			if err != nil || d <= 0 {
				return base, fmt.Errorf("redis.lease_ttl: %q is not a positive duration (e.g. 2s)", fc.Redis.LeaseTTL)
			}
			cfg.LeaseTTL = d
		}
		if fc.Redis.CommitDelay != "" {
			d, err := time.ParseDuration(fc.Redis.CommitDelay)
			if err == nil {
				err = CheckRedisCommitDelay(d)
			}
			if err != nil {
				return base, fmt.Errorf("redis.commit_delay: %q is not a duration in (0, %s] (e.g. 2ms)", fc.Redis.CommitDelay, MaxRedisCommitDelay)
			}
			cfg.RedisCommitDelay = d
		}
	}
	if err := cfg.Check(); err != nil {
		return base, err
	}
	return cfg, nil
}

func buildProvider(name string, fp FileProvider, getenv func(string) string, factories map[string]Factory) (provider.Provider, error) {
	field := "providers." + name
	if fp.Kind == "sim" {
		if f, ok := factories["sim"]; ok { // the caller's sim, with its settings
			return f(ProviderSpec{Kind: "sim"})
		}
		return sim.New(sim.Config{}), nil
	}
	f, ok := factories[fp.Kind]
	if !ok {
		known := slices.DeleteFunc(SortedKeys(factories), func(k string) bool { return k == "sim" })
		return nil, fmt.Errorf("%s.kind: unknown provider kind %q (known: sim, %s)", field, fp.Kind, strings.Join(known, ", "))
	}
	key, err := expandEnv(fp.APIKey, getenv)
	if err != nil {
		return nil, fmt.Errorf("%s.api_key: %w", field, err)
	}
	if fp.Kind == "anthropic" && key == "" {
		return nil, fmt.Errorf("%s.api_key: an API key is required", field)
	}
	body, err := prefillBody(fp)
	if err != nil {
		return nil, fmt.Errorf("%s.prefill_body: %w", field, err)
	}
	p, err := f(ProviderSpec{Kind: fp.Kind, BaseURL: fp.BaseURL, APIKey: key, PrefillBody: body})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return p, nil
}

// fieldName is what a prefill_body key must be: a plain top-level field.
var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// prefillBody is the provider's prefill body: the file's, checked, or the
// default for an openai provider with a base_url.
func prefillBody(fp FileProvider) (map[string]any, error) {
	if fp.Kind != "openai" {
		if fp.PrefillBody != nil {
			return nil, fmt.Errorf("only a provider of kind openai takes a prefill body")
		}
		return nil, nil
	}
	if fp.PrefillBody == nil {
		if fp.BaseURL == "" {
			return nil, nil // OpenAI's own API: it has no way to continue a message
		}
		return DefaultPrefillBody(), nil
	}
	for _, k := range SortedKeys(fp.PrefillBody) {
		if !fieldName.MatchString(k) {
			return nil, fmt.Errorf("key %q is not a plain field name", k)
		}
		if _, err := json.Marshal(fp.PrefillBody[k]); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return fp.PrefillBody, nil
}

// expandEnv replaces ${VAR} references; a reference to an unset variable is
// an error rather than an empty key sent upstream.
func expandEnv(s string, getenv func(string) string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}

func buildRoute(name string, fr FileRoute, providers map[string]provider.Provider, specs map[string]FileProvider) (*Route, error) {
	field := "routes." + name
	p, ok := providers[fr.Provider]
	if !ok {
		return nil, fmt.Errorf("%s.provider: unknown provider %q", field, fr.Provider)
	}
	if fp := specs[fr.Provider]; fr.Prefill && fp.Kind == "openai" && fp.BaseURL == "" {
		return nil, fmt.Errorf("%s.prefill: provider %q is OpenAI's own API (kind openai without a base_url), "+
			"which answers a final assistant message afresh instead of continuing it", field, fr.Provider)
	}
	if fr.Model == "" {
		return nil, fmt.Errorf("%s.model: a model is required", field)
	}
	if fr.ContextWindow < 0 || fr.MaxOutputTokens < 0 {
		return nil, fmt.Errorf("%s: context_window and max_output_tokens must not be negative", field)
	}
	if fr.ThinkingBudget != 0 && fr.ThinkingBudget < MinThinkingBudget {
		return nil, fmt.Errorf("%s.thinking_budget: %d is under the minimum of %d tokens (0 turns thinking off)",
			field, fr.ThinkingBudget, MinThinkingBudget)
	}
	reasoning, err := fr.reasoning(field, KindCapabilities(p.Kind()))
	if err != nil {
		return nil, err
	}
	so, err := fr.structuredOutput(field, p.Kind())
	if err != nil {
		return nil, err
	}
	t, err := fr.Timeouts.parse(field + ".timeouts")
	if err != nil {
		return nil, err
	}
	prices, err := fr.Prices.build(field + ".prices")
	if err != nil {
		return nil, err
	}
	return &Route{
		Spec: recovery.Route{Name: name, Provider: p.Kind(), Model: fr.Model, ContextWindow: fr.ContextWindow,
			MaxOutputTokens: fr.MaxOutputTokens, Prefill: fr.Prefill, Thinking: fr.ThinkingBudget > 0},
		Upstream: p, Fallbacks: fr.Fallbacks, Timeouts: t, ThinkingBudget: fr.ThinkingBudget,
		MaxThinkingBudget: reasoning.MaxThinkingBudget, MaxReasoningEffort: reasoning.MaxReasoningEffort,
		StructuredOutput: so, Prices: prices,
	}, nil
}

// reasoning checks the route's reasoning ceilings against what its kind
// can take, and gives them with their defaults.
func (fr FileRoute) reasoning(field string, kind Capabilities) (Capabilities, error) {
	var c Capabilities
	switch {
	case fr.MaxThinkingBudget != 0 && !kind.ThinkingBudget:
		return c, fmt.Errorf("%s.max_thinking_budget: the route's provider does not think with a budget (max_reasoning_effort is its knob)", field)
	case fr.MaxThinkingBudget != 0 && fr.MaxThinkingBudget < max(MinThinkingBudget, fr.ThinkingBudget):
		return c, fmt.Errorf("%s.max_thinking_budget: %d is under %d (the minimum, and the route's thinking_budget)",
			field, fr.MaxThinkingBudget, max(MinThinkingBudget, fr.ThinkingBudget))
	case fr.MaxReasoningEffort != "" && !kind.ReasoningEffort:
		return c, fmt.Errorf("%s.max_reasoning_effort: the route's provider does not reason with an effort (max_thinking_budget is its knob)", field)
	case fr.MaxReasoningEffort != "" && EffortRank(fr.MaxReasoningEffort) < 0:
		return c, fmt.Errorf("%s.max_reasoning_effort: %q is not one of %s", field, fr.MaxReasoningEffort, strings.Join(ReasoningEfforts, ", "))
	}
	c.MaxThinkingBudget, c.MaxReasoningEffort = fr.MaxThinkingBudget, fr.MaxReasoningEffort
	if c.MaxThinkingBudget == 0 && kind.ThinkingBudget {
		c.MaxThinkingBudget = fr.ThinkingBudget
	}
	return c, nil
}

// structuredOutput is the route's structured_output, checked against its
// kind.
func (fr FileRoute) structuredOutput(field, kind string) (provider.StructuredOutput, error) {
	switch fr.StructuredOutput {
	case "", "native":
		if kind == "sim" { // the sim writes text of its own: the stop hook holds it
			return provider.StructuredHook, nil
		}
		return provider.StructuredNative, nil
	case "hook":
		return provider.StructuredHook, nil
	case "tool":
		if kind != "anthropic" {
			return 0, fmt.Errorf("%s.structured_output: tool is for anthropic routes", field)
		}
		return provider.StructuredTool, nil
	}
	return 0, fmt.Errorf("%s.structured_output: %q is not one of native, tool, hook", field, fr.StructuredOutput)
}

// minThinkingBudget is the smallest thinking_budget a route may set:
// Anthropic's minimum budget_tokens (anthropic.MinThinkingBudget; the
// service knows providers only through their factories).
const MinThinkingBudget = 1024

func (ft FileTimeouts) parse(field string) (provider.Timeouts, error) {
	t := DefaultTimeouts()
	for _, f := range []struct {
		name string
		src  string
		dst  *time.Duration
	}{{"headers", ft.Headers, &t.Headers}, {"first_token", ft.FirstToken, &t.FirstToken}, {"idle", ft.Idle, &t.Idle}, {"total", ft.Total, &t.Total}} {
		if f.src == "" {
			continue
		}
		d, err := time.ParseDuration(f.src)
		if err != nil || d <= 0 {
			return t, fmt.Errorf("%s.%s: %q is not a positive duration", field, f.name, f.src)
		}
		*f.dst = d
	}
	return t, nil
}

func (fc *FileConfig) applyBreaker(cfg *Config) error {
	if fc.Breaker == nil {
		return nil
	}
	cfg.Breaker.Failures = fc.Breaker.Failures
	if fc.Breaker.Cooldown != "" {
		d, err := time.ParseDuration(fc.Breaker.Cooldown)
		if err != nil || d <= 0 {
			return fmt.Errorf("circuit_breaker.cooldown: %q is not a positive duration", fc.Breaker.Cooldown)
		}
		cfg.Breaker.Cooldown = d
	}
	return nil
}

// EnvRoutes registers default routes for the API keys found in the
// environment, for running without a configuration file: ANTHROPIC_API_KEY
// adds "claude", OPENAI_API_KEY adds "gpt"; each falls back to the other
// when both are set.
func EnvRoutes(base Config, getenv func(string) string, factories map[string]Factory) (Config, error) {
	fc := FileConfig{Providers: map[string]FileProvider{}, Routes: map[string]FileRoute{}}
	var names []string
	if getenv("ANTHROPIC_API_KEY") != "" {
		fc.Providers["anthropic"] = FileProvider{Kind: "anthropic", BaseURL: getenv("ANTHROPIC_BASE_URL"), APIKey: "${ANTHROPIC_API_KEY}"}
		fc.Routes["claude"] = FileRoute{Provider: "anthropic", Model: envOr(getenv, "COMPLETIOND_ANTHROPIC_MODEL", "claude-sonnet-4-5"),
			ContextWindow: 200_000, MaxOutputTokens: 64_000, Prefill: true}
		names = append(names, "claude")
	}
	if getenv("OPENAI_API_KEY") != "" {
		fc.Providers["openai"] = FileProvider{Kind: "openai", BaseURL: getenv("OPENAI_BASE_URL"), APIKey: "${OPENAI_API_KEY}"}
		fc.Routes["gpt"] = FileRoute{Provider: "openai", Model: envOr(getenv, "COMPLETIOND_OPENAI_MODEL", "gpt-4.1"),
			ContextWindow: 1_000_000, MaxOutputTokens: 32_768}
		names = append(names, "gpt")
	}
	if len(names) == 0 {
		return base, nil
	}
	if len(names) == 2 {
		c, g := fc.Routes["claude"], fc.Routes["gpt"]
		c.Fallbacks, g.Fallbacks = []string{"gpt"}, []string{"claude"}
		fc.Routes["claude"], fc.Routes["gpt"] = c, g
	}
	fc.DefaultRoute = names[0]
	return fc.apply(base, getenv, factories)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func cloneRoutes(in map[string]*Route) map[string]*Route {
	out := make(map[string]*Route, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// FileAuth declares who may call the server.
type FileAuth struct {
	// Keys are the callers' API keys.
	Keys []FileKey `yaml:"keys"`
}

// FileKey declares one caller's API key. Exactly one of Key and SHA256 is
// set, or neither for an entry that only names a client certificate (mTLS).
type FileKey struct {
	// Name identifies the caller in logs, spans and metrics; a client
	// certificate whose CommonName or DNS SAN is Name gets this entry's routes.
	Name string `yaml:"name"`
	// Key is the key itself; write it as ${ENV_VAR} to keep it out of the file.
	Key string `yaml:"key"`
	// SHA256 is the hex SHA-256 digest of the key, for a file that holds no
	// secret: `printf %s "$KEY" | sha256sum`.
	SHA256 string `yaml:"sha256"`
	// Routes are the routes the key may use: a list of names, or all.
	Routes FileRoutes `yaml:"routes"`
	// Budget, when set, bounds what the key spends per period.
	Budget *FileBudget `yaml:"budget"`
}

// FileRoutes is a key's routes: a list of route names, or the word all.
type FileRoutes struct {
	// All allows every route.
	All bool
	// Names are the routes allowed when All is false.
	Names []string
	set   bool
}

// UnmarshalYAML reads a list of names or the scalar all.
func (r *FileRoutes) UnmarshalYAML(n *yaml.Node) error {
	r.set = true
	if n.Kind == yaml.ScalarNode {
		if n.Value != "all" {
			return fmt.Errorf("line %d: routes: want a list of routes or all, got %q", n.Line, n.Value)
		}
		r.All = true
		return nil
	}
	return n.Decode(&r.Names)
}

// AutoCount is a limit that is a count (0: no bound) or the word auto
// (Auto: derived from the memory the process may use), as written;
// ParseAutoCount reads it.
type AutoCount string

// ParseAutoCount reads auto as Auto, and otherwise a count that is not
// negative.
func ParseAutoCount(s string) (int, error) {
	if s == "auto" {
		return Auto, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is neither a count (0: no bound) nor auto", s)
	}
	return n, nil
}

// FormatAutoCount writes a limit as ParseAutoCount reads it.
func FormatAutoCount(n int) string {
	if n == Auto {
		return "auto"
	}
	return strconv.Itoa(n)
}

// FileTLS names the server's certificate files.
type FileTLS struct {
	// Cert and Key are the PEM files of the certificate chain and its key;
	// they are read again when they change.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ClientCA is a PEM file of the CAs whose client certificates
	// authenticate callers (mTLS).
	ClientCA string `yaml:"client_ca"`
	// Reload is how often, at most, the files are checked for a change, e.g. "5s".
	Reload string `yaml:"reload"`
}

// FileLimits bound the load the server accepts; see Limits. Unset fields
// keep their defaults; 0 turns a count or a duration off.
type FileLimits struct {
	// MaxRequestBytes is Limits.MaxRequestBytes.
	MaxRequestBytes *int `yaml:"max_request_bytes"`
	// MaxInFlight is Limits.MaxInFlight: a count, or auto.
	MaxInFlight *AutoCount `yaml:"max_in_flight"`
	// KeyMaxConcurrent is Limits.KeyMaxConcurrent.
	KeyMaxConcurrent *int `yaml:"key_max_concurrent"`
	// KeyRate is Limits.KeyRate, in completions per second.
	KeyRate *float64 `yaml:"key_rate"`
	// KeyBurst is Limits.KeyBurst.
	KeyBurst *int `yaml:"key_burst"`
	// MaxStreamsPerConn is Limits.MaxConcurrentStreams: a count, or auto.
	MaxStreamsPerConn *AutoCount `yaml:"max_streams_per_connection"`
	// KeepaliveMinTime is Limits.KeepaliveMinTime, e.g. "10s".
	KeepaliveMinTime string `yaml:"keepalive_min_time"`
	// KeepaliveTime is Limits.KeepaliveTime.
	KeepaliveTime string `yaml:"keepalive_time"`
	// KeepaliveTimeout is Limits.KeepaliveTimeout.
	KeepaliveTimeout string `yaml:"keepalive_timeout"`
	// MaxConnectionIdle is Limits.MaxConnectionIdle.
	MaxConnectionIdle string `yaml:"max_connection_idle"`
	// MaxConnectionAge is Limits.MaxConnectionAge.
	MaxConnectionAge string `yaml:"max_connection_age"`
	// MaxConnectionAgeGrace is Limits.MaxConnectionAgeGrace.
	MaxConnectionAgeGrace string `yaml:"max_connection_age_grace"`
	// MaxConnections is Limits.MaxConnections.
	MaxConnections *int `yaml:"max_connections"`
	// MaxHandshakes is Limits.MaxHandshakes.
	MaxHandshakes *int `yaml:"max_handshakes"`
	// HandshakeTimeout is Limits.HandshakeTimeout, e.g. "10s".
	HandshakeTimeout string `yaml:"handshake_timeout"`
	// MaxHealthWatches is Limits.MaxHealthWatches.
	MaxHealthWatches *int `yaml:"max_health_watches"`
	// MaxHealthChecks is Limits.MaxHealthChecks.
	MaxHealthChecks *int `yaml:"max_health_checks"`
}

// applySafety applies the auth, tls and limits sections to cfg.
func (fc *FileConfig) applySafety(cfg *Config, getenv func(string) string) error {
	if fc.Auth != nil {
		for i, fk := range fc.Auth.Keys {
			k, err := fk.build(fmt.Sprintf("auth.keys[%d]", i), getenv)
			if err != nil {
				return err
			}
			cfg.Auth.Keys = append(cfg.Auth.Keys, k)
		}
	}
	if t := fc.TLS; t != nil {
		cfg.TLS = TLSFiles{CertFile: t.Cert, KeyFile: t.Key, ClientCAFile: t.ClientCA}
		if (t.Cert == "") != (t.Key == "") {
			return fmt.Errorf("tls: cert and key go together")
		}
		if t.Reload != "" {
			d, err := time.ParseDuration(t.Reload)
			if err != nil || d <= 0 {
				return fmt.Errorf("tls.reload: %q is not a positive duration", t.Reload)
			}
			cfg.TLS.ReloadInterval = d
		}
		cfg.Auth.ClientCertificates = t.ClientCA != ""
	}
	if fc.Limits != nil {
		return fc.Limits.apply(&cfg.Limits)
	}
	return nil
}

func (fk FileKey) build(field string, getenv func(string) string) (APIKey, error) {
	k := APIKey{Name: fk.Name}
	if !fk.Routes.set {
		return k, fmt.Errorf("%s.routes: required: a list of routes, or all", field)
	}
	if !fk.Routes.All {
		k.Routes = append([]string{}, fk.Routes.Names...)
	}
	if fk.Budget != nil {
		b, err := fk.Budget.build(field + ".budget")
		if err != nil {
			return k, err
		}
		k.Budget = b
	}
	switch {
	case fk.Key != "" && fk.SHA256 != "":
		return k, fmt.Errorf("%s: set key or sha256, not both", field)
	case fk.Key != "":
		key, err := expandEnv(fk.Key, getenv)
		if err != nil {
			return k, fmt.Errorf("%s.key: %w", field, err)
		}
		if key == "" {
			return k, fmt.Errorf("%s.key: the key is empty", field)
		}
		k.SHA256 = HashKey(key)
	case fk.SHA256 != "":
		b, err := hex.DecodeString(fk.SHA256)
		if err != nil || len(b) != sha256.Size {
			return k, fmt.Errorf("%s.sha256: want %d hex digits of a SHA-256 digest", field, 2*sha256.Size)
		}
		copy(k.SHA256[:], b)
	}
	return k, nil
}

func (fl *FileLimits) apply(l *Limits) error {
	for _, f := range []struct {
		name string
		src  *int
		dst  *int
	}{{"max_request_bytes", fl.MaxRequestBytes, &l.MaxRequestBytes},
		{"key_max_concurrent", fl.KeyMaxConcurrent, &l.KeyMaxConcurrent}, {"key_burst", fl.KeyBurst, &l.KeyBurst},
		{"max_connections", fl.MaxConnections, &l.MaxConnections}, {"max_handshakes", fl.MaxHandshakes, &l.MaxHandshakes},
		{"max_health_watches", fl.MaxHealthWatches, &l.MaxHealthWatches}, {"max_health_checks", fl.MaxHealthChecks, &l.MaxHealthChecks}} {
		if f.src == nil {
			continue
		}
		if *f.src < 0 {
			return fmt.Errorf("limits.%s: %d is negative", f.name, *f.src)
		}
		*f.dst = *f.src
	}
	if fl.MaxRequestBytes != nil && *fl.MaxRequestBytes == 0 {
		return fmt.Errorf("limits.max_request_bytes: must be positive")
	}
	for _, f := range []struct {
		name string
		src  *AutoCount
		dst  *int
	}{{"max_in_flight", fl.MaxInFlight, &l.MaxInFlight}, {"max_streams_per_connection", fl.MaxStreamsPerConn, &l.MaxConcurrentStreams}} {
		if f.src == nil {
			continue
		}
		n, err := ParseAutoCount(string(*f.src))
		if err == nil && int64(n) > math.MaxUint32 {
			err = fmt.Errorf("%d is out of range", n)
		}
		if err != nil {
			return fmt.Errorf("limits.%s: %w", f.name, err)
		}
		*f.dst = n
	}
	if r := fl.KeyRate; r != nil {
		if *r < 0 || math.IsNaN(*r) || math.IsInf(*r, 0) {
			return fmt.Errorf("limits.key_rate: %v is not a rate", *r)
		}
		l.KeyRate = *r
	}
	for _, f := range []struct {
		name string
		src  string
		dst  *time.Duration
	}{{"keepalive_min_time", fl.KeepaliveMinTime, &l.KeepaliveMinTime}, {"keepalive_time", fl.KeepaliveTime, &l.KeepaliveTime},
		{"keepalive_timeout", fl.KeepaliveTimeout, &l.KeepaliveTimeout}, {"max_connection_idle", fl.MaxConnectionIdle, &l.MaxConnectionIdle},
		{"max_connection_age", fl.MaxConnectionAge, &l.MaxConnectionAge}, {"max_connection_age_grace", fl.MaxConnectionAgeGrace, &l.MaxConnectionAgeGrace},
		{"handshake_timeout", fl.HandshakeTimeout, &l.HandshakeTimeout}} {
		if f.src == "" {
			continue
		}
		d, err := time.ParseDuration(f.src)
		if err != nil || d < 0 {
			return fmt.Errorf("limits.%s: %q is not a duration", f.name, f.src)
		}
		*f.dst = d
	}
	return nil
}
