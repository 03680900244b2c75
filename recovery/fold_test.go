package recovery

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// foldTranscript is the transcript TestPriorFold replays; TestMachine,
// which replays the rest of testdata/, leaves it alone.
const foldTranscript = "testdata/fold.txt"

// TestPriorFold replays testdata/fold.txt: each case is the event log of a
// lost replica, one event a line as the driver feeds it to PriorFold, and
// the expected output is the Prior the fold returns. Regenerate with
//
//	go test ./recovery -run TestPriorFold -rewrite
//
// Commands:
//
//	fold [base=N] [routes=(a, b)]   a new fold (base: the checkpoint's
//	                                attempt); routes are the configured
//	                                routes the Prior's attempts are looked
//	                                up in (default: a)
//	more                            more events for the same fold
//
// The input is the log, one event a line; every event names its attempt
// (#N) and may set the turn (turn=N, for it and the events after it;
// 1 at first; right after #N for a text):
//
//	started #N route=R
//	text #N TEXT            a text delta (TEXT may be a Go quoted string)
//	thinking #N TEXT        a thinking delta (folded with Other)
//	tool-call #N, stop-hook-request #N, result #N   (folded with Other)
//	usage #N [in=N] [out=N] [cache-read=N] [cache-write=N]
//	transition #N REASON [discard=A,B] [to=R] [max-tokens=N]
//
// The REASON of a transition is for the reader: the fold needs only what
// the transition voided, the route and max_tokens it chose, and its
// attempt.
func TestPriorFold(t *testing.T) {
	var f *PriorFold
	var routes []Route
	turn := 1
	datadriven.RunTest(t, foldTranscript, func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "fold":
			f, routes, turn = NewPriorFold(intArg(t, d, "base", 0)), parseRoutes(t, d), 1
		case "more":
			if f == nil {
				t.Fatalf("%s: more before fold", d.Pos)
			}
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		for _, line := range strings.Split(d.Input, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				turn = feedFold(t, f, line, turn)
			}
		}
		return renderPrior(f.Prior(func(name string) (Route, bool) {
			i := slices.IndexFunc(routes, func(r Route) bool { return r.Name == name })
			if i < 0 {
				return Route{}, false
			}
			return routes[i], true
		}))
	})
}

// feedFold folds one event line of a fold transcript into f; turn is the
// turn of the events so far, and feedFold returns the turn after it.
func feedFold(t *testing.T, f *PriorFold, line string, turn int) int {
	kind, rest, _ := strings.Cut(line, " ")
	num, rest, _ := strings.Cut(strings.TrimSpace(rest), " ")
	a, err := strconv.Atoi(strings.TrimPrefix(num, "#"))
	if err != nil || !strings.HasPrefix(num, "#") {
		t.Fatalf("%q: want the attempt as #N after the event", line)
	}
	rest = strings.TrimSpace(rest)
	if v, after, _ := strings.Cut(rest, " "); strings.HasPrefix(v, "turn=") {
		turn, rest = atoi(t, strings.TrimPrefix(v, "turn=")), strings.TrimSpace(after)
	}
	switch kind {
	case "text", "thinking":
		text := rest
		if strings.HasPrefix(text, `"`) {
			if text, err = strconv.Unquote(rest); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
		if kind == "text" {
			f.Text(a, turn, text)
		} else {
			f.Other(a, turn)
		}
		return turn
	case "tool-call", "stop-hook-request", "result":
		f.Other(a, turn)
		return turn
	}
	args := map[string]string{}
	var words []string
	known := map[string][]string{"started": {"route"}, "usage": {"in", "out", "cache-read", "cache-write"},
		"transition": {"discard", "to", "max-tokens"}}
	for _, w := range strings.Fields(rest) {
		k, v, ok := strings.Cut(w, "=")
		switch {
		case !ok:
			words = append(words, w)
		case k == "turn":
			turn = atoi(t, v)
		case !slices.Contains(known[kind], k):
			t.Fatalf("%q: unknown argument %q", line, k)
		default:
			args[k] = v
		}
	}
	num64 := func(k string) int64 {
		if args[k] == "" {
			return 0
		}
		return int64(atoi(t, args[k]))
	}
	switch kind {
	case "started":
		f.Started(a, turn, args["route"])
	case "usage":
		f.Usage(a, turn, Usage{InputTokens: num64("in"), OutputTokens: num64("out"),
			CacheReadInputTokens: num64("cache-read"), CacheCreationInputTokens: num64("cache-write")})
	case "transition":
		if len(words) != 1 {
			t.Fatalf("%q: a transition names its reason", line)
		}
		var discarded []int
		if args["discard"] != "" {
			for _, s := range strings.Split(args["discard"], ",") {
				discarded = append(discarded, atoi(t, s))
			}
		}
		f.Transition(a, turn, discarded, args["to"], int(num64("max-tokens")))
	default:
		t.Fatalf("%q: unknown event %q", line, kind)
	}
	return turn
}

// renderPrior prints a Prior as fold.txt expects it.
func renderPrior(p Prior) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "attempt=%d turn=%d route=%q max_tokens=%d\n", p.Attempt, p.Turn, p.Route, p.MaxTokens)
	if p.InFlight {
		fmt.Fprintf(&sb, "in flight: #%d streamed %q\n", p.Attempt, p.Streamed)
	} else {
		sb.WriteString("in flight: none\n")
	}
	var kept []string
	for _, k := range p.Kept {
		kept = append(kept, fmt.Sprintf("#%d %q out=%d", k.Attempt, k.Text, k.OutputTokens))
	}
	fmt.Fprintf(&sb, "kept: %s\n", orNone(kept))
	var as []string
	for _, a := range p.Attempts {
		r := a.Route.Name
		if a.Route.Provider == "" {
			r = strconv.Quote(r) + "(not configured)"
		}
		o := map[Outcome]string{OutcomeAnswered: "answered", OutcomeDiscarded: "discarded", OutcomeFailed: "failed"}[a.Outcome]
		as = append(as, fmt.Sprintf("#%d %s %s %s", a.Attempt, r, o, renderUsage(a.Usage)))
	}
	fmt.Fprintf(&sb, "attempts: %s\n", orNone(as))
	fmt.Fprintf(&sb, "usage: %s\n", renderUsage(p.Usage))
	if p.Base != nil || p.Incomplete {
		sb.WriteString("base or incomplete set: the driver's to set\n")
	}
	return sb.String()
}

