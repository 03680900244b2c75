package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
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
	env := map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "COMPLETIOND_METRICS_ADDR": "127.0.0.1:0", "COMPLETIOND_SIM_PACE": "1ms"}
	ctx, stop := context.WithCancel(t.Context())
	logs, logw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, logw, io.Discard); logw.Close() }()
	metricsAddr, addr := waitForAddrs(t, logs)
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	}()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	streamOnce(t, conn)

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
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
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
