package harness

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is what a run measured; Markdown renders it.
type Report struct {
	cfg        Config
	Start, End time.Time
	results    map[key]*measurement
	quiet      []quietCheck
	// Profiles are the CPU profiles written (Config.ProfileDir).
	Profiles []string
	// redisVersion is the fleet's redis-server (RunFleet).
	redisVersion string
	// attributions are the fleet's attribution passes, by level.
	attributions map[int]*attribution
}

func newReport(cfg Config) *Report {
	return &Report{cfg: cfg, Start: time.Now(), results: map[key]*measurement{}, attributions: map[int]*attribution{}}
}

// pair is the two targets the table compares: the relay and completiond,
// or completiond alone and the fleet (RunFleet); the ratio is the second's
// over the first's.
func (r *Report) pair() (base, other target) {
	if r.cfg.fleet {
		return completiond, fleetOf
	}
	return bareRelay, completiond
}

func (r *Report) add(k key, m *measurement) { r.results[k] = m }

// metric is one row of the table at each level.
type metric struct {
	// Name is the row's label.
	Name  string
	phase phase
	// value is a server's measurement m in one repetition, beside the
	// direct calls' d of the same repetition and phase (nil in the idle
	// phase); ok is false when there is nothing to say.
	value func(m, d *measurement) (v float64, ok bool)
	// direct is what the direct column shows (nil: nothing).
	direct func(d *measurement) (v float64, ok bool)
	// pooled, when set, makes the row one value per column instead: the
	// percentile pooled of the first tokens of all the repetitions.
	pooled float64
}

// Metrics are the rows of the table, in order.
var Metrics = []metric{
	{Name: "TTFT p50 added, ms (direct: absolute)", phase: streaming,
		value:  func(m, d *measurement) (float64, bool) { return added(m, d, 50) },
		direct: func(d *measurement) (float64, bool) { return ms(d.ttftP50), d.ok() }},
	{Name: "TTFT p99 added, ms (direct: absolute)", phase: streaming,
		value:  func(m, d *measurement) (float64, bool) { return added(m, d, 99) },
		direct: func(d *measurement) (float64, bool) { return ms(d.ttftP99), d.ok() }},
	{Name: "TTFT p99 added, ms, all repetitions pooled (direct: absolute)", phase: streaming, pooled: 99},
	{Name: "server CPU per 1 000 tokens, ms", phase: streaming,
		value: func(m, _ *measurement) (float64, bool) {
			return ms(m.serverCPU) * 1000 / float64(m.tokens), m.tokens > 0
		}},
	{Name: "peak RSS per streaming stream, KiB", phase: streaming,
		value: func(m, _ *measurement) (float64, bool) { return m.peakPerStream / 1024, m.ok() }},
	{Name: "short answers (1 token) per second", phase: short,
		value:  func(m, _ *measurement) (float64, bool) { return m.rate(), m.ok() },
		direct: func(d *measurement) (float64, bool) { return d.rate(), d.ok() }},
	{Name: "server CPU per short answer, µs", phase: short,
		value: func(m, _ *measurement) (float64, bool) {
			return float64(m.serverCPU.Microseconds()) / float64(m.completed()), m.completed() > 0
		}},
	{Name: "upstream dials per short answer", phase: short,
		value:  func(m, _ *measurement) (float64, bool) { return m.dialsPerCall(), m.completed() > 0 },
		direct: func(d *measurement) (float64, bool) { return d.dialsPerCall(), d.completed() > 0 }},
	{Name: "RSS per idle stream, KiB", phase: idle,
		value: func(m, _ *measurement) (float64, bool) { return m.rssPerStream / 1024, true }},
	{Name: "of which Go heap, KiB", phase: idle,
		value: func(m, _ *measurement) (float64, bool) { return m.heapPerStream / 1024, true }},
	{Name: "of which goroutine stacks, KiB", phase: idle,
		value: func(m, _ *measurement) (float64, bool) { return m.stackPerStream / 1024, true }},
	{Name: "goroutines per idle stream", phase: idle,
		value: func(m, _ *measurement) (float64, bool) { return m.goroutinesPerStream, true }},
}

