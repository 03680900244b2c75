package service

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
)

// receiver is an in-process OTLP/gRPC trace collector: it keeps every span
// it is sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *receiver) received() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// startReceiver serves a receiver on a loopback port and returns its address.
func startReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return r, lis.Addr().String()
}

// tracedServer is a Completion server on bufconn whose telemetry goes to a
// Telemetry, with the otelgrpc stats handler in front, as cmd/completiond
// assembles it.
type tracedServer struct {
	client completionv1.CompletionClient
	conn   *grpc.ClientConn
	g      *GRPC
}

func tracedEnv(t *testing.T, tel telemetry.Telemetry, mutate ...func(*Config)) *tracedServer {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{Words: 6}))
	cfg.Policy.Retry.BackoffBase = time.Millisecond
	cfg.Policy.Retry.BackoffMax = 4 * time.Millisecond
	cfg.Rand = func() float64 { return 0.5 }
	cfg.Telemetry = tel
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	handler := otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tel.TracerProvider),
		otelgrpc.WithPropagators(propagation.TraceContext{}))
	g := NewGRPC(srv, grpc.StatsHandler(handler))
	conn := serveBufconn(t, g)
	s := &tracedServer{client: completionv1.NewCompletionClient(conn), conn: conn, g: g}
	t.Cleanup(s.drain)
	return s
}

// drain waits until every RPC has ended on the server: otelgrpc ends the RPC
// span and the logging interceptor writes its line after the status is
// sent, so they may lag the client's last Recv.
func (s *tracedServer) drain() {
	s.conn.Close()
	s.g.Server.GracefulStop()
}

// The caller's trace: the RPC span must continue it.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// TestAttemptSpansReachAnOTLPCollector runs a completion with two retries
// and a fallback (429, 500, then a 404 that is route-specific, then the
// answer on sim-fallback) through the real OTLP/gRPC exporter into a
// loopback collector, and checks the span tree it receives.
func TestAttemptSpansReachAnOTLPCollector(t *testing.T) {
	recv, addr := startReceiver(t)
	exp, err := otlptracegrpc.New(t.Context(), otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	srv := tracedEnv(t, telemetry.Telemetry{TracerProvider: tp}, func(c *Config) {
		c.Routes["sim-fallback"].Upstream = addressed{c.Routes["sim-fallback"].Upstream}
	})

	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	evs := streamEvents(ctx, t, srv.client, faults("rate_limit,server_error,not_found"))
	if got, want := transitions(evs), []string{"RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"}; !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	if got := evs[0].GetStarted().GetTraceId(); got != callerTrace {
		t.Errorf("started.trace_id %q, want the caller's %s", got, callerTrace)
	}

	spans := collect(t, srv, tp, recv)
	rpc := only(t, spans, "completion.v1.Completion/Stream")
	if hexID(rpc.GetTraceId()) != callerTrace || hexID(rpc.GetParentSpanId()) != callerSpan || rpc.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("RPC span trace %s parent %s kind %v, want a server span under the caller's %s/%s",
			hexID(rpc.GetTraceId()), hexID(rpc.GetParentSpanId()), rpc.GetKind(), callerTrace, callerSpan)
	}
	chat := only(t, spans, "chat sim-1")
	checkParent(t, chat, rpc)
	checkAttrs(t, chat, map[string]any{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "sim", "gen_ai.request.model": "sim-1",
		"gen_ai.request.max_tokens": int64(8000), "gen_ai.response.model": "sim-2",
		"gen_ai.response.finish_reasons": []string{"end_turn"}, "completiond.reason": "COMPLETED",
	})
	checkAttrs(t, chat, map[string]any{"gen_ai.response.id": "msg_sim_4", "server.address": "upstream.example.test", "server.port": int64(8443)})
	if v, _ := attr(chat, "gen_ai.response.time_to_first_chunk"); v.GetDoubleValue() <= 0 {
		t.Errorf("chat span time to first chunk %v, want seconds > 0", v)
	}
	if got, want := eventReasons(chat), []string{"RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"}; !slices.Equal(got, want) {
		t.Errorf("chat span transition events %v, want %v", got, want)
	}
	checkAttempts(t, spans, chat)
	checkUsageCountedOnce(t, spans, chat)
	checkEventAttrsNamespaced(t, spans)
}

