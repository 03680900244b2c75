package recovery

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// stepBound is far above any run the generator produces; a machine that
// reaches it is looping.
const stepBound = 5000

// TestMachineProperties drives machines with random configurations and
// random (but well-formed) events and checks, on every step, the promises
// the wire checker knows: exactly one terminal transition, last, with the
// finish; attempt numbers 1, 2, 3, ...; a prefill that is the end of the
// kept answer; Result.Text equal to the deltas of the attempts no transition
// voided; usage adding up. Seeds are fixed, so a failure replays.
func TestMachineProperties(t *testing.T) {
	runs := 4000
	if testing.Short() {
		runs = 500
	}
	longest, reasons, seen := 0, map[Reason]int{}, map[string]int{}
	for seed := 1; seed <= runs; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			steps, r := runRandom(t, uint64(seed), seen)
			longest = max(longest, steps)
			reasons[r]++
		})
		if t.Failed() {
			return
		}
	}
	t.Logf("longest run: %d steps; endings: %v; compound failures: %v", longest, reasons, seen)
	for _, r := range []Reason{Completed, ModelError, PromptTooLong, AbortedStreaming} {
		if reasons[r] == 0 {
			t.Errorf("the generator never reached %s: it is too narrow", r)
		}
	}
	for _, p := range []SnapshotPhase{SnapshotNext, SnapshotAwaitTools, SnapshotAwaitStopHook} {
		if n := seen[fmt.Sprint("checkpoint ", p)]; n < runs/50 {
			t.Errorf("only %d takeovers from a checkpoint of phase %d: the generator is too narrow", n, p)
		}
	}
	for _, c := range compounds {
		if seen[c.name] < runs/200 {
			t.Errorf("the generator produced %q only %d times: it is too narrow", c.name, seen[c.name])
		}
	}
}

// compounds are the compound failures the generator must produce, each
// recognised from an event and the step that answered it.
var compounds = []struct {
	name string
	is   func(prev Action, ev Event, st Step) bool
}{
	{"cut then refused prefill", func(prev Action, ev Event, st Step) bool {
		return ev.Failure != nil && ev.Failure.Kind == FailPrefillRejected && prev.Call.Prefill != ""
	}},
	{"cut inside a tool call", func(prev Action, ev Event, st Step) bool {
		return ev.Kind == EvAttemptDone && ev.StopReason.Truncating() && len(ev.ToolCalls) > 0
	}},
	{"stream broken after a tool call", func(prev Action, ev Event, st Step) bool {
		return ev.Kind == EvAttemptFailed && len(ev.ToolCalls) > 0
	}},
	{"summary that itself retries", func(prev Action, ev Event, st Step) bool {
		return prev.Kind == ActSummarize && hasReason(st, Retry)
	}},
	{"stop-hook block after a continuation", func(prev Action, ev Event, st Step) bool {
		for _, tr := range st.Transitions {
			if tr.Reason == StopHookBlocking && len(tr.DiscardAttempts) > 1 {
				return true
			}
		}
		return false
	}},
	{"call not sent", func(prev Action, ev Event, st Step) bool { return ev.NotSent }},
}

func hasReason(st Step, r Reason) bool {
	for _, tr := range st.Transitions {
		if tr.Reason == r {
			return true
		}
	}
	return false
}

// runRandom runs one random completion to its end.
func runRandom(t *testing.T, seed uint64, seen map[string]int) (int, Reason) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	g := &gen{r: r, now: epoch}
	cfg := g.config()
	m := New(cfg)
	w := &wire{}
	st := m.Start(g.now)
	w.check(t, st)
	var twin *Machine // taken over from the last checkpoint that awaited the caller
	steps := 0
	for st.Action.Kind != ActFinish {
		if steps++; steps > stepBound {
			t.Fatalf("no finish after %d steps; last %+v", steps, st)
		}
		if st.Checkpoint != nil {
			twin = checkTakeover(t, cfg, st, twin)
			seen[fmt.Sprint("checkpoint ", st.Checkpoint.Phase)]++
		}
		ev := g.event(st)
		w.feed(t, ev)
		prev := st.Action
		st = m.Step(ev)
		if twin != nil {
			sameStep(t, twin.Step(ev), st)
		}
		w.check(t, st)
		for _, c := range compounds {
			if c.is(prev, ev, st) {
				seen[c.name]++
			}
		}
		checkThinking(t, st)
		checkStripped(t, prev, st)
	}
	// After the finish every event gets the same finish step.
	w.check(t, m.Step(Event{Kind: EvAttemptDone, Now: g.now, Text: "late"}))
	w.check(t, m.Step(Event{Kind: EvCancelled, Now: g.now}))
	return steps, st.Action.Result.Reason
}

