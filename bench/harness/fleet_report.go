package harness

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// FleetMetrics are the rows of the fleet benchmark's table, in order.
var FleetMetrics = []metric{
	Metrics[0], Metrics[1],
	{Name: "server CPU per 1 000 tokens, ms (fleet: its replicas together)", phase: streaming,
		value: func(m, _ *measurement) (float64, bool) { return perKTokens(m, ms(m.serverCPU)) }},
	{Name: "Redis CPU per 1 000 tokens, ms", phase: streaming,
		value: redisValue(func(s redisStats, _ map[string]float64) (float64, bool) { return ms(s.cpu), true })},
	{Name: "server and Redis CPU per 1 000 tokens, ms", phase: streaming,
		value: func(m, _ *measurement) (float64, bool) {
			cpu := m.serverCPU
			if m.redis != nil {
				cpu += m.redis.cpu
			}
			return perKTokens(m, ms(cpu))
		}},
	{Name: "Redis commands per 1 000 tokens, all it counted (sent and run by scripts)", phase: streaming,
		value: redisValue(func(s redisStats, _ map[string]float64) (float64, bool) { return float64(s.all()), true })},
	{Name: "Redis commands per 1 000 tokens sent by the replicas", phase: streaming,
		value: redisValue(func(s redisStats, share map[string]float64) (float64, bool) {
			in, ok := s.inScripts(share)
			return float64(s.all()) - in, ok
		})},
	{Name: "of which script calls (EVALSHA, EVAL)", phase: streaming,
		value: redisValue(func(s redisStats, _ map[string]float64) (float64, bool) { return float64(s.ofScripts()), true })},
	{Name: "Redis commands per 1 000 tokens run by scripts", phase: streaming,
		value: redisValue(func(s redisStats, share map[string]float64) (float64, bool) { return s.inScripts(share) })},
	{Name: "XADD per 1 000 tokens (events appended to the Redis log)", phase: streaming,
		value: redisValue(func(s redisStats, _ map[string]float64) (float64, bool) { return float64(s.calls["xadd"]), true })},
	{Name: "group commit wait per event p50, ms (the replicas' completiond_redis_commit_wait_seconds, interpolated within its buckets)", phase: streaming,
		value: commitWaitValue(func(h *histogram) float64 { return 1000 * h.quantile(0.5) })},
	{Name: "group commit wait per event p99, ms (likewise)", phase: streaming,
		value: commitWaitValue(func(h *histogram) float64 { return 1000 * h.quantile(0.99) })},
	{Name: "events that waited over 2 ms in the group commit, % (the design's bound; a bucket's)", phase: streaming,
		value: commitWaitValue(func(h *histogram) float64 { return 100 * h.over(0.002) })},
	{Name: "tokens delivered", phase: streaming,
		value:  func(m, _ *measurement) (float64, bool) { return float64(m.tokens), true },
		direct: func(d *measurement) (float64, bool) { return float64(d.tokens), true }},
	{Name: "failed streams", phase: streaming,
		value:  func(m, _ *measurement) (float64, bool) { return float64(m.errors), true },
		direct: func(d *measurement) (float64, bool) { return float64(d.errors), true }},
}

// perKTokens is v per 1 000 of m's tokens.
func perKTokens(m *measurement, v float64) (float64, bool) {
	return v * 1000 / float64(m.tokens), m.tokens > 0
}

// commitWaitValue is a row of what the fleet's replicas observed of
// their group commit's waits: f of the histogram, nothing for a
// measurement without Redis or without a wait observed.
func commitWaitValue(f func(h *histogram) float64) func(m, d *measurement) (float64, bool) {
	return func(m, _ *measurement) (float64, bool) {
		if m.commitWait.total() == 0 {
			return 0, false
		}
		v := f(m.commitWait)
		return v, !math.IsNaN(v)
	}
}

// redisValue is a row of what Redis counted, per 1 000 tokens: f of the
// counters and the level's script shares (nil without an attribution
// pass), nothing for a measurement without Redis.
func redisValue(f func(s redisStats, share map[string]float64) (float64, bool)) func(m, d *measurement) (float64, bool) {
	return func(m, _ *measurement) (float64, bool) {
		if m.redis == nil {
			return 0, false
		}
		v, ok := f(*m.redis, m.scriptShare)
		if !ok {
			return 0, false
		}
		return perKTokens(m, v)
	}
}