// addressed is a provider that says which upstream it calls, as the
// network providers do.
type addressed struct{ provider.Provider }

func (addressed) Address() (string, int) { return "upstream.example.test", 8443 }

// checkUsageCountedOnce checks that gen_ai.usage.* is on the chat span
// only, and that it is the sum of the attempts' own usage.
func checkUsageCountedOnce(t *testing.T, spans []*tracepb.Span, chat *tracepb.Span) {
	t.Helper()
	var out int64
	for _, s := range spans {
		if s == chat {
			continue
		}
		for _, kv := range s.GetAttributes() {
			if strings.HasPrefix(kv.GetKey(), "gen_ai.usage.") {
				t.Errorf("%s: %s; token usage belongs on the chat span only", s.GetName(), kv.GetKey())
			}
		}
		out += intAttr(s, "completiond.usage.output_tokens")
	}
	if got := intAttr(chat, "gen_ai.usage.output_tokens"); got <= 0 || got != out {
		t.Errorf("chat span output tokens %d, want the attempts' %d (> 0)", got, out)
	}
}

// checkEventAttrsNamespaced checks that no span event attribute is bare or
// in the error.* namespace, which the conventions reserve.
func checkEventAttrsNamespaced(t *testing.T, spans []*tracepb.Span) {
	t.Helper()
	for _, s := range spans {
		for _, e := range s.GetEvents() {
			for _, kv := range e.GetAttributes() {
				if k := kv.GetKey(); !strings.Contains(k, ".") || strings.HasPrefix(k, "error.") {
					t.Errorf("%s: event %q has attribute %q", s.GetName(), e.GetName(), k)
				}
			}
		}
	}
}

// checkAttempts checks the attempt spans: children of chat, in order, with
// resend counts 0, 1, 2, 3, each with its error, backoff and decision.
func checkAttempts(t *testing.T, spans []*tracepb.Span, chat *tracepb.Span) {
	t.Helper()
	want := []struct {
		name   string
		attrs  map[string]any
		next   string
		backed bool
	}{
		{"attempt 1 sim", map[string]any{"completiond.error.kind": "rate_limit", "http.response.status_code": int64(429), "completiond.outcome": "failed"}, "RETRY", true},
		{"attempt 2 sim", map[string]any{"completiond.error.kind": "server", "http.response.status_code": int64(500), "completiond.outcome": "failed"}, "RETRY", true},
		{"attempt 3 sim", map[string]any{"completiond.error.kind": "not_found", "http.response.status_code": int64(404), "completiond.outcome": "failed"}, "MODEL_FALLBACK", false},
		{"attempt 4 sim-fallback", map[string]any{"gen_ai.request.model": "sim-2", "completiond.outcome": "answered", "gen_ai.response.finish_reasons": []string{"end_turn"}}, "COMPLETED", false},
	}
	for i, w := range want {
		s := only(t, spans, w.name)
		checkParent(t, s, chat)
		w.attrs["completiond.attempt"] = int64(i + 1)
		w.attrs["completiond.next"] = w.next
		checkAttrs(t, s, w.attrs)
		// The HTTP conventions: the resend count is on resends only.
		if v, ok := attr(s, "http.request.resend_count"); ok != (i > 0) || (ok && v.GetIntValue() != int64(i)) {
			t.Errorf("%s: resend count %v (present %v), want %d and present only on a resend", w.name, v, ok, i)
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("%s: kind %v, want client", w.name, s.GetKind())
		}
		// Durations are numbers, in seconds.
		if v, ok := attr(s, "completiond.backoff.seconds"); ok != w.backed || (ok && v.GetDoubleValue() <= 0) {
			t.Errorf("%s: backoff %v (recorded %v), want %v and seconds > 0", w.name, v, ok, w.backed)
		}
		if got := eventReasons(s); len(got) != 1 || got[0] != w.next {
			t.Errorf("%s: transition events %v, want [%s]", w.name, got, w.next)
		}
		if failed := w.attrs["completiond.outcome"] == "failed"; failed != (s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR) {
			t.Errorf("%s: status %v", w.name, s.GetStatus())
		}
		_, hasServer := attr(s, "server.address")
		if hasServer != (i == 3) {
			t.Errorf("%s: server.address present %v; only the addressed route has one", w.name, hasServer)
		}
	}
	answer := only(t, spans, "attempt 4 sim-fallback")
	checkAttrs(t, answer, map[string]any{"gen_ai.response.model": "sim-2", "gen_ai.response.id": "msg_sim_4",
		"server.address": "upstream.example.test", "server.port": int64(8443)})
	if v, _ := attr(answer, "gen_ai.response.time_to_first_chunk"); v.GetDoubleValue() <= 0 {
		t.Errorf("answer's time to first chunk %v, want seconds > 0", v)
	}
}