func renderUsage(u Usage) string {
	s := fmt.Sprintf("in=%d out=%d", u.InputTokens, u.OutputTokens)
	if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 {
		s += fmt.Sprintf(" cache-read=%d cache-write=%d", u.CacheReadInputTokens, u.CacheCreationInputTokens)
	}
	return s
}

func orNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, "; ")
}

// BenchmarkPriorFold measures the fold of a takeover's log of 1 000 text
// deltas (the reading of the log is the store's).
func BenchmarkPriorFold(b *testing.B) {
	route := func(name string) (Route, bool) { return Route{Name: name, Provider: "sim"}, true }
	b.ReportAllocs()
	for b.Loop() {
		f := NewPriorFold(0)
		f.Started(0, 1, "sim")
		for range 1000 {
			f.Text(1, 1, " word")
		}
		f.Prior(route)
	}
}

// TestPriorFoldReadsTheMachine folds the log a driver writes of random
// runs (as in TestMachineProperties: each ended attempt's text and usage,
// then the step's transitions) and checks the fold against the machine
// wherever the machine is between attempts with its last decision
// logged (a step with transitions that calls or waits): nothing in
// flight, the kept answer the machine's, the route, max_tokens, turn and
// usage of the next call.
func TestPriorFoldReadsTheMachine(t *testing.T) {
	runs, checked := 1500, 0
	if testing.Short() {
		runs = 300
	}
	for seed := 1; seed <= runs; seed++ {
		g := &gen{r: rand.New(rand.NewPCG(uint64(seed), 0xf01d)), now: epoch}
		cfg := g.config()
		m, f := New(cfg), NewPriorFold(0)
		st := m.Start(g.now)
		f.Started(0, 1, cfg.Routes[0].Name)
		for steps := 0; st.Action.Kind != ActFinish; steps++ {
			if steps > stepBound {
				t.Fatalf("seed %d: no finish after %d steps", seed, steps)
			}
			logTransitions(f, st)
			if len(st.Transitions) > 0 && (st.Action.Kind == ActCall || st.Action.Kind == ActWait) {
				checked++
				checkFold(t, seed, m, st, f.Prior(func(name string) (Route, bool) {
					i := m.routeIndex(name)
					if i < 0 {
						return Route{}, false
					}
					return cfg.Routes[i], true
				}))
			}
			ev := g.event(st)
			if a := st.Action; (a.Kind == ActCall || a.Kind == ActSummarize) && !ev.NotSent &&
				(ev.Kind == EvAttemptDone || ev.Kind == EvAttemptFailed) {
				if a.Kind == ActCall && ev.Text != "" { // a summary streams nothing
					f.Text(a.Call.Attempt, a.Turn, ev.Text)
				}
				f.Usage(a.Call.Attempt, a.Turn, ev.Usage)
			}
			st = m.Step(ev)
		}
	}
	t.Logf("%d checks in %d runs", checked, runs)
	if checked < runs {
		t.Fatalf("only %d checks in %d runs: the generator is too narrow", checked, runs)
	}
}

// logTransitions folds the transitions of st as a driver logs them.
func logTransitions(f *PriorFold, st Step) {
	for _, tr := range st.Transitions {
		f.Transition(tr.Attempt, tr.Turn, tr.DiscardAttempts, tr.To.Name, tr.MaxTokens)
	}
}

// checkFold compares the Prior folded from the log of m's run with m,
// which has just returned st.
func checkFold(t *testing.T, seed int, m *Machine, st Step, p Prior) {
	t.Helper()
	var kept []Kept
	for _, pt := range m.parts {
		if pt.text != "" {
			kept = append(kept, Kept{Attempt: pt.attempt, Text: pt.text, OutputTokens: pt.tokens})
		}
	}
	var pk []Kept
	for _, k := range p.Kept {
		if k.Text != "" {
			pk = append(pk, k)
		}
	}
	fail := func(what string, got, want any) {
		t.Fatalf("seed %d, after %+v: the fold's %s is %v, the machine's %v", seed, st.Transitions, what, got, want)
	}
	switch {
	case p.InFlight:
		fail("attempt in flight", p.Attempt, "none")
	case !slices.Equal(pk, kept):
		fail("kept answer", pk, kept)
	case p.Route != m.cur().Name:
		fail("route", p.Route, m.cur().Name)
	case p.MaxTokens != m.callMax():
		fail("max_tokens", p.MaxTokens, m.callMax())
	case p.Turn != m.turn:
		fail("turn", p.Turn, m.turn)
	case p.Usage != m.usage:
		fail("usage", p.Usage, m.usage)
	}
}
