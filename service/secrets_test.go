package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
)

// The recognisable keys of the leak check.
const (
	leakAnthropicKey = "sk-ant-LEAKCHECK-9f8e7d"
	leakOpenAIKey    = "sk-LEAKCHECK-1a2b3c"
)

// lockedBuffer is a bytes.Buffer safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// echoingReplies are upstream failures that echo key back, each in another
// place: a non-JSON error page, an error event inside a 200 stream, a
// broken chunk, response headers (the request id among them), the error
// object's type, code and request id, a rate limit's message; the last is
// a 401 that says the key is wrong, which ends the route.
func echoingReplies(kind, key string) []pt.Reply {
	authType, authCode := "authentication_error", ""
	if kind == openai.Kind {
		authType, authCode = "invalid_request_error", "invalid_api_key"
	}
	page := "<html><body>502 Bad Gateway: upstream rejected Authorization: Bearer " + key +
		" and x-api-key: " + key + " (key " + key + ")</body></html>"
	broken := "data: {\"broken\": \"" + key + "\n\n"
	if kind == anthropic.Kind {
		broken = "event: content_block_delta\n" + broken
	}
	return []pt.Reply{
		{Status: 502, Body: page},
		{Answer: pt.Text("Partial", " answer"), Fault: pt.ErrorEvent, After: 1,
			Error: &pt.APIError{Type: "api_error", Message: "internal error while serving key " + key}},
		{SSE: broken},
		pt.Fail(pt.ServerError).With("x-echo-key", key).With("www-authenticate", "Bearer "+key).
			With("request-id", "req_"+key).With("x-request-id", "req_"+key),
		{Error: &pt.APIError{Status: 503, Type: "overloaded_" + key, Code: key, Message: "overloaded",
			Extra: map[string]any{"request_id": key, "param": key}}},
		{Error: &pt.APIError{Status: 429, Type: "rate_limit_error", Code: "rate_limit_exceeded",
			Message: "Rate limit reached for key " + key + "; retry later"}, Header: map[string]string{"retry-after-ms": "5"}},
		{Error: &pt.APIError{Status: 401, Type: authType, Code: authCode,
			Message: "Incorrect API key provided: " + key + ". You can find your API key in your account settings."}},
	}
}

// secretEnv is the whole service with both real providers, configured with
// recognisable keys, every log line (Debug, the gRPC middleware's included),
// every span and every metric captured.
type secretEnv struct {
	client   completionv1.CompletionClient
	logs     *lockedBuffer
	spans    *tracetest.SpanRecorder
	metrics  *sdkmetric.ManualReader
	claude   *pt.Server
	gpt      *pt.Server
	captured strings.Builder // events, statuses and errors seen by the caller
}

func newSecretEnv(t *testing.T) *secretEnv {
	t.Helper()
	e := &secretEnv{logs: &lockedBuffer{}, spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader()}
	e.claude = upstreamServer(t, anthropic.Kind, pt.Seq(echoingReplies(anthropic.Kind, leakAnthropicKey)...))
	e.gpt = upstreamServer(t, openai.Kind, pt.Seq(echoingReplies(openai.Kind, leakOpenAIKey)...))

	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.metrics))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	routes := map[string]*config.Route{
		"claude": upstreamRoute("claude", "claude-leakcheck", anthropic.Kind,
			realProvider(t, anthropic.Kind, e.claude, leakAnthropicKey), 200_000, false, generous, "gpt"),
		"gpt": upstreamRoute("gpt", "gpt-leakcheck", openai.Kind,
			realProvider(t, openai.Kind, e.gpt, leakOpenAIKey), 128_000, false, generous),
	}
	cfg := faultConfig(routes)
	cfg.DefaultRoute = "claude"
	cfg.Breaker = config.BreakerSettings{Failures: -1}
	cfg.Policy.Retry.FallbackRetries = cfg.Policy.Retry.MaxRetries // every echoing reply is used on claude
	cfg.Policy.Retry.FallbackWait = time.Hour
	cfg.Logger = slog.New(telemetry.TraceLogHandler(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	cfg.Telemetry = telemetry.Telemetry{TracerProvider: tp, MeterProvider: mp}
	stats := otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp))
	e.client, _ = grpcClient(t, cfg, grpc.StatsHandler(stats))
	return e
}

// record keeps what the caller saw of an event, a status or an error, in
// every form it could be read: binary protobuf, JSON, text.
func (e *secretEnv) record(t *testing.T, m proto.Message) {
	t.Helper()
	bin, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	e.captured.Write(bin)
	e.captured.WriteByte('\n')
	e.captured.Write(js)
	e.captured.WriteByte('\n')
	e.captured.WriteString(fmt.Sprint(m))
	e.captured.WriteByte('\n')
}

func (e *secretEnv) recordStatus(t *testing.T, st *status.Status) {
	t.Helper()
	e.record(t, st.Proto())
	e.captured.WriteString(st.Message() + "\n" + st.Err().Error() + "\n")
	for _, d := range st.Details() {
		e.captured.WriteString(fmt.Sprintf("%v\n", d))
	}
}

