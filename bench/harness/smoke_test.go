package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the whole harness in a tiny configuration — the mock, the
// relay and a freshly built completiond as processes, 2 streams of 5-token
// answers, one repetition of each phase — and checks that the table has
// every row with sane numbers, and the second configuration (the streams
// spread over channels, here one each) with its table. It proves the tool
// works, not how fast anything is. Building completiond takes a while the first time (the
// build cache makes it seconds after).
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs completiond: not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress strings.Builder
	report, err := Run(ctx, Config{
		Levels: []int{2}, Reps: 1, Tokens: 5, TokenDelay: time.Millisecond, Spread: 1,
		StreamFor: 400 * time.Millisecond, MinAnswers: 100, ShortFor: 300 * time.Millisecond, IdleSettle: 100 * time.Millisecond,
		Quiet:    Quiet{Window: 100 * time.Millisecond, Timeout: -1},
		Progress: &progress,
	})
	md := checkTable(t, report, err, progress.String(), 2, Metrics, checkRow)
	wantIn(t, md, "go1.", "× ", "1 repetition(s)", "| streams | metric | direct | bare relay | completiond | completiond ÷ relay |",
		"| streams | channels | TTFT p50, ms | spread: channels |", "| 2 | 1 | ")
}

// checkTable checks a smoke run's report: no error and no failed call,
// and each metric's row at level, by check; it returns the markdown.
func checkTable(t *testing.T, report *Report, err error, progress string, level int, metrics []metric, check func(*testing.T, metric, []string)) string {
	t.Helper()
	if err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	md := report.Markdown()
	t.Log("\n" + md)
	if n := report.Errors(); n != 0 {
		t.Errorf("%d calls failed", n)
	}
	rows := tableRows(t, md, level)
	for _, mt := range metrics {
		row, ok := rows[mt.Name]
		if !ok {
			t.Errorf("no row %q", mt.Name)
			continue
		}
		check(t, mt, row)
	}
	return md
}

// tableRows are the first table's rows at level, by metric name: the
// cells after the name.
func tableRows(t *testing.T, md string, level int) map[string][]string {
	t.Helper()
	return rowsAt(md, level)
}

// rowsAt are the rows at level of the first table in md, by metric name:
// the cells after the name (a later table's row of the same name is left
// out).
func rowsAt(md string, level int) map[string][]string {
	rows := map[string][]string{}
	prefix := "| " + strconv.Itoa(level) + " | "
	for line := range strings.Lines(md) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			f := strings.Split(strings.TrimSuffix(rest, " |"), " | ")
			if _, seen := rows[f[0]]; !seen {
				rows[f[0]] = f[1:]
			}
		}
	}
	return rows
}

// checkRow checks the cells of one metric: a number for both servers and
// their ratio, one for the direct calls when the metric has it, and
// values in the range they must be in whatever the machine's load.
func checkRow(t *testing.T, mt metric, cells []string) {
	t.Helper()
	if len(cells) != 4 {
		t.Fatalf("%s: %d cells, want 4: %q", mt.Name, len(cells), cells)
	}
	direct, relay, completiond := cellValue(t, mt.Name, cells[0], mt.direct != nil || mt.pooled > 0),
		cellValue(t, mt.Name, cells[1], true), cellValue(t, mt.Name, cells[2], true)
	// A ratio is shown over a positive relay value only (an added TTFT
	// may be negative under the noise); it has the sign of completiond's,
	// unless it rounds to 0 (an added TTFT of 0.001 ms over the relay's
	// 2 ms shows as 0.000×).
	if r := cellValue(t, mt.Name, strings.TrimSuffix(cells[3], "×"), relay > 0); relay > 0 && r != 0 && (r > 0) != (completiond > 0) {
		t.Errorf("%s: ratio %v of %v over %v", mt.Name, r, completiond, relay)
	}
	switch {
	case strings.HasPrefix(mt.Name, "TTFT") && direct <= 0:
		t.Errorf("%s: the direct calls' TTFT is %v", mt.Name, direct)
	case strings.Contains(mt.Name, "CPU") && (relay <= 0 || completiond <= 0):
		t.Errorf("%s: relay %v, completiond %v: a server that relayed answers used no CPU", mt.Name, relay, completiond)
	case strings.HasPrefix(mt.Name, "short answers") && (direct <= 0 || relay <= 0 || completiond <= 0):
		t.Errorf("%s: direct %v, relay %v, completiond %v", mt.Name, direct, relay, completiond)
	case strings.HasPrefix(mt.Name, "goroutines") && (relay < 1 || completiond < 1):
		// Each held stream has at least its RPC's goroutine.
		t.Errorf("%s: relay %v, completiond %v, want at least 1", mt.Name, relay, completiond)
	}
}

// cellValue is the median a cell shows; a cell that should be empty must
// be "—".
func cellValue(t *testing.T, name, cell string, want bool) float64 {
	t.Helper()
	if !want {
		if cell != "—" {
			t.Errorf("%s: cell %q, want —", name, cell)
		}
		return 0
	}
	med, _, _ := strings.Cut(cell, " ")
	v, err := strconv.ParseFloat(med, 64)
	if err != nil {
		t.Errorf("%s: cell %q is not a number", name, cell)
	}
	return v
}

// TestSmokeProfiles runs the profiling step in a tiny configuration with
// -trace: each server's CPU profile (gzipped pprof) and runtime trace of
// the streaming load are written and named in the report.
func TestSmokeProfiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs completiond: not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var progress strings.Builder
	report, err := Run(ctx, Config{
		Levels: []int{2}, Reps: 1, Tokens: 5, TokenDelay: time.Millisecond, Phases: []string{"stream"},
		StreamFor: 200 * time.Millisecond, MinAnswers: -1, IdleSettle: 100 * time.Millisecond,
		ProfileDir: dir, ProfileFor: time.Second, Trace: true,
		Quiet:    Quiet{Window: 100 * time.Millisecond, Timeout: -1},
		Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	for _, name := range []string{"relay-stream-2.pprof", "completiond-stream-2.pprof", "relay-stream-2.trace", "completiond-stream-2.trace"} {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		magic := "\x1f\x8b" // gzip: a pprof profile
		if strings.HasSuffix(name, ".trace") {
			magic = "go 1." // the execution trace's header
		}
		if !strings.HasPrefix(string(b), magic) {
			t.Errorf("%s starts %q, want %q", name, b[:min(len(b), 8)], magic)
		}
		if !slices.Contains(report.Profiles, path) {
			t.Errorf("the report does not name %s: %v", path, report.Profiles)
		}
	}
}
