package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/testcerts"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/service"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHelpExplainsFlagsAndEnvironment(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--help"}, func(string) string { return "" }, io.Discard, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-addr", "localhost:50051", "COMPLETIOND_ADDR", "-drain-timeout", "sim.faults"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBadEnvironmentIsReported(t *testing.T) {
	env := func(k string) string {
		if k == "COMPLETIOND_DRAIN_TIMEOUT" {
			return "soon"
		}
		return ""
	}
	err := run(t.Context(), nil, env, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "COMPLETIOND_DRAIN_TIMEOUT") {
		t.Errorf("error %v, want one naming COMPLETIOND_DRAIN_TIMEOUT", err)
	}
}

// TestServesAndDrains starts the real server on a loopback port, as `make
// run` does, talks to it like grpcurl would (reflection, health, a scripted
// Stream), then stops it the way SIGTERM does; its "draining" log line
// gives the timeouts as durations ("10s"), not nanoseconds.
func TestServesAndDrains(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	env := func(k string) string {
		return map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "COMPLETIOND_SIM_PACE": "1ms"}[k]
	}
	go func() { done <- run(ctx, nil, env, logw, io.Discard); logw.Close() }()
	addr := waitForAddr(t, logs)
	var draining map[string]any
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "draining" {
				draining = line
			}
		}
		_, _ = io.Copy(io.Discard, logs) // after a line too long for the scanner
	}()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := listServices(t, conn); !slices.Contains(got, "completion.v1.Completion") || !slices.Contains(got, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", got)
	}
	h, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health %v %v", h, err)
	}
	streamOnce(t, conn)

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("server did not drain")
	}
	<-scanned // run closed the log when it returned
	if draining == nil {
		t.Fatal("no draining log line")
	}
	if draining["timeout"] != "10s" || draining["grace"] != config.DefaultAbortGrace.String() {
		t.Errorf("draining log line %v, want timeout 10s and grace %s", draining, config.DefaultAbortGrace)
	}
}

func waitForAddr(t *testing.T, logs io.Reader) string {
	t.Helper()
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
			return line.Addr
		}
	}
	t.Fatal("no serving line in the logs")
	return ""
}

func listServices(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.CloseSend()
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

func streamOnce(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	req := &completionv1.CompleteRequest{
		Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{
			{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "hi"}}}}}},
		Metadata: map[string]string{"sim.faults": "rate_limit=10ms"},
	}
	st, err := completionv1.NewCompletionClient(conn).Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if tr := ev.GetTransition(); tr != nil {
			reasons = append(reasons, tr.GetReason().String())
		}
	}
	want := []string{"TRANSITION_REASON_RETRY", "TRANSITION_REASON_COMPLETED"}
	if !slices.Equal(reasons, want) {
		t.Errorf("transitions %v, want %v", reasons, want)
	}
}