// fleetMarkdown renders the fleet benchmark's report.
func (r *Report) fleetMarkdown() string {
	var b strings.Builder
	r.fleetHeader(&b)
	r.table(&b, FleetMetrics, fmt.Sprintf("| streams | metric | direct | completiond alone | fleet of %d | fleet ÷ alone |", r.cfg.Fleet.Replicas))
	r.unsharedTable(&b)
	r.fleetNotes(&b)
	r.footer(&b)
	return b.String()
}

// unsharedMetrics are the rows of the second table (unsharedTable).
var unsharedMetrics = []metric{Metrics[0], Metrics[1], FleetMetrics[2]}

// unsharedTable compares the fleet with its replicas without Redis
// (target unshared), and those with completiond alone: what the fleet's
// numbers owe to running several processes on the machine, and what to
// sharing Redis.
func (r *Report) unsharedTable(b *strings.Builder) {
	if r.cfg.Fleet.SkipUnshared {
		return
	}
	n := r.cfg.Fleet.Replicas
	fmt.Fprintf(b, "\nThe same %d replicas without Redis (each keeps its completions in its memory), against completiond alone and against the fleet (ratios within each repetition):\n\n", n)
	fmt.Fprintf(b, "| streams | metric | completiond alone | %d replicas without Redis | fleet of %d | replicas ÷ alone | fleet ÷ replicas |\n", n, n)
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, level := range r.cfg.Levels {
		for _, mt := range unsharedMetrics {
			split := r.cellsOfPair(mt, level, completiond, unshared)
			shared := r.cellsOfPair(mt, level, unshared, fleetOf)
			fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s |\n", level, mt.Name, cell(split.base, ""), cell(split.other, ""),
				cell(shared.other, ""), cell(split.ratio, "×"), cell(shared.ratio, "×"))
		}
	}
}

func (r *Report) fleetHeader(b *strings.Builder) {
	c := r.cfg
	r.title(b, "fleet benchmark", "completiond alone and the fleet")
	b.WriteString(c.streamingLine())
	fmt.Fprintf(b, "- servers, each a fresh process per measurement, completiond built from this checkout on its shipped defaults at --log-level %s, serving Prometheus metrics on loopback (--metrics-addr, as the Helm chart's pods do): "+
		"*completiond alone*, one process without Redis; *the fleet*, %d completiond replicas with `redis.url`%s in their config file, sharing one redis-server (%s), "+
		"a fresh one per measurement on loopback (`--save '' --appendonly no`)%s; upstream: the mock (OpenAI wire) on loopback; direct: openai-go from the harness\n",
		c.LogLevel, c.Fleet.Replicas, c.commitDelayText(), r.redisVersion, c.unsharedText())
	fmt.Fprintf(b, "- requests: %s\n", c.graceText())
	fmt.Fprintf(b, "- clients: to completiond alone, one gRPC channel for all the streams; to the fleet (and its replicas without Redis), one channel per replica, stream i through replica i mod %d (spread evenly, as a round-robin balancer would)\n",
		c.Fleet.Replicas)
	b.WriteString("- cells: median of the repetitions (min–max); the ratio is taken within each repetition, over a positive value of completiond alone; " +
		"server CPU from /proc/<pid>/stat (the fleet: its replicas' summed), Redis's from INFO cpu (used_cpu_sys + used_cpu_user), its commands from INFO commandstats, " +
		"each a difference from before the first stream of a measurement to after its last one ended\n")
	r.machineLine(b)
}

// unsharedText says what the replicas without Redis are, when measured.
func (c Config) unsharedText() string {
	if c.Fleet.SkipUnshared {
		return ""
	}
	return fmt.Sprintf("; *replicas without Redis*, the same %d processes and channels as the fleet, each keeping its completions in its memory alone, "+
		"to tell what running %d processes on this machine costs from what sharing Redis costs (the second table)", c.Fleet.Replicas, c.Fleet.Replicas)
}

// commitDelayText names the replicas' redis.commit_delay when it is not
// the shipped default's.
func (c Config) commitDelayText() string {
	if c.Fleet.CommitDelay == 0 {
		return ""
	}
	return fmt.Sprintf(" and `redis.commit_delay: %s` (not the default: a longer group commit wait, fewer and larger writes to Redis)", c.Fleet.CommitDelay)
}