// added is the TTFT percentile p (50 or 99) of m over that of the direct
// calls d.
func added(m, d *measurement, p int) (float64, bool) {
	if !m.ok() || !d.ok() {
		return 0, false
	}
	if p == 50 {
		return ms(m.ttftP50 - d.ttftP50), true
	}
	return ms(m.ttftP99 - d.ttftP99), true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (m *measurement) completed() int64 { return m.calls - m.errors }
func (m *measurement) ok() bool         { return m != nil && m.completed() > 0 }

func (m *measurement) rate() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return float64(m.completed()) / m.elapsed.Seconds()
}

func (m *measurement) dialsPerCall() float64 { return float64(m.dials) / float64(m.completed()) }

// summary is the progress line of a measurement.
func (m *measurement) summary(ph phase) string {
	s := fmt.Sprintf("%d calls, %d errors", m.calls, m.errors)
	switch ph {
	case streaming:
		s += fmt.Sprintf(", %d tokens, TTFT p50 %.2f ms p99 %.2f ms", m.tokens, ms(m.ttftP50), ms(m.ttftP99))
	case short:
		s += fmt.Sprintf(", %.0f/s", m.rate())
	case idle:
		s += fmt.Sprintf(", per stream %.1f KiB RSS (heap %.1f, stacks %.1f) and %.2f goroutines",
			m.rssPerStream/1024, m.heapPerStream/1024, m.stackPerStream/1024, m.goroutinesPerStream)
	}
	if m.serverCPU > 0 {
		s += fmt.Sprintf(", server CPU %v, %d GC cycles", m.serverCPU, m.gcs)
	}
	if m.redis != nil {
		s += fmt.Sprintf(", Redis: %d commands (%d script calls, %d XADD), CPU %v", m.redis.all(), m.redis.ofScripts(), m.redis.calls["xadd"], m.redis.cpu.Round(time.Millisecond))
	}
	if m.firstErr != nil {
		s += fmt.Sprintf(" (first error: %v)", m.firstErr)
	}
	return s + fmt.Sprintf(", others used %.0f%% of the machine", 100*m.foreign)
}

// cells are one row's values at one level over the repetitions: the
// direct calls', the two targets' (pair) and their ratio.
type cells struct {
	direct, base, other, ratio []float64
}

// cellsOf gathers metric mt at level over the repetitions, for the
// table's pair of targets.
func (r *Report) cellsOf(mt metric, level int) cells {
	base, other := r.pair()
	return r.cellsOfPair(mt, level, base, other)
}

// cellsOfPair gathers metric mt at level over the repetitions, for the
// targets base and other, the ratio other's over base's.
func (r *Report) cellsOfPair(mt metric, level int, base, other target) cells {
	var c cells
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		d := r.results[key{level, rep, direct, mt.phase}]
		if mt.direct != nil && d != nil {
			if v, ok := mt.direct(d); ok {
				c.direct = append(c.direct, v)
			}
		}
		rv, rok := r.value(mt, key{level, rep, base, mt.phase}, d)
		cv, cok := r.value(mt, key{level, rep, other, mt.phase}, d)
		if rok {
			c.base = append(c.base, rv)
		}
		if cok {
			c.other = append(c.other, cv)
		}
		if r, ok := ratio(rv, cv, rok && cok); ok {
			c.ratio = append(c.ratio, r)
		}
	}
	return c
}

// pooledCells is metric mt at level from the first tokens of all the
// repetitions pooled, target by target: the direct calls' percentile, each
// server's over it, and their ratio — one value each. At one stream a
// repetition's p99 is its fifth-slowest first token of about 500, and the
// difference of two such tails moves more between repetitions than
// between the servers; pooled, it is the fifteenth of 1 500.
func (r *Report) pooledCells(mt metric, level int) cells {
	var c cells
	ds := r.pool(direct, level, mt.phase)
	if len(ds) == 0 {
		return c
	}
	d := percentile(ds, mt.pooled)
	c.direct = []float64{ms(d)}
	base, other := r.pair()
	rs, cs := r.pool(base, level, mt.phase), r.pool(other, level, mt.phase)
	var rv, cv float64
	if len(rs) > 0 {
		rv = ms(percentile(rs, mt.pooled) - d)
		c.base = []float64{rv}
	}
	if len(cs) > 0 {
		cv = ms(percentile(cs, mt.pooled) - d)
		c.other = []float64{cv}
	}
	if r, ok := ratio(rv, cv, len(rs) > 0 && len(cs) > 0); ok {
		c.ratio = []float64{r}
	}
	return c
}

