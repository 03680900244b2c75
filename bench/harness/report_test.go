package harness

import (
	"strings"
	"testing"
	"time"
)

// TestPercentileAndSpread: nearest-rank percentiles; the median of an even
// number of values is the mean of the middle two.
func TestPercentileAndSpread(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(100-i) * time.Millisecond
	}
	if p50, p99, p100 := percentile(d, 50), percentile(d, 99), percentile(d, 100); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond || p100 != 100*time.Millisecond {
		t.Errorf("p50 %v p99 %v p100 %v", p50, p99, p100)
	}
	if p := percentile([]time.Duration{7}, 99); p != 7 {
		t.Errorf("p99 of one sample = %v", p)
	}
	if s := spreadOf([]float64{4, 1, 3, 2}); s != (spread{med: 2.5, lo: 1, hi: 4, ok: true}) {
		t.Errorf("spread %+v", s)
	}
}

// TestTableRatiosWithinRepetitions: each cell is the median of the
// repetitions with their range, and the ratio is the median of the ratios
// taken within each repetition, not the ratio of the medians.
func TestTableRatiosWithinRepetitions(t *testing.T) {
	cfg, err := Config{Levels: []int{10}, Reps: 3, Self: []string{"x"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg)
	for rep, cpu := range [][2]time.Duration{{100, 120}, {200, 220}, {50, 80}} {
		ttfts := []time.Duration{time.Millisecond, 2 * time.Millisecond}
		// The pooled p99 is the slowest of the six first tokens of each
		// target: the third repetition's 10 ms for completiond.
		slowest := 4 * time.Millisecond
		if rep == 2 {
			slowest = 10 * time.Millisecond
		}
		r.add(key{10, rep + 1, direct, streaming}, &measurement{load: load{calls: 2, tokens: 40, ttfts: ttfts}, ttftP50: time.Millisecond, ttftP99: 2 * time.Millisecond})
		r.add(key{10, rep + 1, bareRelay, streaming}, &measurement{load: load{calls: 2, tokens: 1000, ttfts: []time.Duration{time.Millisecond, 3 * time.Millisecond}},
			serverCPU: cpu[0] * time.Millisecond, ttftP50: 1500 * time.Microsecond, ttftP99: 3 * time.Millisecond})
		r.add(key{10, rep + 1, completiond, streaming}, &measurement{load: load{calls: 2, tokens: 1000, ttfts: []time.Duration{2 * time.Millisecond, slowest}},
			serverCPU: cpu[1] * time.Millisecond, ttftP50: 2 * time.Millisecond, ttftP99: 4 * time.Millisecond})
	}
	md := r.Markdown()
	wantIn(t, md,
		"| 10 | server CPU per 1 000 tokens, ms | — | 100 (50.0–200) | 120 (80.0–220) | 1.20× (1.10–1.60) |",
		"| 10 | TTFT p50 added, ms (direct: absolute) | 1.00 | 0.500 | 1.00 | 2.00× |",
		"| 10 | TTFT p99 added, ms (direct: absolute) | 2.00 | 1.00 | 2.00 | 2.00× |",
		"| 10 | TTFT p99 added, ms, all repetitions pooled (direct: absolute) | 2.00 | 1.00 | 8.00 | 8.00× |",
		"| 10 | RSS per idle stream, KiB | — | — | — | — |",
	)
}

// TestStreamPacing: the streaming phase's tokens are paced so that all
// streams together send TokenRate tokens per second, unless a delay is
// given.
func TestStreamPacing(t *testing.T) {
	c := Defaults()
	if d := c.streamSpec(1000).TokenDelay; d != 400*time.Millisecond {
		t.Errorf("1000 streams at 2500 tokens/s: %v between tokens, want 400ms", d)
	}
	if sp := c.streamSpec(1000); sp.Tokens != 50 {
		t.Errorf("1000 streams: %d tokens, want all 50 (19.6 s)", sp.Tokens)
	}
	// 50 tokens 2 s apart would last 98 s: as many as fit in 20 s.
	if sp := c.streamSpec(5000); sp.TokenDelay != 2*time.Second || sp.Tokens != 11 {
		t.Errorf("5000 streams: %d tokens %v apart, want 11 tokens 2s apart", sp.Tokens, sp.TokenDelay)
	}
	c.TokenDelay = time.Millisecond
	if d := c.streamSpec(1000).TokenDelay; d != time.Millisecond {
		t.Errorf("a given delay: %v", d)
	}
}

// TestSpreadConfiguration: the second configuration (streams spread over
// channels) is measured in the streaming phase only, at the levels where
// it differs from the clients' own channels; its table gives absolute
// times to first token and their ratio within each repetition.
func TestSpreadConfiguration(t *testing.T) {
	c := Defaults()
	for _, tc := range []struct {
		level, perChannel, spread int
		ph                        phase
		want                      bool
	}{
		{1000, 0, 100, streaming, true},
		{5000, 0, 100, streaming, true},
		{100, 0, 100, streaming, false}, // one channel either way
		{1000, 0, 100, idle, false},
		{1000, 0, -1, streaming, false},
		{1000, 100, 100, streaming, false},
		{1000, 500, 100, streaming, true},
	} {
		c.StreamsPerChannel, c.Spread = tc.perChannel, tc.spread
		if got := c.spreads(tc.level, tc.ph); got != tc.want {
			t.Errorf("%d streams, %d per channel, spread %d, %s: spreads = %v", tc.level, tc.perChannel, tc.spread, tc.ph, got)
		}
	}
	cfg, err := Config{Levels: []int{5000}, Reps: 2, Self: []string{"x"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg)
	for rep, ms := range [][2]time.Duration{{1, 2}, {3, 2}} {
		m := func(p50 time.Duration) *measurement {
			return &measurement{load: load{calls: 1}, ttftP50: p50 * time.Millisecond, ttftP99: 10 * p50 * time.Millisecond}
		}
		r.add(key{5000, rep + 1, completiond, streaming}, m(ms[0]))
		r.add(key{5000, rep + 1, spreadOut, streaming}, m(ms[1]))
	}
	md := r.Markdown()
	wantIn(t, md,
		"| 5000 | 1 | 2.00 (1.00–3.00) | 50 | 2.00 | 1.00× (0.500–1.50) | 20.0 (10.0–30.0) | 20.0 | 1.00× (0.500–1.50) |",
		"a second configuration, completiond with a gRPC channel (client connection) per 100 streams, in the streaming phase at 5000 streams",
		"one gRPC channel (client connection) for all the streams of a level, as a caller with a gRPC library's defaults has",
	)
}

// TestLoadSpan: a load begins calls until its end, and after it only while
// fewer than its minimum have begun and its limit has not come.
func TestLoadSpan(t *testing.T) {
	t0 := time.Unix(0, 0)
	span := loadSpan{until: t0.Add(10 * time.Second), minCalls: 500, limit: t0.Add(40 * time.Second)}
	for _, tc := range []struct {
		name  string
		at    time.Duration
		begun int64
		want  bool
	}{
		{"before the end, the minimum reached", 9 * time.Second, 900, true},
		{"after the end, short of the minimum", 20 * time.Second, 160, true},
		{"after the end, the minimum reached", 20 * time.Second, 500, false},
		{"at the limit, short of the minimum", 40 * time.Second, 160, false},
	} {
		if got := span.goesOn(t0.Add(tc.at), tc.begun); got != tc.want {
			t.Errorf("%s: goesOn = %v, want %v", tc.name, got, tc.want)
		}
	}
	if (loadSpan{until: t0}).goesOn(t0.Add(time.Second), 0) {
		t.Error("a load without a minimum went on after its end")
	}
}

// TestRatioOverAPositiveRelay: a ratio needs the relay's value positive;
// completiond's may be anything, and a negative one (under the direct
// calls') is kept, not dropped.
func TestRatioOverAPositiveRelay(t *testing.T) {
	for _, tc := range []struct {
		name         string
		relay, compl float64
		measured     bool
		want         float64
		wantOK       bool
	}{
		{"both positive", 2, 1, true, 0.5, true},
		{"completiond under the calibration", 2, -1, true, -0.5, true},
		{"completiond at the calibration", 2, 0, true, 0, true},
		{"the relay under the calibration", -1, 1, true, 0, false},
		{"the relay at the calibration", 0, 1, true, 0, false},
		{"not measured", 2, 1, false, 0, false},
	} {
		if got, ok := ratio(tc.relay, tc.compl, tc.measured); got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: ratio(%v, %v) = %v, %v; want %v, %v", tc.name, tc.relay, tc.compl, got, ok, tc.want, tc.wantOK)
		}
	}
}

// wantIn checks that the report md says each of want.
func wantIn(t *testing.T, md string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(md, w) {
			t.Errorf("the report does not say\n%s\n%s", w, md)
		}
	}
}