// graceText says what the requests ask for.
func (c Config) graceText() string {
	if c.Fleet.ResumeGrace <= 0 {
		return "no resume_grace: a Stream that ends with its caller, logged in Redis all the same, without a lease"
	}
	return fmt.Sprintf("every request has resume_grace %v: a resumable Stream, which a fleet replica runs under a lease "+
		"(acquired, renewed every third of --lease-ttl, 2 s by default; every append fenced by it) so that another can take it over, "+
		"as a fleet's callers ask (-resume-grace -1s: none)", c.Fleet.ResumeGrace)
}

// fleetNotes says what makes the events go to Redis, what the Redis
// counts count, and each command's calls.
func (r *Report) fleetNotes(b *strings.Builder) {
	b.WriteString("\nNotes:\n\n" +
		"- Every event goes to Redis because each replica has `redis.url`: with Redis, completiond logs every completion through fleet.PairLog, " +
		"in its memory and in Redis, resumable or not — until the Redis log is full (`--event-log-completions`, default 1 000 running completions over the whole Redis: " +
		"more are logged in memory only) or Redis fails. The XADD row checks it: one XADD per event, so at least 1 000 per 1 000 tokens (each token's delta, then the transitions and the result).\n")
	b.WriteString("- Redis counts every command a script runs in INFO commandstats and total_commands_processed as if a client had sent it " +
		"(TestRedisCountsScriptCalls checks it on the installed redis-server). *All it counted*: every command of the measurement, from the replicas' connections only " +
		"(the harness's own INFO and MONITOR left out) — script calls, direct commands (health PINGs, the shared breakers' GETs, Pub/Sub) and what the scripts ran. ")
	if r.cfg.Fleet.AttributeFor < 0 {
		b.WriteString("With no attribution pass (-attribute-for < 0), only the script calls (EVALSHA, EVAL) are known to be sent by the replicas.\n")
	} else {
		fmt.Fprintf(b, "*Run by scripts*: each command's calls times the share of its calls that scripts ran in the level's attribution pass — "+
			"the fleet again, under the same load for %v, unmeasured, with Redis's MONITOR on, which shows a script's commands as client `lua` —; *sent by the replicas*: the rest.\n",
			r.cfg.Fleet.AttributeFor)
	}
	for _, level := range r.cfg.Levels {
		if s := r.commandsText(level); s != "" {
			fmt.Fprintf(b, "- The fleet's commands per 1 000 tokens at %d streams (median of the repetitions): %s\n", level, s)
		}
	}
	r.missedEvents(b)
}

// commandsText lists the fleet's commands at level, the most called first,
// each per 1 000 tokens, with the share scripts ran.
func (r *Report) commandsText(level int) string {
	per := map[string][]float64{}
	var share map[string]float64
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		m := r.results[key{level, rep, fleetOf, streaming}]
		if m == nil || m.redis == nil || m.tokens == 0 {
			continue
		}
		share = m.scriptShare
		for name, n := range m.redis.calls {
			per[name] = append(per[name], float64(n)*1000/float64(m.tokens))
		}
	}
	names := slices.SortedFunc(maps.Keys(per), func(a, b string) int {
		return cmp.Or(cmp.Compare(spreadOf(per[b]).med, spreadOf(per[a]).med), strings.Compare(a, b))
	})
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("`%s` %s%s", name, num(spreadOf(per[name]).med), byScripts(share, name)))
	}
	return strings.Join(parts, " · ")
}

// byScripts says which share of name's calls scripts ran.
func byScripts(share map[string]float64, name string) string {
	switch s, ok := share[name]; {
	case share == nil:
		return ""
	case !ok:
		return " (not in the attribution pass: counted as sent)"
	case s == 0:
		return " (sent)"
	case s > 0.995:
		return " (by scripts)"
	default:
		return fmt.Sprintf(" (%.0f %% by scripts)", 100*s)
	}
}

// missedEvents warns of each fleet measurement with fewer XADD than
// tokens: events that did not reach Redis.
func (r *Report) missedEvents(b *strings.Builder) {
	for _, level := range r.cfg.Levels {
		for rep := 1; rep <= r.cfg.Reps; rep++ {
			m := r.results[key{level, rep, fleetOf, streaming}]
			if m != nil && m.redis != nil && m.redis.calls["xadd"] < m.tokens {
				fmt.Fprintf(b, "\n**WARNING**: level %d, rep %d: %d XADD for %d tokens: not every event reached Redis (completions logged in memory only: the Redis log full, or Redis failing).\n",
					level, rep, m.redis.calls["xadd"], m.tokens)
			}
		}
	}
}