// streamEvents runs a Stream call and returns its events; it fails the test
// on a non-OK status.
func streamEvents(ctx context.Context, t *testing.T, client completionv1.CompletionClient, req *completionv1.CompleteRequest) []*completionv1.CompletionEvent {
	t.Helper()
	st, err := client.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := st.Recv()
		if err != nil {
			checkContract(t, evs, statusOf(errOrOK(err)))
			return evs
		}
		evs = append(evs, ev)
	}
}

// collect drains the server, flushes the provider and returns what the
// collector received.
func collect(t *testing.T, srv *tracedServer, tp *sdktrace.TracerProvider, r *receiver) []*tracepb.Span {
	t.Helper()
	srv.drain()
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return r.received()
}

func only(t *testing.T, spans []*tracepb.Span, name string) *tracepb.Span {
	t.Helper()
	var found []*tracepb.Span
	for _, s := range spans {
		if s.GetName() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.GetName())
		}
		t.Fatalf("%d spans named %q; spans: %v", len(found), name, names)
	}
	return found[0]
}

func checkParent(t *testing.T, child, parent *tracepb.Span) {
	t.Helper()
	if hexID(child.GetParentSpanId()) != hexID(parent.GetSpanId()) || hexID(child.GetTraceId()) != hexID(parent.GetTraceId()) {
		t.Errorf("%s is not a child of %s", child.GetName(), parent.GetName())
	}
}

func checkAttrs(t *testing.T, s *tracepb.Span, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := attr(s, k)
		if !ok {
			t.Errorf("%s: no attribute %s", s.GetName(), k)
			continue
		}
		if !equalValue(got, v) {
			t.Errorf("%s: %s = %v, want %v", s.GetName(), k, got, v)
		}
	}
}

func equalValue(got *commonpb.AnyValue, want any) bool {
	switch w := want.(type) {
	case string:
		return got.GetStringValue() == w
	case int64:
		return got.GetIntValue() == w
	case []string:
		var vs []string
		for _, v := range got.GetArrayValue().GetValues() {
			vs = append(vs, v.GetStringValue())
		}
		return slices.Equal(vs, w)
	}
	return false
}

func attr(s *tracepb.Span, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return nil, false
}

func intAttr(s *tracepb.Span, key string) int64 {
	v, _ := attr(s, key)
	return v.GetIntValue()
}

// eventReasons lists the reasons of a span's transition events.
func eventReasons(s *tracepb.Span) []string {
	var out []string
	for _, e := range s.GetEvents() {
		if e.GetName() != "transition" {
			continue
		}
		for _, kv := range e.GetAttributes() {
			if kv.GetKey() == "completiond.reason" {
				out = append(out, kv.GetValue().GetStringValue())
			}
		}
	}
	return out
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// errOrOK maps the end of a stream to nil and keeps real errors.
func errOrOK(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
