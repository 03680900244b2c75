package config

import (
	"strings"
	"testing"
)

// TestAutoLimits: an auto in-flight cap is half of the memory left after
// ReservedMemory, divided by StreamBudget, at least MinAutoInFlight; the
// per-connection cap follows it at twice, or stays unbounded; numbers set
// by hand are kept.
func TestAutoLimits(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name              string
		inFlight, streams int
		mem               int64
		wantIn, wantConn  int
	}{
		{"512 MiB", Auto, Auto, 512 * mib, 768, 1536},
		{"1 GiB", Auto, Auto, 1024 * mib, 2816, 5632},
		{"4 GiB", Auto, Auto, 4096 * mib, 15104, 30208},
		{"less than the reserve", Auto, Auto, 256 * mib, MinAutoInFlight, 2 * MinAutoInFlight},
		{"a fixed in-flight cap", 100, Auto, 1024 * mib, 100, 200},
		{"no in-flight cap", 0, Auto, 1024 * mib, 0, 0},
		{"a fixed per-connection cap", Auto, 128, 1024 * mib, 2816, 128},
		{"neither auto", 512, 128, 1024 * mib, 512, 128},
	} {
		l := DefaultLimits()
		l.MaxInFlight, l.MaxConcurrentStreams = tc.inFlight, tc.streams
		r := l.Resolve(tc.mem)
		if r.MaxInFlight != tc.wantIn || r.MaxConcurrentStreams != tc.wantConn {
			t.Errorf("%s: in flight %d, per connection %d; want %d, %d", tc.name, r.MaxInFlight, r.MaxConcurrentStreams, tc.wantIn, tc.wantConn)
		}
	}
	d := DefaultLimits()
	if d.MaxInFlight != Auto || d.MaxConcurrentStreams != Auto || d.KeyMaxConcurrent != 0 || d.KeyRate != 0 {
		t.Errorf("defaults %+v: want auto in flight and per connection, no per-key caps", d)
	}
}

// TestAutoCounts: a limit that may be auto reads a count or auto, from a
// flag or the file, and anything else is an error naming the field.
func TestAutoCounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"auto", Auto, true}, {"0", 0, true}, {"512", 512, true}, {"-1", 0, false}, {"lots", 0, false}, {"", 0, false}} {
		n, err := ParseAutoCount(tc.in)
		if (err == nil) != tc.ok || n != tc.want {
			t.Errorf("ParseAutoCount(%q) = %d, %v", tc.in, n, err)
		}
		if tc.ok && FormatAutoCount(n) != tc.in {
			t.Errorf("FormatAutoCount(%d) = %q, want %q", n, FormatAutoCount(n), tc.in)
		}
	}
	cfg, err := LoadFile(writeConfig(t, "limits: {max_in_flight: 300, max_streams_per_connection: auto}\n"), Default(), func(string) string { return "" }, fakeFactories)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.MaxInFlight != 300 || cfg.Limits.MaxConcurrentStreams != Auto {
		t.Errorf("limits from the file: %+v", cfg.Limits)
	}
	for _, body := range []string{"limits: {max_in_flight: -1}", "limits: {max_streams_per_connection: many}", "limits: {max_in_flight: 1.5}"} {
		_, err := LoadFile(writeConfig(t, body), Default(), func(string) string { return "" }, fakeFactories)
		if err == nil || !strings.Contains(err.Error(), "limits.max_") {
			t.Errorf("%s: error %v, want one naming the field", body, err)
		}
	}
	c := Default()
	c.Limits.MaxInFlight = -2
	if err := c.Check(); err == nil {
		t.Error("Check accepted a negative in-flight cap other than Auto")
	}
}