// pool is the first tokens of target t at level in phase ph, over all
// the repetitions.
func (r *Report) pool(t target, level int, ph phase) []time.Duration {
	var d []time.Duration
	for rep := 1; rep <= r.cfg.Reps; rep++ {
		if m := r.results[key{level, rep, t, ph}]; m.ok() {
			d = append(d, m.ttfts...)
		}
	}
	return d
}

// ratio is completiond's value cv over the relay's rv, when both were
// measured (ok) and rv is positive. An added TTFT may be negative under the
// noise: the relay's says nothing to divide by, but completiond's is a
// ratio at or under zero — it added nothing the calibration could see —
// and leaving it out would keep only the repetitions where completiond did
// worse (it did: a median of 1.72× from two of five, where all four that
// had a positive relay give 0.06×).
func ratio(rv, cv float64, ok bool) (float64, bool) {
	if !ok || rv <= 0 {
		return 0, false
	}
	return cv / rv, true
}

func (r *Report) value(mt metric, k key, d *measurement) (float64, bool) {
	m := r.results[k]
	if m == nil {
		return 0, false
	}
	return mt.value(m, d)
}

// Markdown renders the report: what was run and on what, the table, and
// the errors and warnings.
func (r *Report) Markdown() string {
	if r.cfg.fleet {
		return r.fleetMarkdown()
	}
	var b strings.Builder
	r.header(&b)
	r.table(&b, Metrics, "| streams | metric | direct | bare relay | completiond | completiond ÷ relay |")
	r.spreadTable(&b)
	r.footer(&b)
	return b.String()
}

// table writes the table of metrics at each level, under head.
func (r *Report) table(b *strings.Builder, metrics []metric, head string) {
	fmt.Fprintf(b, "\n%s\n| ---: | --- | ---: | ---: | ---: | ---: |\n", head)
	for _, level := range r.cfg.Levels {
		for _, mt := range metrics {
			if !slices.Contains(r.cfg.phases(), mt.phase) {
				continue
			}
			var c cells
			if mt.pooled > 0 {
				c = r.pooledCells(mt, level)
			} else {
				c = r.cellsOf(mt, level)
			}
			fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s |\n", level, mt.Name,
				cell(c.direct, ""), cell(c.base, ""), cell(c.other, ""), cell(c.ratio, "×"))
		}
	}
}

// channelsText says how a level's streams share channels.
func channelsText(perChannel int) string {
	if perChannel <= 0 {
		return "one gRPC channel (client connection) for all the streams of a level, as a caller with a gRPC library's defaults has"
	}
	return fmt.Sprintf("a gRPC channel (client connection) per %d streams", perChannel)
}

// spreadText says what the second configuration is, when there is one.
func (c Config) spreadText() string {
	var levels []int
	for _, l := range c.Levels {
		if c.spreads(l, streaming) {
			levels = append(levels, l)
		}
	}
	if len(levels) == 0 || !slices.Contains(c.phases(), streaming) {
		return ""
	}
	return fmt.Sprintf("; a second configuration, completiond with %s, in the streaming phase at %s streams: the same load spread as a caller could spread it, "+
		"to show what one channel costs in time to first token (the table after the main one)", channelsText(c.Spread), joinInts(levels))
}

