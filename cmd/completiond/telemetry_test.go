package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func TestTelemetryIsOffByDefault(t *testing.T) {
	tel, err := setupTelemetry(t.Context(), "", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.close(slog.New(slog.DiscardHandler))
	if tel.TracerProvider != nil || tel.MeterProvider != nil || len(tel.grpcOptions) != 0 {
		t.Errorf("telemetry on without configuration: %+v", tel)
	}
}

func TestTelemetryFollowsTheOTELVariables(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		traces  bool
		failing bool
	}{
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317"}, traces: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://localhost:4317"}, traces: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, traces: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4317"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, failing: true},
	} {
		tel, err := setupTelemetry(t.Context(), "", func(k string) string { return tc.env[k] }, slog.New(slog.DiscardHandler))
		if tc.failing != (err != nil) {
			t.Errorf("%v: error %v", tc.env, err)
			continue
		}
		if err != nil {
			continue
		}
		if on := tel.TracerProvider != nil; on != tc.traces || on != (len(tel.grpcOptions) == 1) {
			t.Errorf("%v: tracing %v with %d gRPC options, want %v", tc.env, on, len(tel.grpcOptions), tc.traces)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_ = tel.shutdown(ctx) // nothing was recorded, so nothing is sent
		cancel()
	}
}

// TestMetricsEndpointCountsRecoveries runs the server with --metrics-addr,
// makes one completion with a retry, and scrapes the counters it moved.
func TestMetricsEndpointCountsRecoveries(t *testing.T) {
	metricsAddr, stop := servedOnce(t, nil)
	defer stop()

	body := scrape(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		`completiond_transitions_total\{completiond_reason="RETRY"\} 1\n`,
		`completiond_transitions_total\{completiond_reason="COMPLETED"\} 1\n`,
		// The 429 by route, provider, error kind and status.
		`completiond_attempts_total\{completiond_error_kind="rate_limit",completiond_outcome="failed",completiond_route="sim",gen_ai_provider_name="sim",http_response_status_code="429"\} 1\n`,
		`completiond_attempts_total\{completiond_outcome="answered",completiond_route="sim",gen_ai_provider_name="sim"\} 1\n`,
		`completiond_backoff_seconds_count\{completiond_reason="RETRY"\} 1\n`,
		`completiond_streams_in_flight 0\n`,
		// One series per circuit state.
		`completiond_circuit_state\{completiond_circuit_state="closed",completiond_route="sim"\} 1\n`,
		`completiond_circuit_state\{completiond_circuit_state="open",completiond_route="sim"\} 0\n`,
		`completiond_circuit_state\{completiond_circuit_state="half_open",completiond_route="sim"\} 0\n`,
		// Tokens by the model that answered.
		`gen_ai_client_token_usage_count\{gen_ai_operation_name="chat",gen_ai_provider_name="sim",gen_ai_request_model="sim-1",gen_ai_response_model="sim-1",gen_ai_token_type="output"\} 1\n`,
		`gen_ai_client_operation_time_to_first_chunk_seconds_count\{[^}]*completiond_route="sim"[^}]*\} 1\n`,
		// Identity: the build, exactly, and the instance on target_info.
		`\ncompletiond_build_info\{commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1\n`,
		`target_info\{[^}]*service_instance_id="[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"[^}]*\} 1\n`,
		// The Go runtime and the process, on the same endpoint.
		`\ngo_goroutines \d+\n`,
		`\nprocess_resident_memory_bytes [0-9.e+]+\n`,
	} {
		if !regexp.MustCompile(want).MatchString(body) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, "otel_scope_") {
		t.Errorf("metrics carry otel_scope_* labels")
	}
}

// waitForAddrs reads the logs up to the serving line and returns the
// metrics address and the gRPC address.
func waitForAddrs(t *testing.T, logs io.Reader) (metrics, grpcAddr string) {
	t.Helper()
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Msg {
		case "serving metrics":
			metrics = line.Addr
		case "serving":
			return metrics, line.Addr
		}
	}
	t.Fatal("no serving line in the logs")
	return "", ""
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	return scrapeAs(t, url, "")
}

// openMetrics is the Accept header of a Prometheus that asks for exemplars.
const openMetrics = "application/openmetrics-text;version=1.0.0"

// scrapeAs scrapes url with the Accept header accept (none when empty).
func scrapeAs(t *testing.T, url, accept string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	// No keep-alive: no connection outlives the test (goleak).
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// traceReceiver is an in-process OTLP/gRPC trace collector that keeps what
// it is sent.
type traceReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	requests []*collectortrace.ExportTraceServiceRequest
}