func TestInvalidConfigFileStopsTheServerAtStart(t *testing.T) {
	path := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(path, []byte("routes:\n  claude: {provider: anthropic, model: m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), []string{"--config", path, "--addr", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "routes.claude.provider") {
		t.Errorf("error %v, want one naming routes.claude.provider", err)
	}
}

// TestCommitDelayOutOfBoundsStopsTheServerAtStart: --redis-commit-delay
// is refused before the server listens when it is not in (0, 100ms]; 0
// is its default's.
func TestCommitDelayOutOfBoundsStopsTheServerAtStart(t *testing.T) {
	for _, delay := range []string{"-1ms", "101ms", "1h"} {
		err := run(t.Context(), []string{"--redis-commit-delay", delay, "--addr", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--redis-commit-delay") {
			t.Errorf("%s: error %v, want one naming --redis-commit-delay", delay, err)
		}
	}
}

func TestAPIKeyInEnvironmentAddsARoute(t *testing.T) {
	env := map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "ANTHROPIC_API_KEY": "sk-ant-SECRET-test"}
	ctx, stop := context.WithCancel(t.Context())
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, logw, io.Discard); logw.Close() }()
	var all bytes.Buffer
	sc := bufio.NewScanner(io.TeeReader(logs, &all))
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"msg":"serving"`) {
			if !strings.Contains(sc.Text(), `"claude"`) || !strings.Contains(sc.Text(), `"default_route":"claude"`) {
				t.Errorf("serving line %s lacks the claude route", sc.Text())
			}
			break
		}
	}
	stop()
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(all.String(), "SECRET") {
		t.Error("the API key appeared in the logs")
	}
}

func TestHelpListsSafetyFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--help"}, func(string) string { return "" }, io.Discard, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-api-key-file", "COMPLETIOND_API_KEY", "-insecure-no-auth", "-reflection", "-tls-cert", "-tls-key",
		"-tls-client-ca", "-tls-reload", "-max-request-bytes", "-max-in-flight", "(default auto)", "-key-max-concurrent", "-key-rate",
		"-key-burst", "-max-streams-per-conn", "-keepalive-min-time", "-keepalive-time", "-keepalive-timeout",
		"-max-connection-idle", "-max-connection-age", "-max-connection-age-grace"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestNoAuthOnlyOnLoopback: without keys the server refuses an address
// other than loopback, unless told it may.
func TestNoAuthOnlyOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		serve bool
	}{
		{"all interfaces", []string{"--addr", ":0"}, nil, false},
		{"unspecified address", []string{"--addr", "0.0.0.0:0"}, nil, false},
		{"a host name", []string{"--addr", "example.internal:0"}, nil, false},
		{"told it may", []string{"--addr", "0.0.0.0:0", "--insecure-no-auth"}, nil, true},
		{"told by the environment", []string{"--addr", "0.0.0.0:0"}, map[string]string{"COMPLETIOND_INSECURE_NO_AUTH": "true"}, true},
		{"with a key", []string{"--addr", "0.0.0.0:0"}, map[string]string{"COMPLETIOND_API_KEY": "k"}, true},
		{"IPv4 loopback", []string{"--addr", "127.0.0.1:0"}, nil, true},
		{"IPv6 loopback", []string{"--addr", "[::1]:0"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			logs, logw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, tc.args, func(k string) string { return tc.env[k] }, logw, io.Discard)
				logw.Close()
			}()
			sc := bufio.NewScanner(logs)
			served := false
			for sc.Scan() {
				if strings.Contains(sc.Text(), `"msg":"serving"`) {
					served = true
					stop()
					break
				}
			}
			go func() { _, _ = io.Copy(io.Discard, logs) }()
			err := <-done
			if tc.serve && (!served || err != nil) {
				if strings.Contains(fmt.Sprint(err), "cannot assign") {
					t.Skipf("no such interface here: %v", err)
				}
				t.Errorf("served %v, error %v; want it to serve", served, err)
			}
			if !tc.serve && (served || err == nil || !strings.Contains(err.Error(), "without authentication")) {
				t.Errorf("served %v, error %v; want a refusal", served, err)
			}
		})
	}
}

// serve runs the server with args and env until the test ends, and returns
// its address.
func serve(t *testing.T, args []string, env map[string]string) string {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, func(k string) string { return env[k] }, logw, io.Discard)
		logw.Close()
	}()
	addr := waitForAddr(t, logs)
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return addr
}

// TestKeyFromTheEnvironment: COMPLETIOND_API_KEY turns auth on; health
// stays open.
func TestKeyFromTheEnvironment(t *testing.T) {
	addr := serve(t, nil, map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "COMPLETIOND_API_KEY": "env-secret", "COMPLETIOND_SIM_PACE": "1ms"})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := completionv1.NewCompletionClient(conn)
	req := &completionv1.CompleteRequest{Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER,
		Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "hi"}}}}}}}
	for _, tc := range []struct {
		auth string
		want codes.Code
	}{{"", codes.Unauthenticated}, {"Bearer wrong", codes.Unauthenticated}, {"Bearer env-secret", codes.OK}} {
		ctx := t.Context()
		if tc.auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.auth)
		}
		if _, err := client.Complete(ctx, req); status.Code(err) != tc.want {
			t.Errorf("authorization %q: %v, want %v", tc.auth, err, tc.want)
		}
	}
	if h, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a key: %v %v", h, err)
	}
}

// TestLimitFlagsOverTheFile: a limit set by a flag or the environment wins
// over the file, which wins over the default.
func TestLimitFlagsOverTheFile(t *testing.T) {
	path := t.TempDir() + "/c.yaml"
	if err := os.WriteFile(path, []byte("providers: {s: {kind: sim}}\nroutes: {sim: {provider: s, model: sim-1}}\n"+
		"limits: {max_in_flight: 100, key_rate: 3, max_streams_per_connection: 7}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPLETIOND_KEY_RATE": "9"}
	o, err := parseOptions([]string{"--config", path, "--max-streams-per-conn", "9", "--keepalive-time", "1m"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadRoutes(service.DefaultConfig(), o.config, sim.New(sim.Config{}), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := o.safety.apply(&cfg, "localhost:0", func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	l, d := cfg.Limits, config.DefaultLimits()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"max-in-flight (file)", l.MaxInFlight, 100},
		{"key-rate (environment over file)", l.KeyRate, 9.0},
		{"max-streams-per-conn (flag over file)", l.MaxConcurrentStreams, 9},
		{"keepalive-time (flag)", l.KeepaliveTime, time.Minute},
		{"key-burst (default)", l.KeyBurst, d.KeyBurst},
		{"max-request-bytes (default)", l.MaxRequestBytes, d.MaxRequestBytes},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestServesTLS: --tls-cert and --tls-key serve TLS; a client trusting the
// certificate connects.
func TestServesTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, pool := localhostCert(t)
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(dir+"/"+name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := serve(t, []string{"--addr", "127.0.0.1:0", "--tls-cert", dir + "/tls.crt", "--tls-key", dir + "/tls.key"}, nil)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health over TLS: %v", err)
	}
	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := healthpb.NewHealthClient(plain).Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext to a TLS server: %v, want UNAVAILABLE", err)
	}
}

// localhostCert is a certificate for localhost, its key, and a pool that
// trusts it (through the authority that signed it).
func localhostCert(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	ca, err := testcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err = ca.Issue(testcerts.Leaf{CommonName: "localhost", Serial: 2, Server: true, DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, ca.Pool
}

// TestVersion: --version and the version subcommand print one line with
// the version, commit and Go version, and serve nothing.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out, errOut strings.Builder
		if err := run(t.Context(), args, func(string) string { return "" }, &out, &errOut); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		line := out.String()
		if !strings.HasPrefix(line, "completiond ") || !strings.Contains(line, "commit ") || !strings.Contains(line, "go1.") {
			t.Errorf("%v printed %q", args, line)
		}
	}
}

// stuckProvider is an upstream call that ignores cancellation: Stream
// blocks until release is closed.
type stuckProvider struct {
	entered, release chan struct{}
	once             sync.Once
}

func (p *stuckProvider) Kind() string { return "stuck" }

func (p *stuckProvider) Stream(context.Context, *provider.Request, func(provider.Chunk) error) (provider.Finish, error) {
	p.once.Do(func() { close(p.entered) })
	<-p.release
	return provider.Finish{}, context.Canceled
}

// withFactory registers a provider kind for one test.
func withFactory(t *testing.T, kind string, f config.Factory) {
	t.Helper()
	old, had := factories[kind]
	factories[kind] = f
	t.Cleanup(func() {
		if had {
			factories[kind] = old
		} else {
			delete(factories, kind)
		}
	})
}

// TestShutdownIsBoundedWhenAHandlerIgnoresCancellation: SIGTERM with a
// handler stuck in an upstream call that ignores its context used to keep
// the process running forever; run now returns within --drain-timeout +
// --shutdown-grace (and some slack).
func TestShutdownIsBoundedWhenAHandlerIgnoresCancellation(t *testing.T) {
	stuck := &stuckProvider{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(stuck.release) // after run returned: goleak checks that the handler then ends
	withFactory(t, "stuck", func(config.ProviderSpec) (provider.Provider, error) { return stuck, nil })
	path := t.TempDir() + "/stuck.yaml"
	cfg := "default_route: stuck\nproviders:\n  s: {kind: stuck}\nroutes:\n  stuck: {provider: s, model: m}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const drain, grace = 200 * time.Millisecond, 200 * time.Millisecond
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"--config", path, "--addr", "127.0.0.1:0", "--drain-timeout", drain.String(), "--shutdown-grace", grace.String()}
	go func() { done <- run(ctx, args, func(string) string { return "" }, logw, io.Discard); logw.Close() }()
	addr := waitForAddr(t, logs)
	go func() { _, _ = io.Copy(io.Discard, logs) }()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &completionv1.CompleteRequest{Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER,
		Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "hi"}}}}}}}
	st, err := completionv1.NewCompletionClient(conn).Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // started
		t.Fatal(err)
	}
	<-stuck.entered
	began := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v", err)
		}
	case <-time.After(drain + grace + 5*time.Second):
		t.Fatal("run did not return: the stuck handler holds the shutdown")
	}
	if took := time.Since(began); took < drain {
		t.Errorf("shutdown took %v, less than the drain timeout %v", took, drain)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the stuck stream ended %v, want Unavailable (connection closed by the hard stop)", err)
	}
}

// TestSimRoutesOnlyWhereDeclared: without a configuration file (make run)
// the sim routes are served; with one, only the routes it declares, so a
// production configuration exposes no simulator unless it names a provider
// of kind sim, which then takes the --sim-* settings.
func TestSimRoutesOnlyWhereDeclared(t *testing.T) {
	env := func(k string) string { return map[string]string{"TEST_KEY": "sk-test"}[k] }
	tests := []struct {
		name, file   string
		routes       []string
		defaultRoute string
		wantErr      string
	}{
		{name: "no file", routes: []string{"sim", "sim-fallback", "sim-large", "sim-noprefill", "sim-small"}, defaultRoute: "sim"},
		{name: "file without sim",
			file:   "default_route: gpt\nproviders:\n  o: {kind: openai, api_key: \"${TEST_KEY}\"}\nroutes:\n  gpt: {provider: o, model: gpt-4.1}\n",
			routes: []string{"gpt"}, defaultRoute: "gpt"},
		{name: "file declaring a sim",
			file:   "default_route: demo\nproviders:\n  s: {kind: sim}\nroutes:\n  demo: {provider: s, model: sim-1}\n",
			routes: []string{"demo"}, defaultRoute: "demo"},
		{name: "file declaring a route named sim", file: "providers:\n  s: {kind: sim}\nroutes:\n  sim: {provider: s, model: sim-1}\n",
			routes: []string{"sim"}, defaultRoute: "sim"},
		{name: "file without default route", file: "providers:\n  s: {kind: sim}\nroutes:\n  demo: {provider: s, model: sim-1}\n",
			wantErr: "default_route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = t.TempDir() + "/c.yaml"
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := sim.New(sim.Config{Words: 3})
			cfg, err := loadRoutes(service.DefaultConfig(), path, s, env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := routeNames(cfg); !slices.Equal(got, tt.routes) || cfg.DefaultRoute != tt.defaultRoute {
				t.Errorf("routes %v (default %q), want %v (default %q)", got, cfg.DefaultRoute, tt.routes, tt.defaultRoute)
			}
			for name, r := range cfg.Routes {
				if r.Upstream.Kind() == "sim" && r.Upstream != s {
					t.Errorf("route %s: a sim without the --sim-* settings", name)
				}
			}
		})
	}
}
