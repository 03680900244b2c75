package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/completiond/completiond/internal/telemetry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// otelSDK is the OpenTelemetry SDK as the environment configures it:
// what the service records into, the gRPC option that traces and measures
// each RPC, and the shutdown that flushes it all.
type otelSDK struct {
	telemetry.Telemetry
	// grpcOptions holds the otelgrpc stats handler, when anything is on.
	grpcOptions []grpc.ServerOption
	closers     []func(context.Context) error
}

// setupTelemetry reads the standard OTEL_* variables and the metrics address.
// Everything is off by default, and then nothing is installed at all: no
// stats handler, no-op tracer and meter.
//
// Traces are exported when OTEL_TRACES_EXPORTER names an exporter other than
// "none", or when an OTLP endpoint is set. Metrics are served for Prometheus
// on metricsAddr (path /metrics) when it is set, and exported as
// OTEL_METRICS_EXPORTER says. OTEL_SDK_DISABLED=true turns both off.
func setupTelemetry(ctx context.Context, metricsAddr string, getenv func(string) string, log *slog.Logger) (*otelSDK, error) {
	t := &otelSDK{}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return t, nil
	}
	res, err := newResource(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.setupTraces(ctx, res, getenv, log); err != nil {
		return nil, err
	}
	if err := t.setupMetrics(ctx, res, metricsAddr, getenv, log); err != nil {
		return nil, errors.Join(err, t.shutdown(ctx))
	}
	if t.TracerProvider != nil || t.MeterProvider != nil {
		t.grpcOptions = append(t.grpcOptions, grpc.StatsHandler(t.statsHandler()))
		// Export failures (a collector down) go to the JSON log, not stderr.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "error", err.Error()) }))
	}
	return t, nil
}

// newResource describes this process, on every span and metric:
// service.name (default completiond), service.version (the build's), and
// service.instance.id, a random UUID (version 4) per process as the
// semantic conventions recommend, so that the replicas of one deployment
// are told apart and a restart is a new instance. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override any of them (e.g. the pod's name as the
// instance id).
func newResource(ctx context.Context) (*resource.Resource, error) {
	return resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "completiond"),
			attribute.String("service.version", readBuildInfo().version),
			attribute.String("service.instance.id", uuid.NewString())),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
}