func (r *traceReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startTraceReceiver serves a traceReceiver on loopback and returns its
// address.
func startTraceReceiver(t *testing.T) (*traceReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &traceReceiver{}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return r, lis.Addr().String()
}

// resources returns, by trace id, the resource attributes of the spans
// received.
func (r *traceReceiver) resources() map[string]map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]map[string]string{}
	for _, req := range r.requests {
		for _, rs := range req.GetResourceSpans() {
			attrs := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					out[hex.EncodeToString(sp.GetTraceId())] = attrs
				}
			}
		}
	}
	return out
}

// TestExemplarsLinkLatencyToTraces runs the server with tracing into a
// loopback collector and the Prometheus endpoint, makes one completion and
// scrapes as a Prometheus that wants exemplars (OpenMetrics): the latency
// histogram's bucket carries the trace id of the completion, and that
// trace reached the collector with the instance's identity — the same
// service.instance.id as target_info on /metrics.
func TestExemplarsLinkLatencyToTraces(t *testing.T) {
	recv, collector := startTraceReceiver(t)
	// The OTLP exporter reads its endpoint from the process environment.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+collector)
	metricsAddr, stop := servedOnce(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + collector})
	body := scrapeAs(t, "http://"+metricsAddr+"/metrics", openMetrics)
	plain := scrape(t, "http://"+metricsAddr+"/metrics")
	stop() // run flushes the spans to the collector before it returns

	if !strings.HasSuffix(strings.TrimSpace(body), "# EOF") {
		t.Fatalf("the endpoint did not answer in OpenMetrics:\n%s", body)
	}
	if strings.Contains(plain, "trace_id") {
		t.Errorf("exemplars in the plain text format, which cannot carry them")
	}
	exemplar := regexp.MustCompile(`(?m)^gen_ai_client_operation_duration_seconds_bucket\{[^}]*\} \d+ # \{[^}]*trace_id="([0-9a-f]{32})"[^}]*\}`)
	m := exemplar.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no exemplar with a trace id on the completion latency histogram:\n%s", grepLines(body, "gen_ai_client_operation_duration"))
	}
	res, ok := recv.resources()[m[1]]
	if !ok {
		t.Fatalf("the exemplar's trace %s did not reach the collector", m[1])
	}
	instance := regexp.MustCompile(`target_info\{[^}]*service_instance_id="([^"]+)"`).FindStringSubmatch(plain)
	if instance == nil || res["service.instance.id"] != instance[1] {
		t.Errorf("span resource service.instance.id %q, metrics target_info %v: want one instance id on both", res["service.instance.id"], instance)
	}
	if res["service.version"] == "" || res["service.name"] != "completiond" {
		t.Errorf("span resource %v lacks service.name or service.version", res)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// servedOnce runs the server with the Prometheus endpoint on loopback (and
// extra environment), makes one completion with a retry (streamOnce), and
// returns the metrics address and the function that stops the server and
// waits for run to return: traces are flushed by then. Stopping twice is
// fine; the test's end stops it too.
func servedOnce(t *testing.T, extra map[string]string) (metricsAddr string, stop func()) {
	t.Helper()
	return servedWith(t, extra, insecure.NewCredentials())
}

// servedWith is servedOnce, the client connecting with creds.
func servedWith(t *testing.T, extra map[string]string, creds credentials.TransportCredentials) (metricsAddr string, stop func()) {
	t.Helper()
	env := map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "COMPLETIOND_METRICS_ADDR": "127.0.0.1:0", "COMPLETIOND_SIM_PACE": "1ms"}
	maps.Copy(env, extra)
	ctx, cancel := context.WithCancel(t.Context())
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, logw, io.Discard); logw.Close() }()
	metricsAddr, addr := waitForAddrs(t, logs)
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	t.Cleanup(stop)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	streamOnce(t, conn)
	awaitServerRecord(t, metricsAddr)
	return metricsAddr, stop
}

// awaitServerRecord waits until /metrics shows the server's record of the
// RPC: grpc's stats handler ends the RPC after the client has its status, so
// a scrape at once can miss it (it did on a loaded CI machine).
func awaitServerRecord(t *testing.T, metricsAddr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(scrape(t, "http://"+metricsAddr+"/metrics"), "rpc_server_call_duration_seconds_count{") {
		if time.Now().After(deadline) {
			t.Fatal("the server did not record the RPC on /metrics within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
