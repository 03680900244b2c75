package service

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testkit"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// recorded is a server whose spans go to a recorder and whose metrics to a
// manual reader.
type recorded struct {
	*tracedServer
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
}

func newRecorded(t *testing.T, mutate ...func(*Config)) *recorded {
	t.Helper()
	r := &recorded{spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.metrics))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	r.tracedServer = tracedEnv(t, telemetry.Telemetry{TracerProvider: tp, MeterProvider: mp}, mutate...)
	return r
}

// ended returns the ended spans by name.
func (r *recorded) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestMetricsExplainTheRecovery(t *testing.T) {
	r := newRecorded(t)
	streamEvents(t.Context(), t, r.client, faults("rate_limit,server_error,not_found"))
	var rm metricdata.ResourceMetrics
	if err := r.metrics.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := counters(rm)
	for key, want := range map[string]int64{
		"completiond.transitions{completiond.reason=RETRY}":          2,
		"completiond.transitions{completiond.reason=MODEL_FALLBACK}": 1,
		"completiond.transitions{completiond.reason=COMPLETED}":      1,
		"completiond.attempts{completiond.error.kind=rate_limit,completiond.outcome=failed,completiond.route=sim,gen_ai.provider.name=sim,http.response.status_code=429}": 1,
		"completiond.attempts{completiond.error.kind=server,completiond.outcome=failed,completiond.route=sim,gen_ai.provider.name=sim,http.response.status_code=500}":     1,
		"completiond.attempts{completiond.error.kind=not_found,completiond.outcome=failed,completiond.route=sim,gen_ai.provider.name=sim,http.response.status_code=404}":  1,
		"completiond.attempts{completiond.outcome=answered,completiond.route=sim-fallback,gen_ai.provider.name=sim}":                                                      1,
		"completiond.streams_in_flight{}": 0,
		"completiond.circuit.state{completiond.circuit.state=closed,completiond.route=sim}":    1,
		"completiond.circuit.state{completiond.circuit.state=half_open,completiond.route=sim}": 0,
		"completiond.circuit.state{completiond.circuit.state=open,completiond.route=sim}":      0,
	} {
		if got, ok := sums[key]; !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d; have %v", key, got, ok, want, keys(sums))
		}
	}
	const answer = "gen_ai.operation.name=chat,gen_ai.provider.name=sim,gen_ai.request.model=sim-2,gen_ai.response.model=sim-2"
	counts := histogramCounts(rm)
	for key, want := range map[string]uint64{
		"completiond.backoff{completiond.reason=RETRY}":                                                                    2,
		"gen_ai.client.operation.time_to_first_chunk{completiond.route=sim-fallback," + answer + "}":                       1,
		"gen_ai.client.token.usage{" + answer + ",gen_ai.token.type=input}":                                                1,
		"gen_ai.client.token.usage{" + answer + ",gen_ai.token.type=output}":                                               1,
		"gen_ai.client.operation.duration{gen_ai.operation.name=chat,gen_ai.provider.name=sim,gen_ai.request.model=sim-1}": 1,
	} {
		if got := counts[key]; got != want {
			t.Errorf("%s recorded %d times, want %d; have %v", key, got, want, keys(counts))
		}
	}
	if n := len(counts); n != 5 {
		t.Errorf("%d histogram series, want 5 (no tokens for the attempts that read none): %v", n, keys(counts))
	}
}

// counters flattens the sums and gauges of rm to "name{k=v,…}" → value.
func counters(rm metricdata.ResourceMetrics) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+labels(p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+labels(p.Attributes)] = p.Value
				}
			}
		}
	}
	return out
}

// histogramCounts flattens the histograms of rm to "name{k=v,…}" → count.
func histogramCounts(rm metricdata.ResourceMetrics) map[string]uint64 {
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+labels(p.Attributes)] = p.Count
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+labels(p.Attributes)] = p.Count
				}
			}
		}
	}
	return out
}

func labels(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestEverySpanEnds runs completions that end in different ways and checks
// that every span started was ended, and that each attempt has a span.
func TestEverySpanEnds(t *testing.T) {
	r := newRecorded(t)
	for _, script := range []string{"ok", "rate_limit", "cut=3", "max_tokens=3", "overload*3", "invalid", "stream_overload=2"} {
		st, err := r.client.Stream(t.Context(), faults(script))
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err != nil {
				break
			}
		}
	}
	r.drain()
	if started, ended := len(r.spans.Started()), len(r.spans.Ended()); started != ended {
		t.Errorf("%d spans started, %d ended", started, ended)
	}
	if n := len(r.ended("chat sim-1")); n != 7 {
		t.Errorf("%d completion spans, want 7", n)
	}
}

