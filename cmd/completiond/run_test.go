package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
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
// Stream), then stops it the way SIGTERM does.
func TestServesAndDrains(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	env := func(k string) string {
		return map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "COMPLETIOND_SIM_PACE": "1ms"}[k]
	}
	go func() { done <- run(ctx, nil, env, logw, io.Discard); logw.Close() }()
	addr := waitForAddr(t, logs)
	go func() { _, _ = io.Copy(io.Discard, logs) }()

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
func withFactory(t *testing.T, kind string, f service.Factory) {
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
	withFactory(t, "stuck", func(service.ProviderSpec) (provider.Provider, error) { return stuck, nil })
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