// spreadTable compares completiond's time to first token on its clients'
// channels with the same load spread over channels of Config.Spread
// streams: absolute times (the many-channel load is the reference, not
// the direct calls), and their ratio within each repetition.
func (r *Report) spreadTable(b *strings.Builder) {
	var levels []int
	for _, l := range r.cfg.Levels {
		if r.cfg.spreads(l, streaming) && slices.Contains(r.cfg.phases(), streaming) {
			levels = append(levels, l)
		}
	}
	if len(levels) == 0 {
		return
	}
	fmt.Fprintf(b, "\nTime to first token through completiond, %s against %s (ratio: the first over the second, within each repetition):\n\n",
		channelsText(r.cfg.StreamsPerChannel), channelsText(r.cfg.Spread))
	b.WriteString("| streams | channels | TTFT p50, ms | spread: channels | spread: TTFT p50, ms | p50 ratio | TTFT p99, ms | spread: TTFT p99, ms | p99 ratio |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, l := range levels {
		var one50, many50, r50, one99, many99, r99 []float64
		for rep := 1; rep <= r.cfg.Reps; rep++ {
			o, m := r.results[key{l, rep, completiond, streaming}], r.results[key{l, rep, spreadOut, streaming}]
			if o.ok() {
				one50, one99 = append(one50, ms(o.ttftP50)), append(one99, ms(o.ttftP99))
			}
			if m.ok() {
				many50, many99 = append(many50, ms(m.ttftP50)), append(many99, ms(m.ttftP99))
			}
			if o.ok() && m.ok() && m.ttftP50 > 0 && m.ttftP99 > 0 {
				r50 = append(r50, float64(o.ttftP50)/float64(m.ttftP50))
				r99 = append(r99, float64(o.ttftP99)/float64(m.ttftP99))
			}
		}
		fmt.Fprintf(b, "| %d | %d | %s | %d | %s | %s | %s | %s | %s |\n", l, channels(l, r.cfg.StreamsPerChannel), cell(one50, ""),
			channels(l, r.cfg.Spread), cell(many50, ""), cell(r50, "×"), cell(one99, ""), cell(many99, ""), cell(r99, "×"))
	}
}

// cell is the median of v and its unit, with its min–max, or "—".
func cell(v []float64, unit string) string {
	s := spreadOf(v)
	if !s.ok {
		return "—"
	}
	if len(v) == 1 || s.lo == s.hi {
		return num(s.med) + unit
	}
	return fmt.Sprintf("%s%s (%s–%s)", num(s.med), unit, num(s.lo), num(s.hi))
}

// num shows three significant digits, or whole numbers from 100 (and 0).
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func (r *Report) header(b *strings.Builder) {
	c := r.cfg
	r.title(b, "load benchmark", "relay and completiond")
	b.WriteString(c.streamingLine())
	fmt.Fprintf(b, "- short: 1-token answers back to back on every stream for %v · idle: every stream held open by a silent upstream, read %v after the last one is held\n",
		c.ShortFor, c.IdleSettle)
	fmt.Fprintf(b, "- upstream: the mock (OpenAI wire) on loopback; direct: openai-go from the harness; each server is a fresh process per measurement, completiond with its shipped default limits at --log-level %s, serving Prometheus metrics on loopback (--metrics-addr, as the Helm chart's pods do)\n", c.LogLevel)
	fmt.Fprintf(b, "- clients: to each server, %s%s\n", channelsText(c.StreamsPerChannel), c.spreadText())
	b.WriteString("- cells: median of the repetitions (min–max); the ratio is taken within each repetition, over a positive relay value (an added TTFT under the direct calls' gives a ratio at or under 0); CPU from /proc/<pid>/stat, RSS from /proc/<pid>/status, " +
		"heap and stacks from runtime.ReadMemStats; memory per stream is the process's growth over the streams (while streaming: its peak, VmHWM, over its RSS before the phase), mostly noise below 100 streams\n")
	r.machineLine(b)
}