// statsHandler is otelgrpc's server handler: the RPC span, continuing the
// W3C trace context of the caller's metadata, and the rpc.server metrics.
// Health checks and reflection are left out: probes would flood the traces.
func (t *otelSDK) statsHandler() stats.Handler {
	opts := []otelgrpc.Option{
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.") && !strings.HasPrefix(info.FullMethodName, "/grpc.reflection.")
		}),
	}
	if t.TracerProvider != nil {
		opts = append(opts, otelgrpc.WithTracerProvider(t.TracerProvider))
	} else {
		opts = append(opts, otelgrpc.WithTracerProvider(tracenoop.NewTracerProvider()))
	}
	if t.MeterProvider != nil {
		opts = append(opts, otelgrpc.WithMeterProvider(t.MeterProvider))
	} else {
		opts = append(opts, otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	return otelgrpc.NewServerHandler(opts...)
}

// tracesOn reports whether the environment asks for trace export.
func tracesOn(getenv func(string) string) bool {
	if name := getenv("OTEL_TRACES_EXPORTER"); name != "" {
		return name != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func (t *otelSDK) setupTraces(ctx context.Context, res *resource.Resource, getenv func(string) string, log *slog.Logger) error {
	if !tracesOn(getenv) {
		return nil
	}
	exp, err := spanExporter(ctx, getenv)
	if err != nil {
		return fmt.Errorf("trace exporter: %w", err)
	}
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_BSP_* itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.TracerProvider = tp
	t.closers = append(t.closers, tp.Shutdown)
	log.Info("tracing on", "exporter", exporterName(getenv, "TRACES"), "protocol", otlpProtocol(getenv, "TRACES"),
		"endpoint", firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
	return nil
}

// spanExporter builds OTLP itself and leaves the other exporter names
// (console, none, and any registered) to autoexport. OTLP is built here
// because completiond's default protocol is grpc, not the specification's
// http/protobuf: the port everybody starts Jaeger with, and that the design
// documents, is 4317.
func spanExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if exporterName(getenv, "TRACES") != "otlp" {
		return autoexport.NewSpanExporter(ctx)
	}
	switch p := otlpProtocol(getenv, "TRACES"); p {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "http/protobuf":
		return otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("unsupported OTLP protocol %q (want grpc or http/protobuf)", p)
	}
}

// exporterName is OTEL_{signal}_EXPORTER, otlp when unset.
func exporterName(getenv func(string) string, signal string) string {
	if name := getenv("OTEL_" + signal + "_EXPORTER"); name != "" {
		return name
	}
	return "otlp"
}

// otlpProtocol is the signal's OTLP protocol, grpc when unset.
func otlpProtocol(getenv func(string) string, signal string) string {
	if p := firstSet(getenv, "OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return p
	}
	return "grpc"
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func (t *otelSDK) setupMetrics(ctx context.Context, res *resource.Resource, addr string, getenv func(string) string, log *slog.Logger) error {
	var readers []sdkmetric.Reader
	if addr != "" {
		r, err := t.servePrometheus(addr, log)
		if err != nil {
			return err
		}
		readers = append(readers, r)
	}
	if name := getenv("OTEL_METRICS_EXPORTER"); name != "" && name != "none" {
		r, err := metricReader(ctx, name, getenv)
		if err != nil {
			return fmt.Errorf("metric exporter: %w", err)
		}
		readers = append(readers, r)
		log.Info("metrics export on", "exporter", name)
	}
	if len(readers) == 0 {
		return nil
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	for _, r := range readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	observeBuildInfo(mp, readBuildInfo())
	t.MeterProvider = mp
	// The provider shuts its readers down; the HTTP server closes later.
	t.closers = append([]func(context.Context) error{mp.Shutdown}, t.closers...)
	return nil
}

// observeBuildInfo registers completiond.build_info, the constant 1 with the
// build's version, commit and Go version as attributes: in Prometheus
// completiond_build_info{commit,goversion,version} 1, to join on or to see
// which build each instance runs.
func observeBuildInfo(mp metric.MeterProvider, b buildInfo) {
	attrs := metric.WithAttributes(attribute.String("version", b.version), attribute.String("commit", b.commit),
		attribute.String("goversion", b.goVersion))
	_, _ = mp.Meter("github.com/completiond/completiond/cmd/completiond").Int64ObservableGauge("completiond.build_info",
		metric.WithDescription("The build of this process: always 1, with its version, commit and Go version."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
}

// newPrometheus is the Prometheus side of the meter provider: an exporter
// on a registry of its own, with the Go runtime and process collectors
// (go_*, process_*) beside it, and the handler that serves it. The
// otel_scope_* labels are left out: every metric name is already unique,
// and they would make each series longer and completiond_build_info more
// than one label set. The handler speaks OpenMetrics when asked to
// (Accept: application/openmetrics-text), the format that carries
// exemplars: the histograms then link a bucket to a trace that fell in it.
func newPrometheus() (*promexporter.Exporter, http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	exp, err := promexporter.New(promexporter.WithRegisterer(reg), promexporter.WithoutScopeInfo())
	if err != nil {
		return nil, nil, err
	}
	return exp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}), nil
}

// servePrometheus serves a Prometheus scrape endpoint at addr/metrics (see
// newPrometheus).
func (t *otelSDK) servePrometheus(addr string, log *slog.Logger) (sdkmetric.Reader, error) {
	exp, handler, err := newPrometheus()
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.closers = append(t.closers, srv.Shutdown)
	log.Info("serving metrics", "addr", lis.Addr().String(), "path", "/metrics")
	return exp, nil
}

// metricReader builds the OTEL_METRICS_EXPORTER reader; OTLP as for spans.
func metricReader(ctx context.Context, name string, getenv func(string) string) (sdkmetric.Reader, error) {
	if name != "otlp" {
		return autoexport.NewMetricReader(ctx)
	}
	var exp sdkmetric.Exporter
	var err error
	switch p := otlpProtocol(getenv, "METRICS"); p {
	case "grpc":
		exp, err = otlpmetricgrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlpmetrichttp.New(ctx)
	default:
		err = fmt.Errorf("unsupported OTLP protocol %q (want grpc or http/protobuf)", p)
	}
	if err != nil {
		return nil, err
	}
	return sdkmetric.NewPeriodicReader(exp), nil
}

// shutdown flushes and stops everything, in order: spans and metrics are
// exported before the metrics endpoint closes.
func (t *otelSDK) shutdown(ctx context.Context) error {
	var errs []error
	for _, c := range t.closers {
		errs = append(errs, c(ctx))
	}
	t.closers = nil
	return errors.Join(errs...)
}

// close flushes the telemetry on exit, within a bounded time: an unreachable
// collector must not hold the process up.
func (t *otelSDK) close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.shutdown(ctx); err != nil {
		log.Warn("telemetry shutdown", "error", err.Error())
	}
}
