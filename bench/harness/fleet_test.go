package harness

import (
	"context"
	"maps"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/internal/redistest"
)

// redisServer is the redis-server internal/redistest runs, installed with
// make redis-installed (Debian's package, with apt-get as root, as make
// test does) when it is missing: the test skips only when it can be
// neither found nor installed.
func redisServer(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath(redistest.Binary); err == nil {
		return path
	}
	root, err := moduleRoot(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-C", root, "redis-installed").CombinedOutput()
	if err != nil {
		t.Skipf("%s is not installed and make redis-installed could not install it: %v\n%s", redistest.Binary, err, out)
	}
	path, err := exec.LookPath(redistest.Binary)
	if err != nil {
		t.Skipf("make redis-installed ran, but %s is still not found: %v", redistest.Binary, err)
	}
	return path
}

// TestFleetSmoke runs the fleet benchmark in a tiny configuration — the
// mock, completiond alone, and three replicas sharing a fresh
// redis-server, 3 streams of 5-token answers, one repetition and a short
// attribution pass — and checks that the table has every row, that
// completiond alone has no Redis numbers and the fleet all of them, and
// that every event reached Redis. It proves the tool works, not how fast
// anything is.
func TestFleetSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs completiond and redis-server: not in -short")
	}
	redis := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress strings.Builder
	report, err := RunFleet(ctx, Config{
		Levels: []int{3}, Reps: 1, Tokens: 5, TokenDelay: time.Millisecond,
		StreamFor: 300 * time.Millisecond, MinAnswers: 30,
		Quiet:    Quiet{Window: 100 * time.Millisecond, Timeout: -1},
		Progress: &progress,
		Fleet:    Fleet{RedisServer: redis, AttributeFor: 200 * time.Millisecond},
	})
	md := checkTable(t, report, err, progress.String(), 3, FleetMetrics, checkFleetRow)
	wantIn(t, md, "| streams | metric | direct | completiond alone | fleet of 3 | fleet ÷ alone |",
		"resume_grace 1m0s", "Redis server v=", "`evalsha` ", "`xadd` ", " (by scripts)", "1 repetition(s)")
	if strings.Contains(md, "not every event reached Redis") {
		t.Error("the fleet logged some events in memory only")
	}
	head := "| streams | metric | completiond alone | 3 replicas without Redis | fleet of 3 | replicas ÷ alone | fleet ÷ replicas |"
	wantIn(t, md, head, "*replicas without Redis*")
	_, second, _ := strings.Cut(md, head)
	rows := rowsAt(second, 3)
	for _, mt := range unsharedMetrics {
		cells, ok := rows[mt.Name]
		if !ok || len(cells) != 5 {
			t.Errorf("the replicas' table: row %q is %q, want 5 cells", mt.Name, cells)
			continue
		}
		for i, c := range cells[:3] { // each target measured
			cellValue(t, mt.Name, c, true)
			if strings.HasPrefix(mt.Name, "server CPU") && cellValue(t, mt.Name, c, true) <= 0 {
				t.Errorf("%s: column %d is %s", mt.Name, i+1, c)
			}
		}
	}
}

// checkFleetRow checks the cells of one row: a number for the fleet and,
// outside the Redis rows, for completiond alone; none for the Redis rows
// of completiond alone, which has no Redis.
func checkFleetRow(t *testing.T, mt metric, cells []string) {
	t.Helper()
	if len(cells) != 4 {
		t.Fatalf("%s: %d cells, want 4: %q", mt.Name, len(cells), cells)
	}
	ofRedis := strings.Contains(mt.Name, "Redis") && !strings.Contains(mt.Name, "server and Redis") ||
		strings.HasPrefix(mt.Name, "of which") || strings.HasPrefix(mt.Name, "XADD") || strings.Contains(mt.Name, "group commit")
	cellValue(t, mt.Name, cells[0], mt.direct != nil)
	alone := cellValue(t, mt.Name, cells[1], !ofRedis)
	fleet := cellValue(t, mt.Name, cells[2], true)
	switch {
	case strings.HasPrefix(mt.Name, "XADD") && fleet < 1000:
		t.Errorf("%s: %v, want at least 1 000 (an XADD per event)", mt.Name, fleet)
	case strings.HasPrefix(mt.Name, "failed") && (alone != 0 || fleet != 0):
		t.Errorf("%s: alone %v, fleet %v", mt.Name, alone, fleet)
	case strings.HasPrefix(mt.Name, "events that waited") && (fleet < 0 || fleet > 100):
		t.Errorf("%s: %v, want a share", mt.Name, fleet)
	case !strings.HasPrefix(mt.Name, "TTFT") && !strings.HasPrefix(mt.Name, "failed") && !strings.HasPrefix(mt.Name, "events that waited") && fleet <= 0:
		t.Errorf("%s: the fleet's is %v", mt.Name, fleet)
	}
}