// title writes the report's title, what and when, and its first line:
// the machine, the levels and repetitions, with the two targets that swap
// order every repetition (swapped), and how long the run took.
func (r *Report) title(b *strings.Builder, what, swapped string) {
	fmt.Fprintf(b, "### completiond %s, %s\n\n", what, r.Start.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(b, "- %s · %s · %s concurrent streams · %d repetition(s), interleaved (%s swap order every repetition) · %v in all\n",
		goVersion(), cpuModel(), joinInts(r.cfg.Levels), r.cfg.Reps, swapped, max(0, r.End.Sub(r.Start)).Round(time.Second))
}

// streamingLine says how the streaming phase's answers are paced.
func (c Config) streamingLine() string {
	var pacing []string
	for _, l := range c.Levels {
		sp := c.streamSpec(l)
		pacing = append(pacing, fmt.Sprintf("%d tokens %v apart at %d streams", sp.Tokens, sp.TokenDelay, l))
	}
	paced := fmt.Sprintf("%g tokens/s over all streams", c.TokenRate)
	if c.TokenDelay > 0 {
		paced = "a fixed delay"
	}
	return fmt.Sprintf("- streaming: answers of up to %d tokens, the first %v after the headers, paced at %s, each lasting at most %v (%s), answers begun for %v%s\n",
		c.Tokens, c.FirstToken, paced, c.MaxAnswer, strings.Join(pacing, ", "), c.StreamFor, c.minAnswersText())
}

// machineLine says how quiet the machine was, loudly when it was not.
func (r *Report) machineLine(b *strings.Builder) {
	var noisy []quietCheck
	maxBusy := 0.0
	for _, q := range r.quiet {
		maxBusy = max(maxBusy, q.busy)
		if !q.quiet {
			noisy = append(noisy, q)
		}
	}
	var foreign []float64
	for _, m := range r.results {
		foreign = append(foreign, m.foreign)
	}
	f := spreadOf(foreign)
	fmt.Fprintf(b, "- machine: %d of %d checks quiet (≤ %.0f%% busy; the busiest %.0f%%); other processes used %.0f%% of it during a measurement at the median, %.0f%% at most\n",
		len(r.quiet)-len(noisy), len(r.quiet), 100*r.cfg.Quiet.MaxBusy, 100*maxBusy, 100*f.med, 100*f.hi)
	if len(noisy) > 0 {
		fmt.Fprintf(b, "\n**WARNING: the machine was not quiet before %d of %d measurement groups (first: %s, %.0f%% busy after waiting %v). These numbers are noisy: do not quote them as results.**\n",
			len(noisy), len(r.quiet), noisy[0].what, 100*noisy[0].busy, noisy[0].waited.Round(time.Second))
	}
}

// footer lists the measurements that had errors, and the profiles.
func (r *Report) footer(b *strings.Builder) {
	keys := make([]key, 0, len(r.results))
	for k := range r.results {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y key) int {
		return cmpKeys(x, y)
	})
	for _, k := range keys {
		if m := r.results[k]; m.errors > 0 {
			fmt.Fprintf(b, "\n**errors**: level %d, rep %d, %s, %s: %d of %d calls failed; the first: %v\n",
				k.level, k.rep, k.phase, k.target, m.errors, m.calls, m.firstErr)
		}
	}
	for _, level := range r.cfg.Levels {
		if a := r.attributions[level]; a != nil && a.errors > 0 {
			fmt.Fprintf(b, "\n**errors**: level %d, the fleet's attribution pass: %d of %d calls failed; the first: %v\n",
				level, a.errors, a.calls, a.firstErr)
		}
	}
	if len(r.Profiles) > 0 {
		fmt.Fprintf(b, "\nProfiles (CPU under the streaming and short loads, heap with the streams idle): %s\n", strings.Join(r.Profiles, ", "))
	}
}

func cmpKeys(x, y key) int {
	if x.level != y.level {
		return x.level - y.level
	}
	if x.rep != y.rep {
		return x.rep - y.rep
	}
	if x.phase != y.phase {
		return strings.Compare(string(x.phase), string(y.phase))
	}
	return strings.Compare(string(x.target), string(y.target))
}

// Errors is the number of calls that failed in the whole run.
func (r *Report) Errors() int64 {
	var n int64
	for _, m := range r.results {
		n += m.errors
	}
	for _, a := range r.attributions {
		n += a.errors
	}
	return n
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
