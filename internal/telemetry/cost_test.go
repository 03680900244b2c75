package telemetry

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestCostCounterPrometheusName checks the name the cost counter is
// scraped under, as the binary's exporter writes it (docs/observability.md
// names it): an OTel unit such as USD would be appended to it.
func TestCostCounterPrometheusName(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := promexporter.New(promexporter.WithRegisterer(reg), promexporter.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(t.Context()) }()
	in := newInstruments(mp, nil)
	in.cost.Add(t.Context(), 0.25, metric.WithAttributes(keyAuthKey.String(""), keyRoute.String("claude"), keyRequestModel.String("m")))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if !slices.Contains(names, "completiond_cost_usd_total") {
		t.Errorf("no completiond_cost_usd_total among %v", names)
	}
}