// TestRedisCountsScriptCalls is the experiment the fleet report's Redis
// counts rest on, on the installed redis-server: INFO commandstats (and
// total_commands_processed) count each command a script runs as if a
// client had sent it, beside the EVALSHA that ran it; MONITOR shows those
// as client lua, which tells them apart (scriptShares).
func TestRedisCountsScriptCalls(t *testing.T) {
	redisServer(t)
	addr := redistest.Start(t)
	ctx := context.Background()
	c, err := dialRedis(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	sha, err := c.do(`SCRIPT LOAD "redis.call('SET', KEYS[1], 'v'); return redis.call('GET', KEYS[1])"`)
	if err != nil {
		t.Fatal(err)
	}
	mon, err := startMonitor(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.close()
	total0 := totalCommands(t, c)
	before, err := readRedisStats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"EVALSHA " + sha + " 1 k", "EVALSHA " + sha + " 1 k", "GET k"} {
		if _, err := c.do(cmd); err != nil {
			t.Fatal(err)
		}
	}
	after, err := readRedisStats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	d := after.sub(before)
	if want := map[string]int64{"evalsha": 2, "set": 2, "get": 3}; !maps.Equal(d.calls, want) {
		t.Errorf("commandstats counted %v, want %v: the SET and GET the scripts ran counted as sent", d.calls, want)
	}
	// total_commands_processed: the first INFO stats (counted once it
	// answered), the two INFO of each snapshot, the 3 commands sent and
	// the 4 the scripts ran.
	if total := totalCommands(t, c) - total0; total != 1+2+3+4+2 {
		t.Errorf("total_commands_processed rose by %d, want 12: the scripts' commands counted", total)
	}
	lua, err := mon.wait()
	if err != nil {
		t.Fatal(err)
	}
	share := scriptShares(d.calls, lua)
	if share["set"] != 1 || share["get"] != 2.0/3 || share["evalsha"] != 0 {
		t.Errorf("MONITOR's lua lines %v give the shares %v, want set 1, get 2/3, evalsha 0", lua, share)
	}
}

// totalCommands is Redis's total_commands_processed.
func totalCommands(t *testing.T, c *redisConn) int64 {
	t.Helper()
	info, err := c.do("INFO stats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO stats has no total_commands_processed:\n%s", info)
	return 0
}

// TestFleetTable: the Redis rows are per 1 000 tokens, the commands split
// by the attribution pass's shares (sent = all − run by scripts), nothing
// for completiond alone, which has no Redis; the ratios are the fleet's
// over completiond alone's within each repetition.
func TestFleetTable(t *testing.T) {
	cfg, err := Config{Levels: []int{10}, Reps: 2, Self: []string{"x"}, fleet: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg)
	share := map[string]float64{"xadd": 1, "get": 0.5, "evalsha": 0}
	for rep, cpu := range []time.Duration{100, 300} {
		r.add(key{10, rep + 1, direct, streaming}, &measurement{load: load{calls: 2, tokens: 2000}})
		r.add(key{10, rep + 1, completiond, streaming}, &measurement{load: load{calls: 2, tokens: 2000}, serverCPU: cpu * time.Millisecond})
		r.add(key{10, rep + 1, unshared, streaming}, &measurement{load: load{calls: 2, tokens: 2000}, serverCPU: 3 * cpu / 2 * time.Millisecond})
		r.add(key{10, rep + 1, fleetOf, streaming}, &measurement{load: load{calls: 2, tokens: 2000}, serverCPU: 2 * cpu * time.Millisecond,
			redis:       &redisStats{cpu: cpu * time.Millisecond, calls: map[string]int64{"evalsha": 2000, "xadd": 2000, "get": 1000, "ping": 10}},
			scriptShare: share,
			// 100 waits: 50 up to 1 ms, 30 up to 2 ms, 10 up to 2.5 ms, 10 up to 5 ms.
			commitWait: &histogram{bounds: []float64{0.001, 0.002, 0.0025, 0.005, math.Inf(1)}, counts: []uint64{50, 80, 90, 100, 100}}})
	}
	md := r.Markdown()
	wantIn(t, md,
		"| 10 | server CPU per 1 000 tokens, ms (fleet: its replicas together) | — | 100 (50.0–150) | 200 (100–300) | 2.00× |",
		"| 10 | Redis CPU per 1 000 tokens, ms | — | — | 100 (50.0–150) | — |",
		"| 10 | server and Redis CPU per 1 000 tokens, ms | — | 100 (50.0–150) | 300 (150–450) | 3.00× |",
		"| 10 | Redis commands per 1 000 tokens, all it counted (sent and run by scripts) | — | — | 2505 | — |",
		"| 10 | Redis commands per 1 000 tokens sent by the replicas | — | — | 1255 | — |",
		"| 10 | of which script calls (EVALSHA, EVAL) | — | — | 1000 | — |",
		"| 10 | Redis commands per 1 000 tokens run by scripts | — | — | 1250 | — |",
		"| 10 | XADD per 1 000 tokens (events appended to the Redis log) | — | — | 1000 | — |",
		"| 10 | failed streams | 0 | 0 | 0 | — |",
		"| 10 | group commit wait per event p50, ms (the replicas' completiond_redis_commit_wait_seconds, interpolated within its buckets) | — | — | 1.00 | — |",
		"| 10 | group commit wait per event p99, ms (likewise) | — | — | 4.75 | — |",
		"| 10 | events that waited over 2 ms in the group commit, % (the design's bound; a bucket's) | — | — | 20.0 | — |",
		"`evalsha` 1000 (sent) · `xadd` 1000 (by scripts) · `get` 500 (50 % by scripts) · `ping` 5.00 (not in the attribution pass: counted as sent)",
		"| streams | metric | completiond alone | 3 replicas without Redis | fleet of 3 | replicas ÷ alone | fleet ÷ replicas |",
		"| 10 | server CPU per 1 000 tokens, ms (fleet: its replicas together) | 100 (50.0–150) | 150 (75.0–225) | 200 (100–300) | 1.50× | 1.33× |",
	)
	if strings.Contains(md, "not every event reached Redis") {
		t.Errorf("a warning of missed events with an XADD per token:\n%s", md)
	}
}