// TestNoSecretLeaks configures both providers with recognisable keys, makes
// their upstreams echo the key back in every place an error can carry it,
// and proves the key appears in no log line, no stream event, no status or
// error detail, no span (name, attribute, event, status) and no metric.
func TestNoSecretLeaks(t *testing.T) {
	e := newSecretEnv(t)
	keys := []string{leakAnthropicKey, leakOpenAIKey}

	// Stream: claude fails five times, then 401 → falls back to gpt, which
	// fails the same way → MODEL_ERROR. Every echo passes through a
	// Transition, a log line and a span.
	req := prompt("Explain recovery.", nil)
	evs, st := (&testEnv{client: e.client}).streamAll(t, req)
	checkContract(t, evs, st)
	for _, ev := range evs {
		e.record(t, ev)
	}
	e.recordStatus(t, st)
	retries := len(echoingReplies(anthropic.Kind, "")) - 1
	var want []string
	for range retries {
		want = append(want, "RETRY")
	}
	want = append(append(append(want, "MODEL_FALLBACK"), want...), "MODEL_ERROR")
	if got := transitions(evs); !slices.Equal(got, want) || st.Code() != codes.Internal {
		t.Fatalf("transitions %v with status %v, want %v and INTERNAL: the upstreams' failures did not all happen", got, st, want)
	}

	// Complete, the unary path (its own interceptor chain): the scripts
	// now answer every request with the 401.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.client.Complete(ctx, req)
	if err == nil {
		t.Fatalf("Complete succeeded: %v", res)
	}
	e.recordStatus(t, status.Convert(err))

	// The test proves something only if the keys were sent and echoed.
	for _, c := range []struct {
		srv    *pt.Server
		header string
		want   string
	}{
		{e.claude, "x-api-key", leakAnthropicKey},
		{e.gpt, "Authorization", "Bearer " + leakOpenAIKey},
	} {
		reqs := c.srv.Requests()
		if len(reqs) < len(echoingReplies(anthropic.Kind, "")) {
			t.Errorf("an upstream saw only %d requests", len(reqs))
		}
		for _, r := range reqs {
			if got := r.Header.Get(c.header); got != c.want {
				t.Fatalf("request %d carried %s %q, want the key", r.N, c.header, got)
			}
		}
	}

	// Everything the service wrote or exported.
	e.captured.WriteString(e.logs.String())
	spans := spanDump(e.spans)
	e.captured.WriteString(spans)
	metrics := metricDump(t, e.metrics)
	e.captured.WriteString(metrics)
	all := e.captured.String()

	// Controls: the echoed messages did reach the logs, spans and events
	// — scrubbed — so their absence is not an accident of capture.
	for what, s := range map[string]string{"logs": e.logs.String(), "spans": spans, "metrics": metrics, "events": all} {
		if len(s) == 0 {
			t.Errorf("nothing captured from %s", what)
		}
	}
	for _, want := range []string{`"msg":"transition"`, `"msg":"finished call"`, "[REDACTED]", "Incorrect API key provided"} {
		if !strings.Contains(all, want) {
			t.Errorf("captured output lacks %q: the capture is incomplete", want)
		}
	}
	if !strings.Contains(spans, "attempt 1 claude") || !strings.Contains(spans, "completion.v1.Completion/Stream") {
		t.Errorf("the spans lack the attempt or RPC spans:\n%s", spans)
	}

	for _, key := range keys {
		for _, probe := range []string{key, strings.TrimPrefix(key, "sk-"), strings.TrimPrefix(key, "sk-ant-")} {
			if i := strings.Index(all, probe); i >= 0 {
				t.Errorf("the key leaks (%q found): …%s…", probe, context40(all, i))
			}
		}
	}
}

// context40 is the text around i, for a failure message.
func context40(s string, i int) string {
	return s[max(0, i-120):min(len(s), i+60)]
}

// spanDump renders every span, started or ended: name, status, attributes,
// events with their attributes, links and resource.
func spanDump(rec *tracetest.SpanRecorder) string {
	var b strings.Builder
	var all []sdktrace.ReadOnlySpan
	all = append(all, rec.Ended()...)
	for _, s := range rec.Started() {
		all = append(all, s)
	}
	for _, s := range all {
		fmt.Fprintf(&b, "span %q status %v %q\n", s.Name(), s.Status().Code, s.Status().Description)
		for _, kv := range s.Attributes() {
			fmt.Fprintf(&b, "  attr %s=%s\n", kv.Key, kv.Value.String())
		}
		for _, ev := range s.Events() {
			fmt.Fprintf(&b, "  event %q\n", ev.Name)
			for _, kv := range ev.Attributes {
				fmt.Fprintf(&b, "    attr %s=%s\n", kv.Key, kv.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				fmt.Fprintf(&b, "  link attr %s=%s\n", kv.Key, kv.Value.String())
			}
		}
		if r := s.Resource(); r != nil {
			for _, kv := range r.Attributes() {
				fmt.Fprintf(&b, "  resource %s=%s\n", kv.Key, kv.Value.String())
			}
		}
	}
	return b.String()
}

// metricDump collects every metric and renders it as JSON.
func metricDump(t *testing.T, r *sdkmetric.ManualReader) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(io.Writer(&b))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if err := enc.Encode(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}
