package service

import (
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testkit"
)

// refusalEnv is authEnv with a key rate of one completion per 10 s, a
// clock that moves only when told, a uniform draw that walks [0, 1), a
// JSON log and a metric reader.
func refusalEnv(t *testing.T) (*testEnv, *testkit.SyncBuffer, *sdkmetric.ManualReader, *atomic.Int64) {
	t.Helper()
	var log testkit.SyncBuffer
	var clock, draws atomic.Int64
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(t.Context()) })
	start := time.Now()
	e, _ := authEnv(t, func(c *Config) {
		c.Limits.KeyRate, c.Limits.KeyBurst = 0.1, 1
		c.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
		c.Rand = func() float64 { return float64(draws.Add(7)%20) / 20 }
		c.Logger = slog.New(slog.NewJSONHandler(&log, nil))
		c.Telemetry = telemetry.Telemetry{MeterProvider: mp}
	})
	return e, &log, reader, &clock
}

// TestRefusalsSpreadTheirRetryInfo: the callers a key's rate refuses are
// told to come back at different times, over a window that grows with how
// many wait — not all at the next token, when all but one would be refused
// again.
func TestRefusalsSpreadTheirRetryInfo(t *testing.T) {
	e, _, _, _ := refusalEnv(t)
	if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
		t.Fatal(err)
	}
	var delays []time.Duration
	for range 20 {
		err := complete(t.Context(), e, "ops-secret-key")
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("over the rate: %v", err)
		}
		delays = append(delays, retryDelay(err))
	}
	slices.Sort(delays)
	distinct := len(slices.Compact(slices.Clone(delays)))
	if spread := delays[len(delays)-1] - delays[0]; distinct < 10 || spread < 30*time.Second {
		t.Errorf("RetryInfo of 20 callers waiting for the same key: %d distinct, spread over %v; want 10 or more over 30 s or more: %v",
			distinct, spread, delays)
	}
}

// TestRefusalsAreCountedAndLoggedSampled: every refusal counts in
// completiond.refusals by reason and key, while the log says it once a
// second for each reason and key, with how many it left out — not a line
// per refused call.
func TestRefusalsAreCountedAndLoggedSampled(t *testing.T) {
	e, log, reader, clock := refusalEnv(t)
	if err := complete(t.Context(), e, "ops-secret-key"); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		_ = complete(t.Context(), e, "ops-secret-key")
	}
	for range 30 {
		_ = complete(t.Context(), e, "wrong-key")
	}
	clock.Add(int64(telemetry.RefusalLogEvery))
	_ = complete(t.Context(), e, "ops-secret-key")

	var refused, finishedRefusals []map[string]any
	for _, l := range testkit.LogLines(t, log.String()) {
		switch {
		case l["msg"] == "refused call":
			refused = append(refused, l)
		case l["msg"] == "finished call" && l["grpc.code"] != "OK":
			finishedRefusals = append(finishedRefusals, l)
		}
	}
	if len(finishedRefusals) != 0 {
		t.Errorf("%d refused calls logged a line of their own, want 0: %v", len(finishedRefusals), finishedRefusals)
	}
	var said []string
	for _, l := range refused {
		said = append(said, l["reason"].(string)+"/"+l["auth.key"].(string)+"/"+jsonInt(l["suppressed"]))
	}
	want := []string{"KEY_RATE/ops/0", "UNAUTHENTICATED//0", "KEY_RATE/ops/49"}
	if !slices.Equal(said, want) {
		t.Errorf("refusal lines (reason/key/suppressed) %v, want %v", said, want)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := counters(rm)
	for k, want := range map[string]int64{
		"completiond.refusals{completiond.auth.key=ops,completiond.refusal.reason=KEY_RATE}":     51,
		"completiond.refusals{completiond.auth.key=,completiond.refusal.reason=UNAUTHENTICATED}": 30,
	} {
		if sums[k] != want {
			t.Errorf("%s = %d, want %d; have %v", k, sums[k], want, keys(sums))
		}
	}
}

// jsonInt is a JSON number as an integer's text.
func jsonInt(v any) string {
	f, _ := v.(float64)
	return strconv.FormatFloat(f, 'f', -1, 64)
}
