package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/service"
)

// apiKeyEnv holds one API key, named "default", allowed every route. It is
// not a flag: a key on the command line would show in ps.
const apiKeyEnv = "COMPLETIOND_API_KEY"

// safety are the flags of authentication, TLS and limits.
type safety struct {
	apiKeyFile     string
	insecureNoAuth bool
	reflection     bool
	tls            config.TLSFiles
	limits         config.Limits
	set            map[string]bool // flags set on the command line or in the environment
}

// limitFlags copy each limit flag's value into the configuration, when the
// flag is set; otherwise the file's value, or the default, stays.
var limitFlags = map[string]func(dst *config.Limits, s *safety){
	"max-request-bytes":        func(d *config.Limits, s *safety) { d.MaxRequestBytes = s.limits.MaxRequestBytes },
	"max-in-flight":            func(d *config.Limits, s *safety) { d.MaxInFlight = s.limits.MaxInFlight },
	"key-max-concurrent":       func(d *config.Limits, s *safety) { d.KeyMaxConcurrent = s.limits.KeyMaxConcurrent },
	"key-rate":                 func(d *config.Limits, s *safety) { d.KeyRate = s.limits.KeyRate },
	"key-burst":                func(d *config.Limits, s *safety) { d.KeyBurst = s.limits.KeyBurst },
	"max-streams-per-conn":     func(d *config.Limits, s *safety) { d.MaxConcurrentStreams = s.limits.MaxConcurrentStreams },
	"keepalive-min-time":       func(d *config.Limits, s *safety) { d.KeepaliveMinTime = s.limits.KeepaliveMinTime },
	"keepalive-time":           func(d *config.Limits, s *safety) { d.KeepaliveTime = s.limits.KeepaliveTime },
	"keepalive-timeout":        func(d *config.Limits, s *safety) { d.KeepaliveTimeout = s.limits.KeepaliveTimeout },
	"max-connection-idle":      func(d *config.Limits, s *safety) { d.MaxConnectionIdle = s.limits.MaxConnectionIdle },
	"max-connection-age":       func(d *config.Limits, s *safety) { d.MaxConnectionAge = s.limits.MaxConnectionAge },
	"max-connection-age-grace": func(d *config.Limits, s *safety) { d.MaxConnectionAgeGrace = s.limits.MaxConnectionAgeGrace },
	"max-connections":          func(d *config.Limits, s *safety) { d.MaxConnections = s.limits.MaxConnections },
	"max-handshakes":           func(d *config.Limits, s *safety) { d.MaxHandshakes = s.limits.MaxHandshakes },
	"handshake-timeout":        func(d *config.Limits, s *safety) { d.HandshakeTimeout = s.limits.HandshakeTimeout },
	"max-health-watches":       func(d *config.Limits, s *safety) { d.MaxHealthWatches = s.limits.MaxHealthWatches },
	"max-health-checks":        func(d *config.Limits, s *safety) { d.MaxHealthChecks = s.limits.MaxHealthChecks },
}

// define registers the flags on fs.
func (s *safety) define(fs *flag.FlagSet) {
	d := config.DefaultLimits()
	fs.StringVar(&s.apiKeyFile, "api-key-file", "", "file holding one API key (key name \"default\", every route); callers send\n\"authorization: Bearer <key>\". "+apiKeyEnv+" may hold the key itself; more keys, with\nthe routes each may use: auth.keys in --config")
	fs.BoolVar(&s.insecureNoAuth, "insecure-no-auth", false, "serve without authentication on an address that is not loopback")
	fs.BoolVar(&s.reflection, "reflection", true, "serve gRPC reflection (for grpcurl); it needs a key when auth is on")
	fs.StringVar(&s.tls.CertFile, "tls-cert", "", "PEM certificate chain: serve TLS (with --tls-key); reloaded when the file changes")
	fs.StringVar(&s.tls.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&s.tls.ClientCAFile, "tls-client-ca", "", "PEM CAs of client certificates (mTLS): a verified certificate authenticates its\ncaller as the key its CommonName or DNS SAN names, else by CommonName with every route")
	fs.DurationVar(&s.tls.ReloadInterval, "tls-reload", config.DefaultTLSReload, "how often, at most, a handshake checks whether the certificate files changed")
	fs.IntVar(&s.limits.MaxRequestBytes, "max-request-bytes", d.MaxRequestBytes, "largest encoded request accepted")
	s.limits.MaxInFlight, s.limits.MaxConcurrentStreams = d.MaxInFlight, d.MaxConcurrentStreams
	fs.Var(autoCount{&s.limits.MaxInFlight}, "max-in-flight", "completions the server runs at once; more are shed at once with UNAVAILABLE and RetryInfo\n(0: no cap; auto: from the memory the process may use, see the log line \"serving\")")
	fs.IntVar(&s.limits.KeyMaxConcurrent, "key-max-concurrent", d.KeyMaxConcurrent, "completions one key runs at once; more: RESOURCE_EXHAUSTED and RetryInfo (0: no cap)")
	fs.Float64Var(&s.limits.KeyRate, "key-rate", d.KeyRate, "completions per second one key may start; more: RESOURCE_EXHAUSTED and RetryInfo (0: no cap)")
	fs.IntVar(&s.limits.KeyBurst, "key-burst", d.KeyBurst, "burst of --key-rate")
	fs.Var(autoCount{&s.limits.MaxConcurrentStreams}, "max-streams-per-conn", "concurrent RPCs on one connection; more wait in the client, silently\n(0: no cap; auto: twice --max-in-flight, so that only refused ones ever wait)")
	fs.DurationVar(&s.limits.KeepaliveMinTime, "keepalive-min-time", d.KeepaliveMinTime, "shortest interval between client pings; a client pinging more often is disconnected")
	fs.DurationVar(&s.limits.KeepaliveTime, "keepalive-time", d.KeepaliveTime, "ping a connection silent for this long")
	fs.DurationVar(&s.limits.KeepaliveTimeout, "keepalive-timeout", d.KeepaliveTimeout, "close a connection whose ping is unanswered for this long")
	fs.DurationVar(&s.limits.MaxConnectionIdle, "max-connection-idle", d.MaxConnectionIdle, "close a connection without RPCs for this long (0: never)")
	fs.DurationVar(&s.limits.MaxConnectionAge, "max-connection-age", d.MaxConnectionAge, "send GOAWAY to a connection this old, so that clients spread over replicas (0: never)")
	fs.DurationVar(&s.limits.MaxConnectionAgeGrace, "max-connection-age-grace", d.MaxConnectionAgeGrace, "how long the RPCs of a connection past its age may still run")
	fs.IntVar(&s.limits.MaxConnections, "max-connections", d.MaxConnections, "connections held at once, handshaking or not; more wait in the listen backlog (0: no cap)")
	fs.IntVar(&s.limits.MaxHandshakes, "max-handshakes", d.MaxHandshakes, "connections in their TLS or HTTP/2 handshake at once; more wait in the listen backlog (0: no cap)")
	fs.DurationVar(&s.limits.HandshakeTimeout, "handshake-timeout", d.HandshakeTimeout, "close a connection whose handshake takes longer (0: gRPC's 120s)")
	fs.IntVar(&s.limits.MaxHealthWatches, "max-health-watches", d.MaxHealthWatches, "Health.Watch streams open at once (no key needed); more: RESOURCE_EXHAUSTED (0: no cap)")
	fs.IntVar(&s.limits.MaxHealthChecks, "max-health-checks", d.MaxHealthChecks, "Health.Check calls running at once (no key needed); more: RESOURCE_EXHAUSTED (0: no cap)")
}