// checkTakeover checks the checkpoint of st, a step of a machine of cfg:
// a machine taken over from it (encoded and decoded as a driver would)
// must await the caller exactly as st does, and then step as the original
// does (the returned twin, fed the same events, is compared step by step);
// one taken over where nothing awaits the caller must retry, at once,
// with the conversation of the checkpoint. It returns the twin to follow.
func checkTakeover(t *testing.T, cfg Config, st Step, twin *Machine) *Machine {
	t.Helper()
	raw, err := json.Marshal(st.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	var base Snapshot
	if err := json.Unmarshal(raw, &base); err != nil {
		t.Fatal(err)
	}
	m := Takeover(cfg, Prior{Base: &base})
	got := m.Start(epoch)
	if base.Phase != SnapshotNext {
		if len(got.Transitions) > 0 {
			t.Fatalf("taken over while %v, the machine decided %+v", base.Phase, got.Transitions)
		}
		sameStep(t, Step{Action: got.Action}, Step{Action: st.Action})
		return m
	}
	a := got.Action
	if a.Kind == ActFinish {
		return twin // no retry left: nothing more to compare
	}
	var seg strings.Builder
	for _, p := range base.Parts[base.SegStart:] {
		seg.WriteString(p.Text)
	}
	msgs, _ := json.Marshal(a.Call.Messages)
	want, _ := json.Marshal(base.Messages)
	if len(got.Transitions) == 0 || got.Transitions[0].Failure == nil || got.Transitions[0].Failure.Kind != FailReplicaLost || a.Turn != base.Turn {
		t.Fatalf("taken over after a checkpoint, the machine did not decide a replica's loss: %+v", got)
	}
	if r := got.Transitions[0].Reason; len(got.Transitions) == 1 && (r == Retry || r == StreamResume) &&
		(a.Kind != ActCall || string(msgs) != string(want) || (a.Call.Prefill != "" && a.Call.Prefill != seg.String())) {
		t.Fatalf("taken over after a checkpoint, the machine did not call again with the checkpoint's conversation and partial answer: %+v", got)
	}
	return twin
}

// sameStep fails t unless the twin's step is the original's, as JSON
// (which does not tell a nil slice from an empty one, as no driver does).
func sameStep(t *testing.T, twin, orig Step) {
	t.Helper()
	a, _ := json.Marshal(twin)
	b, _ := json.Marshal(orig)
	if string(a) == string(b) {
		return
	}
	i := 0
	for i < min(len(a), len(b)) && a[i] == b[i] {
		i++
	}
	from := max(i-200, 0)
	t.Fatalf("the machine taken over from a checkpoint went another way at byte %d:\n  taken over: …%s\n  original:   …%s",
		i, a[from:min(i+200, len(a))], b[from:min(i+200, len(b))])
}

// gen draws configurations and events.
type gen struct {
	r        *rand.Rand
	now      time.Time
	stubborn bool // an upstream that mostly fails transiently: the long runs
	ids      int  // tool call ids handed out
}

func (g *gen) pick(n int) int        { return g.r.IntN(n) }
func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) config() Config {
	g.stubborn = g.chance(0.15)
	p := DefaultPolicy()
	p.Retry.MaxRetries = []int{0, 1, 3, 10, 10}[g.pick(5)]
	p.Retry.Fallback, p.Overflow.Compaction, p.Truncation.Escalation = g.chance(0.8), g.chance(0.8), g.chance(0.8)
	p.Turns.MaxTurns = []int{1, 3, 20}[g.pick(3)]
	cfg := Config{
		Policy:   p,
		System:   "sys",
		Messages: g.messages(),
		Session:  g.chance(0.5),
		StopHook: g.chance(0.4),
	}
	cfg.Checkpoints = true // no draw: the runs stay those of the seeds
	for i := range 1 + g.pick(3) {
		cfg.Routes = append(cfg.Routes, Route{
			Name:            fmt.Sprintf("r%d", i),
			ContextWindow:   []int{0, 20000, 200000}[g.pick(3)],
			MaxOutputTokens: []int{0, 8000, 16000, 128000}[g.pick(4)],
			Prefill:         g.chance(0.5),
			Thinking:        g.chance(0.3),
		})
	}
	if g.chance(0.3) {
		cfg.TokenBudget = []int{1000, 20000}[g.pick(2)]
	}
	if g.chance(0.3) && !g.stubborn {
		cfg.Deadline = g.now.Add(time.Duration(1+g.pick(120)) * time.Second)
	}
	return cfg
}