// TestCancelledStreamEndsItsSpans cancels a stream mid-answer: the attempt
// span says cancelled, the completion span ends with the abort.
func TestCancelledStreamEndsItsSpans(t *testing.T) {
	r := newRecorded(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := r.client.Stream(ctx, prompt("Tell me about recovery.", map[string]string{sim.MetaPace: "20ms", sim.MetaWords: "50"}))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("stream ended before the first delta: %v", err)
		}
		if ev.GetDelta() != nil {
			break
		}
	}
	cancel()
	r.drain()
	chat := endedOne(t, r, "chat sim-1")
	if got := stringAttr(chat, "error.type"); got != "ABORTED_STREAMING" {
		t.Errorf("completion span error.type %q, want ABORTED_STREAMING", got)
	}
	if got := stringAttr(endedOne(t, r, "attempt 1 sim"), "completiond.outcome"); got != "cancelled" {
		t.Errorf("attempt outcome %q, want cancelled", got)
	}
}

// endedOne returns the one ended span named name.
func endedOne(t *testing.T, r *recorded, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	s := r.ended(name)
	if len(s) != 1 {
		t.Fatalf("%d ended spans named %q, want 1", len(s), name)
	}
	return s[0]
}

func TestCompactionHasItsOwnSpan(t *testing.T) {
	r := newRecorded(t)
	req := faults("prompt_too_long")
	for i := range 8 {
		role := completionv1.Role_ROLE_ASSISTANT
		if i%2 == 1 {
			role = completionv1.Role_ROLE_USER
		}
		req.Messages = append(req.Messages, &completionv1.Message{Role: role, Content: []*completionv1.ContentBlock{convert.TextBlock("turn " + strings.Repeat("x", i))}})
	}
	evs := streamEvents(t.Context(), t, r.client, req)
	if !slices.Contains(transitions(evs), "REACTIVE_COMPACT_RETRY") {
		t.Fatalf("transitions %v, want a REACTIVE_COMPACT_RETRY", transitions(evs))
	}
	r.drain()
	chat := endedOne(t, r, "chat sim-1")
	compact := r.ended("compact sim-1")
	if len(compact) != 1 {
		t.Fatalf("%d compaction spans, want 1", len(compact))
	}
	if compact[0].Parent().SpanID() != chat.SpanContext().SpanID() {
		t.Errorf("compaction span is not a child of the completion span")
	}
	if got := stringAttr(compact[0], "completiond.purpose"); got != "compaction" {
		t.Errorf("compaction span purpose %q", got)
	}
	if got := stringAttr(compact[0], "completiond.next"); got != "REACTIVE_COMPACT_RETRY" {
		t.Errorf("compaction span followed by %q, want REACTIVE_COMPACT_RETRY", got)
	}
	a1 := endedOne(t, r, "attempt 1 sim")
	if got := stringAttr(a1, "completiond.error.kind"); got != "prompt_too_long" {
		t.Errorf("attempt 1 error kind %q, want prompt_too_long", got)
	}
	if a1.EndTime().After(compact[0].StartTime()) {
		t.Errorf("attempt 1 ends at %v, after the compaction started at %v", a1.EndTime(), compact[0].StartTime())
	}
	if a3 := endedOne(t, r, "attempt 3 sim"); a3.Parent().SpanID() != chat.SpanContext().SpanID() {
		t.Errorf("the attempt after the compaction is not a child of the completion span")
	}
}

func stringAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// TestLogsCarryTraceIDsAndNoPrompt checks the RPC line and the transition
// lines: JSON, with the trace and span ids of the trace, and without the
// prompt's text. A rate limit then an answer logs the RETRY transition and
// the RPC's line, which reports the completion; the terminal COMPLETED
// Transition, which carries no failure, is at DEBUG, and the completion has
// no line of its own.
func TestLogsCarryTraceIDsAndNoPrompt(t *testing.T) {
	var buf testkit.SyncBuffer
	log := slog.New(telemetry.TraceLogHandler(slog.NewJSONHandler(&buf, nil)))
	r := newRecorded(t, func(c *Config) { c.Logger = log })
	const secret = "the secret prompt"
	evs := streamEvents(t.Context(), t, r.client, prompt(secret, map[string]string{sim.MetaFaults: "rate_limit"}))
	traceID := evs[0].GetStarted().GetTraceId()
	r.drain()
	lines := testkit.LogLines(t, buf.String())
	seen := map[string]int{}
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		if msg != "transition" && msg != "finished call" && msg != "completion finished" {
			continue
		}
		seen[msg]++
		if l["trace_id"] != traceID || l["span_id"] == nil {
			t.Errorf("%q line has trace_id %v span_id %v, want trace %s", msg, l["trace_id"], l["span_id"], traceID)
		}
		if msg == "finished call" && l["completion_id"] != evs[0].GetStarted().GetCompletionId() {
			t.Errorf("the RPC line reports completion %v, want %s", l["completion_id"], evs[0].GetStarted().GetCompletionId())
		}
	}
	if seen["transition"] != 1 || seen["finished call"] != 1 || seen["completion finished"] != 0 {
		t.Errorf("log lines %v, want 1 transition and 1 RPC line", seen)
	}
	if strings.Contains(buf.String(), "secret") {
		t.Errorf("the prompt leaked into the logs:\n%s", buf.String())
	}
}

// TestTracingOffLeavesNoTrace runs a server without telemetry: no trace id
// in Started, and no trace ids in the logs.
func TestTracingOffLeavesNoTrace(t *testing.T) {
	var buf testkit.SyncBuffer
	log := slog.New(telemetry.TraceLogHandler(slog.NewJSONHandler(&buf, nil)))
	env := newTestEnv(t, func(c *Config) { c.Logger = log })
	evs, st := env.streamAll(t, faults("rate_limit"))
	checkContract(t, evs, st)
	if id := evs[0].GetStarted().GetTraceId(); id != "" {
		t.Errorf("trace id %q with tracing off", id)
	}
	if strings.Contains(buf.String(), "trace_id") {
		t.Errorf("trace ids logged with tracing off:\n%s", buf.String())
	}
}

// TestCompletionSpanCarriesTheAnswer drives the observer through one
// answered attempt whose upstream reports a dated model, a response id and
// prompt-cache tokens: the chat span carries them, with the input tokens
// counting the cached ones as the GenAI conventions ask, and the token
// metric is labelled by the model that answered.
func TestCompletionSpanCarriesTheAnswer(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o := telemetry.NewObserver(slog.New(slog.DiscardHandler), telemetry.Telemetry{TracerProvider: tp, MeterProvider: mp}, nil)
	route := recovery.Route{Name: "claude", Provider: "anthropic", Model: "claude-x"}
	info := telemetry.Info{ID: "cmpl_test", First: route}
	c, _ := o.Start(t.Context(), info)
	s := c.AttemptStart(t.Context(), recovery.Call{Attempt: 1, Route: route}, false)
	s.Chunk()
	usage := recovery.Usage{InputTokens: 10, OutputTokens: 7, CacheReadInputTokens: 5, CacheCreationInputTokens: 3}
	s.End(recovery.Event{Kind: recovery.EvAttemptDone, Usage: usage}, provider.Finish{Model: "claude-x-20250101", ID: "msg_01"})
	c.Finish(&recovery.Result{Reason: recovery.Completed, StopReason: recovery.StopEndTurn, Route: route, Usage: usage,
		Attempts: []recovery.AttemptRecord{{Attempt: 1, Route: route, Outcome: recovery.OutcomeAnswered, Usage: usage}}})

	var chat sdktrace.ReadOnlySpan
	for _, sp := range spans.Ended() {
		if sp.Name() == "chat claude-x" {
			chat = sp
		}
	}
	if chat == nil {
		t.Fatal("no chat span")
	}
	for key, want := range map[string]string{
		"gen_ai.response.model":                    "claude-x-20250101",
		"gen_ai.response.id":                       "msg_01",
		"gen_ai.usage.input_tokens":                "18",
		"gen_ai.usage.output_tokens":               "7",
		"gen_ai.usage.cache_read.input_tokens":     "5",
		"gen_ai.usage.cache_creation.input_tokens": "3",
	} {
		if got := stringAttr(chat, key); got != want {
			t.Errorf("chat span %s = %q, want %q", key, got, want)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	const labels = "gen_ai.operation.name=chat,gen_ai.provider.name=anthropic,gen_ai.request.model=claude-x,gen_ai.response.model=claude-x-20250101"
	if n := histogramCounts(rm)["gen_ai.client.token.usage{"+labels+",gen_ai.token.type=input}"]; n != 1 {
		t.Errorf("input tokens recorded %d times under the answering model, want 1; have %v", n, keys(histogramCounts(rm)))
	}
}