// autoCount is the flag of a limit that is a count or auto
// (config.ParseAutoCount).
type autoCount struct{ n *int }

// String is the limit as ParseAutoCount reads it.
func (a autoCount) String() string {
	if a.n == nil {
		return "0"
	}
	return config.FormatAutoCount(*a.n)
}

// Set reads a count or auto.
func (a autoCount) Set(s string) error {
	n, err := config.ParseAutoCount(s)
	if err == nil && int64(n) > math.MaxUint32 {
		err = fmt.Errorf("%d is out of range", n)
	}
	if err != nil {
		return err
	}
	*a.n = n
	return nil
}

// apply puts the flags into cfg, over the configuration file, and checks
// that the server may listen on addr: without authentication, only a
// loopback address is allowed, unless --insecure-no-auth.
func (s *safety) apply(cfg *service.Config, addr string, getenv func(string) string) error {
	for name, copyTo := range limitFlags {
		if s.set[name] {
			copyTo(&cfg.Limits, s)
		}
	}
	if cfg.Limits.MaxRequestBytes <= 0 {
		return errors.New("--max-request-bytes must be positive")
	}
	for _, f := range []struct {
		name string
		dst  *string
		src  string
	}{{"tls-cert", &cfg.TLS.CertFile, s.tls.CertFile}, {"tls-key", &cfg.TLS.KeyFile, s.tls.KeyFile}, {"tls-client-ca", &cfg.TLS.ClientCAFile, s.tls.ClientCAFile}} {
		if s.set[f.name] {
			*f.dst = f.src
		}
	}
	if s.set["tls-reload"] || cfg.TLS.ReloadInterval == 0 {
		cfg.TLS.ReloadInterval = s.tls.ReloadInterval
	}
	if cfg.TLS.ClientCAFile != "" && !cfg.TLS.On() {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	cfg.Auth.ClientCertificates = cfg.TLS.ClientCAFile != ""
	cfg.DisableReflection = !s.reflection
	key, err := s.apiKey(getenv)
	if err != nil {
		return err
	}
	if key != "" {
		cfg.Auth.Keys = append(cfg.Auth.Keys, config.APIKey{Name: "default", SHA256: config.HashKey(key)})
	}
	if !cfg.Auth.On() && !s.insecureNoAuth && !loopback(addr) {
		return fmt.Errorf("refusing to serve on %s without authentication: set --api-key-file or %s, auth.keys in --config, "+
			"or --tls-client-ca; or accept anybody with --insecure-no-auth", addr, apiKeyEnv)
	}
	return nil
}

// apiKey is the key of --api-key-file or COMPLETIOND_API_KEY, or "".
func (s *safety) apiKey(getenv func(string) string) (string, error) {
	env := strings.TrimSpace(getenv(apiKeyEnv))
	if s.apiKeyFile == "" {
		return env, nil
	}
	if env != "" {
		return "", fmt.Errorf("set --api-key-file or %s, not both", apiKeyEnv)
	}
	b, err := os.ReadFile(s.apiKeyFile)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("--api-key-file: %s is empty", s.apiKeyFile)
	}
	return key, nil
}

// loopback reports whether addr listens on a loopback interface only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serverOptions are the gRPC options of cfg's TLS, if any; the
// certificate's expiry is a gauge of cfg.Telemetry.
func serverOptions(cfg service.Config, log *slog.Logger) ([]grpc.ServerOption, error) {
	if !cfg.TLS.On() {
		return nil, nil
	}
	tc, err := service.ServerTLS(cfg.TLS, log, time.Now, cfg.Telemetry)
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tc))}, nil
}

// keyNames are the names of cfg's keys, for the log.
func keyNames(cfg service.Config) []string {
	names := make([]string, 0, len(cfg.Auth.Keys))
	for _, k := range cfg.Auth.Keys {
		names = append(names, k.Name)
	}
	return names
}