func (g *gen) messages() []Message {
	var msgs []Message
	for i := range 1 + 2*g.pick(7) {
		m := Message{Role: RoleUser}
		if i%2 == 1 {
			m.Role = RoleAssistant
		}
		for range 1 + g.pick(2) {
			switch g.pick(10) {
			case 0:
				m.Blocks = append(m.Blocks, TextBlock(blob(1000+g.pick(40000))))
			case 1:
				m.Blocks = append(m.Blocks, Block{Kind: []BlockKind{BlockImage, BlockDocument}[g.pick(2)]})
			default:
				m.Blocks = append(m.Blocks, TextBlock(fmt.Sprintf("m%d", i)))
			}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// event returns an event the action in st can produce, now and then a
// cancel, rarely an event it cannot (a driver bug).
func (g *gen) event(st Step) Event {
	g.now = g.now.Add(time.Duration(g.pick(3000)) * time.Millisecond)
	ev := Event{Now: g.now, Rand: g.r.Float64()}
	if g.chance(0.01) && !g.stubborn {
		ev.Kind, ev.Text = EvCancelled, g.text()
		return ev
	}
	if g.chance(0.002) {
		ev.Kind = EventKind(1 + g.pick(6)) // maybe the wrong one
		return ev
	}
	switch st.Action.Kind {
	case ActCall:
		if st.Action.Call.Prefill != "" && g.chance(0.2) { // an upstream that refuses to continue
			ev.Kind, ev.Failure = EvAttemptFailed, &Failure{Kind: FailPrefillRejected, HTTPStatus: 400}
			return ev
		}
		return g.attempt(ev)
	case ActWait:
		g.now = g.now.Add(st.Action.Delay)
		ev.Kind, ev.Now = EvWaitElapsed, g.now
	case ActSummarize:
		ev.Kind, ev.Text, ev.StopReason = EvAttemptDone, "summary", StopEndTurn
		ev.Usage = Usage{InputTokens: 100, OutputTokens: 10}
		switch {
		case g.chance(0.3): // a summary that itself fails, often transiently
			ev.Kind, ev.Text, ev.Failure = EvAttemptFailed, "", g.failure()
		case g.chance(0.05):
			ev.Text = "" // an empty summary
		case g.chance(0.03):
			ev.Kind, ev.Text, ev.Failure, ev.NotSent = EvAttemptFailed, "", &Failure{Kind: FailCircuitOpen}, true
		}
	case ActAwaitTools:
		ev.Kind = EvToolResults
		for _, c := range st.Action.ToolCalls {
			ev.Results = append(ev.Results, Block{Kind: BlockToolResult, ToolUseID: c.ID, Text: "ok", Halt: g.chance(0.03)})
		}
	case ActAwaitStopHook:
		ev.Kind, ev.Verdict, ev.VerdictMessage = EvStopHookVerdict, []Verdict{VerdictAllow, VerdictBlock, VerdictBlock, VerdictPrevent}[g.pick(4)], "fix it"
	}
	return ev
}

// attempt reports how a call went: done with some stop reason, or failed.
func (g *gen) attempt(ev Event) Event {
	ev.Usage = Usage{InputTokens: int64(g.pick(5000)), OutputTokens: int64(g.pick(3000))}
	ev.Text = g.text()
	done := 0.4
	if g.stubborn {
		done = 0.08
	}
	if g.chance(0.03) { // the breaker kept the call from leaving
		ev.Kind, ev.Failure, ev.NotSent, ev.Text, ev.Usage = EvAttemptFailed, &Failure{Kind: FailCircuitOpen}, true, "", Usage{}
		return ev
	}
	if g.chance(done) {
		ev.Kind = EvAttemptDone
		ev.StopReason = []StopReason{StopEndTurn, StopEndTurn, StopEndTurn, StopMaxTokens, StopMaxTokens, StopMaxTokens,
			StopContextWindow, StopToolUse, StopToolUse, StopSequence, StopRefusal, StopContentFilter,
			StopPauseTurn, StopNone}[g.pick(14)]
		if ev.StopReason == StopToolUse || g.chance(0.1) { // complete calls before a cut, too
			ev.ToolCalls = g.calls(g.pick(3))
		}
		for i := range g.pick(3) {
			ev.Thinking = append(ev.Thinking, Block{Kind: BlockThinking, Text: fmt.Sprintf("think%d", i), Signature: "sig"})
		}
		return ev
	}
	ev.Kind, ev.Failure = EvAttemptFailed, g.failure()
	if g.chance(0.5) {
		ev.Text = "" // most failures come before the first token
	}
	if g.chance(0.1) { // a stream that broke after a complete tool call
		ev.ToolCalls = g.calls(1)
	}
	return ev
}

// calls returns n tool calls with ids unique in the run.
func (g *gen) calls(n int) []ToolCall {
	var cs []ToolCall
	for range n {
		g.ids++
		cs = append(cs, ToolCall{ID: fmt.Sprintf("t%d", g.ids), Name: "tool"})
	}
	return cs
}

// checkThinking checks the thinking rules on a step: a route that thinks
// gets no prefill, and in every assistant message sent, thinking blocks
// come before everything else, and only where a tool use follows.
func checkThinking(t *testing.T, st Step) {
	t.Helper()
	c := st.Action.Call
	if st.Action.Kind != ActCall {
		return
	}
	if c.Route.Thinking && c.Prefill != "" {
		t.Fatalf("call #%d on %s, which thinks, has a prefill", c.Attempt, c.Route.Name)
	}
	for i, m := range c.Messages {
		other, uses := false, false
		for _, b := range m.Blocks {
			switch {
			case b.Kind != BlockThinking:
				other = true
				uses = uses || b.Kind == BlockToolUse
			case other:
				t.Fatalf("call #%d: message %d has a thinking block after other content: %+v", c.Attempt, i, m)
			}
		}
		if m.Blocks[0].Kind == BlockThinking && !uses {
			t.Fatalf("call #%d: message %d has thinking but no tool use: %+v", c.Attempt, i, m)
		}
	}
}

// checkStripped checks that the media blocks a transition says it
// stripped were images or documents in the rejected call and are
// placeholders in the next one, every other block unchanged.
func checkStripped(t *testing.T, prev Action, st Step) {
	t.Helper()
	for _, tr := range st.Transitions {
		if len(tr.Stripped) == 0 {
			continue
		}
		if st.Action.Kind != ActCall {
			t.Fatalf("stripped %v, then %v instead of a call", tr.Stripped, st.Action.Kind)
		}
		before, after := prev.Call.Messages, st.Action.Call.Messages
		if len(before) != len(after) {
			t.Fatalf("stripping changed the number of messages: %d → %d", len(before), len(after))
		}
		for i := range before {
			if len(before[i].Blocks) != len(after[i].Blocks) {
				t.Fatalf("stripping changed message %d: %+v → %+v", i, before[i], after[i])
			}
			for j, b := range before[i].Blocks {
				a := after[i].Blocks[j]
				stripped := slices.Contains(tr.Stripped, BlockRef{Message: i, Block: j})
				switch {
				case stripped && (!b.Media() || a.Kind != BlockText || a.Text != placeholder(b)):
					t.Fatalf("stripped messages[%d].content[%d]: %+v → %+v", i, j, b, a)
				case !stripped && !reflect.DeepEqual(a, b):
					t.Fatalf("messages[%d].content[%d] changed but is not in Stripped %v: %+v → %+v", i, j, tr.Stripped, b, a)
				}
			}
		}
	}
}

func (g *gen) failure() *Failure {
	if g.stubborn && g.chance(0.97) {
		kinds := []FailureKind{FailConnection, FailTimeout, FailRateLimit, FailOverloaded, FailServer, FailStreamBroken}
		return &Failure{Kind: kinds[g.pick(len(kinds))], RetryAfter: time.Duration(g.pick(3)) * time.Second}
	}
	if g.chance(0.02) {
		return nil
	}
	f := &Failure{Kind: FailureKind(g.pick(len(failureKindNames))), HTTPStatus: []int{0, 400, 429, 500, 529}[g.pick(5)]}
	if g.chance(0.7) { // flaky upstreams
		f.Kind = []FailureKind{FailConnection, FailTimeout, FailRateLimit, FailOverloaded, FailServer,
			FailStreamBroken, FailPrefillRejected, FailContextLimit}[g.pick(8)]
	}
	if g.chance(0.2) {
		f.RetryAfter = time.Duration(g.pick(40)) * time.Second
	}
	if g.chance(0.05) {
		f.ShouldRetry = []int{-1, 1}[g.pick(2)]
	}
	f.ContextWindow = []int{0, 20000, 200000}[g.pick(3)]
	f.InputTokens = g.pick(f.ContextWindow + 1)
	f.MaxTokens = g.pick(64000)
	f.PromptTokens = g.pick(300000)
	if f.Kind == FailMedia {
		for range g.pick(3) { // none, or refs that may or may not point at media
			f.MediaBlocks = append(f.MediaBlocks, BlockRef{Message: g.pick(4), Block: g.pick(3)})
		}
	}
	return f
}

func (g *gen) text() string {
	if g.chance(0.3) {
		return ""
	}
	return []string{"a", "bb", "ccc", "Hello, ", "world. ", "—"}[g.pick(6)]
}

// TestChainWithoutFallbackDecidesTheSame backs Chain's promise: without
// fallback, a machine given the whole chain of routes decides exactly as
// one given only the primary route, so that trimming the chain (Chain) is
// the driver's economy, not a decision. Random runs, as in
// TestMachineProperties, every step compared.
func TestChainWithoutFallbackDecidesTheSame(t *testing.T) {
	runs, multi := 1500, 0
	if testing.Short() {
		runs = 300
	}
	for seed := 1; seed <= runs; seed++ {
		g := &gen{r: rand.New(rand.NewPCG(uint64(seed), 0xc4a1)), now: epoch}
		cfg := g.config()
		cfg.Policy.Retry.Fallback = false
		if len(cfg.Routes) > 1 {
			multi++
		}
		short := cfg
		short.Routes = Chain(cfg.Policy, cfg.Routes)
		whole, trimmed := New(cfg), New(short)
		st := whole.Start(g.now)
		sameDecision(t, seed, st, trimmed.Start(g.now))
		for steps := 0; st.Action.Kind != ActFinish; steps++ {
			if steps > stepBound {
				t.Fatalf("seed %d: no finish after %d steps", seed, steps)
			}
			ev := g.event(st)
			st = whole.Step(ev)
			sameDecision(t, seed, st, trimmed.Step(ev))
		}
	}
	if multi < runs/2 {
		t.Fatalf("only %d runs of %d had fallback routes to ignore", multi, runs)
	}
}

// sameDecision fails the test unless the two steps are the same.
func sameDecision(t *testing.T, seed int, whole, trimmed Step) {
	t.Helper()
	a, _ := json.Marshal(whole)
	b, _ := json.Marshal(trimmed)
	if string(a) != string(b) {
		t.Fatalf("seed %d: the whole chain and the primary route alone decide differently:\n  whole:   %s\n  trimmed: %s", seed, a, b)
	}
}
