package recovery

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestMachine replays the transcripts in testdata/ (fold.txt apart: see
// TestPriorFold). Each file is one or more completions driven by a small
// command language; the expected output is the trace of what the machine
// decided. Regenerate with
//
//	go test ./recovery -run TestMachine -rewrite
//
// and read the diff: every line must be a decision you agree with.
//
// Commands (one completion at a time; start begins a new one):
//
//	start routes=(a:prefill:thinking:w=200000:max=64000, b) [max-tokens=N] [budget=N]
//	      [deadline=D] [session] [stop-hook] [max-turns=N] [retries=N]
//	      [overloads=N] [continuations=N] [hook-blocks=N] [keep=N]
//	      [fallback-retries=N] [fallback-wait=D]
//	      [collapse-min=N] [no-fallback] [no-compaction] [no-escalation]
//	      [media=N]
//	  The input, if any, is the conversation, one message a line:
//	  "user: item | item", items being text, img, img-url, doc, doc-url,
//	  blob:N (N bytes of text), tool_use:ID:NAME, tool_result:ID:TEXT (TEXT
//	  may be blob:N), thinking:TEXT:SIG, redacted:DATA.
//	fail kind=K [status=N] [text=T] [retry-after=D] [should-retry=B] [x=X y=Y z=Z]
//	      [prompt=N window=M] [in=N] [out=N] [blocks=(M.B, ...)]
//	  blocks are the media blocks a rejection names, messages[M].content[B].
//	done [stop=S] [text=T] [in=N] [out=N] [tools=(ID:NAME, ...)]
//	     [thinking=(TEXT:SIG, redacted:DATA, ...)]
//	elapse                 the wait is over; the clock moves by its delay
//	compacted [summary=T] [out=N]   the summarising call answered T
//	compact-failed kind=K [status=N] [retry-after=D]   it failed
//	tools [halt=ID] [size=N]  answer every pending tool call (N bytes each)
//	verdict allow|block|prevent [msg=T]
//	cancel [reason=T]
//	  Every event also takes open=(R, ...): the routes whose circuit breaker
//	  is open as the driver reports it with that event (start takes it too).
//	  fail, compact-failed and cancel take not-sent: the call never left.
//	fail-raw               a failure event without a Failure
//	compact-failed-raw     a failed summary without a Failure
//	set rand=F             the uniform draw handed to the machine (default 0)
//	msgs                   the full conversation of the last call
//	start-again            call Start a second time
//
// start no-start builds the machine without starting it; routes=none gives
// it no route.
//
// Every event command takes took=D (advance the clock first) and rand=F. A
// text may also be given as the command's input, which allows spaces.
//
// Output: one line per transition, then the action. A call prints its
// conversation (msgs:) only when it differs from the last call printed.
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.ToSlash(path) == foldTranscript {
			return // no machine's: TestPriorFold replays it
		}
		e := &env{t: t}
		datadriven.RunTest(t, path, e.handle)
	})
}

var epoch = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// env drives one Machine from a transcript.
type env struct {
	t     testing.TB
	m     *Machine
	now   time.Time
	rand  float64
	last  Step
	shown []Message // conversation of the last call printed
	wire  *wire
	cfg   Config
	ckpt  *Snapshot // the last checkpoint, as a driver saves it (JSON)
}

func (e *env) handle(t *testing.T, d *datadriven.TestData) string {
	e.t = t
	if d.Cmd == "start" {
		return e.start(d)
	}
	if e.m == nil {
		t.Fatalf("%s: start first", d.Pos)
	}
	switch d.Cmd {
	case "set":
		e.rand = floatArg(t, d, "rand", e.rand)
		return "ok"
	case "start-again":
		return e.show(e.m.Start(e.now))
	case "msgs":
		return renderMessages(e.shown, 120, "\n") + "\n"
	case "lose-replica":
		return e.loseReplica(d)
	}
	ev, ok := e.event(d)
	if !ok {
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	e.wire.feed(t, ev)
	return e.show(e.m.Step(ev))
}

func (e *env) start(d *datadriven.TestData) string {
	t := e.t
	p := DefaultPolicy()
	p.Retry.MaxRetries = intArg(t, d, "retries", p.Retry.MaxRetries)
	p.Retry.FallbackRetries = intArg(t, d, "fallback-retries", min(p.Retry.FallbackRetries, p.Retry.MaxRetries))
	p.Retry.FallbackWait = durArg(t, d, "fallback-wait", p.Retry.FallbackWait)
	p.Retry.OverloadsBeforeFallback = intArg(t, d, "overloads", p.Retry.OverloadsBeforeFallback)
	p.Truncation.MaxContinuations = intArg(t, d, "continuations", p.Truncation.MaxContinuations)
	p.Turns.MaxStopHookBlocks = intArg(t, d, "hook-blocks", p.Turns.MaxStopHookBlocks)
	p.Media.MaxRecoveries = intArg(t, d, "media", p.Media.MaxRecoveries)
	p.Overflow.KeepRecentMessages = intArg(t, d, "keep", p.Overflow.KeepRecentMessages)
	p.Overflow.CollapseMinBytes = intArg(t, d, "collapse-min", p.Overflow.CollapseMinBytes)
	p.Retry.Fallback = !d.HasArg("no-fallback")
	p.Overflow.Compaction = !d.HasArg("no-compaction")
	p.Truncation.Escalation = !d.HasArg("no-escalation")
	cfg := Config{
		Policy:               p,
		Routes:               parseRoutes(t, d),
		System:               strArg(t, d, "system", "You are terse."),
		Messages:             parseMessages(t, d.Input),
		MaxTokens:            intArg(t, d, "max-tokens", 0),
		TokenBudget:          intArg(t, d, "budget", 0),
		MaxTotalOutputTokens: intArg(t, d, "max-total", 0),
		Session:              d.HasArg("session"),
		StopHook:             d.HasArg("stop-hook"),
		MaxTurns:             intArg(t, d, "max-turns", 0),
		OpenRoutes:           listArg(d, "open"),
		Checkpoints:          d.HasArg("checkpoints"),
	}
	if dl := durArg(t, d, "deadline", 0); dl > 0 {
		cfg.Deadline = epoch.Add(dl)
	}
	e.m, e.now, e.rand, e.shown, e.wire, e.cfg, e.ckpt = New(cfg), epoch, 0, nil, &wire{}, cfg, nil
	if d.HasArg("takeover") {
		e.m = Takeover(cfg, e.prior(d))
	}
	if d.HasArg("no-start") {
		return "ok"
	}
	return e.show(e.m.Start(e.now))
}

// loseReplica is lose-replica [takeover=N] [kept=(A:TEXT, ...)]
// [streamed=T in-flight] [on=ROUTE] [turn=N]: the replica running the
// machine is lost after its last checkpoint, and another takes over from
// it, the arguments saying what the log shows after it (as for start
// takeover=N). The caller, who saw everything, goes on with its wire.
func (e *env) loseReplica(d *datadriven.TestData) string {
	t := e.t
	if e.ckpt == nil {
		t.Fatalf("%s: lose-replica without a checkpoint (start with checkpoints)", d.Pos)
	}
	base := e.ckpt.Attempt
	p := Prior{Base: e.ckpt, Attempt: intArg(t, d, "takeover", base), Turn: intArg(t, d, "turn", e.ckpt.Turn),
		Route: strArg(t, d, "on", ""), InFlight: d.HasArg("in-flight"), Streamed: strArg(t, d, "streamed", "")}
	w := e.wire
	w.attempt, w.turn, w.inflight = p.Attempt, p.Turn, 0
	if e.ckpt.Phase == SnapshotAwaitTools {
		w.turnCalls = w.awaited // awaited again: the caller has them already
	}
	for _, v := range listArg(d, "kept") {
		a, text, _ := strings.Cut(v, ":")
		p.Kept = append(p.Kept, Kept{Attempt: atoi(t, a), Text: text, OutputTokens: 1})
		w.streamed[atoi(t, a)] = text
	}
	for a := base + 1; a <= p.Attempt; a++ {
		if p.InFlight && a == p.Attempt {
			w.streamed[a] = p.Streamed
			break
		}
		p.Attempts = append(p.Attempts, AttemptRecord{Attempt: a, Outcome: OutcomeFailed})
	}
	e.m = Takeover(e.cfg, p)
	return e.show(e.m.Start(e.now))
}

// roundTrip is s encoded and decoded as a driver saves and reads it.
func roundTrip(t testing.TB, s *Snapshot) *Snapshot {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// prior builds the Prior of start takeover=N [kept=(A:TEXT, ...)]
// [streamed=T in-flight] [on=ROUTE] [turn=N] [out=N] [incomplete], and tells the wire
// checker what the lost replica had sent: the kept attempts' text, the text
// of the attempt in flight, every other attempt voided.
func (e *env) prior(d *datadriven.TestData) Prior {
	t := e.t
	p := Prior{Attempt: intArg(t, d, "takeover", 0), Turn: intArg(t, d, "turn", 1), Route: strArg(t, d, "on", ""),
		InFlight: d.HasArg("in-flight"), Streamed: strArg(t, d, "streamed", ""), Incomplete: d.HasArg("incomplete")}
	w := e.wire
	w.init()
	w.attempt, w.turn = p.Attempt, p.Turn
	for _, v := range listArg(d, "kept") {
		a, text, _ := strings.Cut(v, ":")
		p.Kept = append(p.Kept, Kept{Attempt: atoi(t, a), Text: text, OutputTokens: 1})
		w.streamed[atoi(t, a)] = text
	}
	route := Route{Name: "a", Provider: "sim", Model: "a"}
	if rs := parseRoutes(t, d); len(rs) > 0 {
		route = rs[0]
	}
	for a := 1; a <= p.Attempt; a++ {
		if p.InFlight && a == p.Attempt {
			w.streamed[a] = p.Streamed
			break
		}
		u := Usage{OutputTokens: int64(intArg(t, d, "out", 0))}
		p.Attempts = append(p.Attempts, AttemptRecord{Attempt: a, Route: route, Outcome: OutcomeFailed, Usage: u})
		p.Usage = p.Usage.Add(u)
		if !slices.ContainsFunc(p.Kept, func(k Kept) bool { return k.Attempt == a }) {
			w.fate[a], w.voided[a] = "void", true
		}
	}
	return p
}

// event builds the event of an event command.
func (e *env) event(d *datadriven.TestData) (Event, bool) {
	t := e.t
	e.now = e.now.Add(durArg(t, d, "took", 0))
	ev := Event{Now: e.now, Rand: floatArg(t, d, "rand", e.rand), OpenRoutes: listArg(d, "open")}
	ev.Usage = Usage{InputTokens: int64(intArg(t, d, "in", 0)), OutputTokens: int64(intArg(t, d, "out", 0))}
	text := expandBlob(t, strArg(t, d, "text", strings.TrimSpace(d.Input)))
	switch d.Cmd {
	case "fail":
		ev.Kind, ev.Text, ev.Failure = EvAttemptFailed, text, parseFailure(t, d)
		ev.ToolCalls = parseToolCalls(t, d)
	case "fail-raw":
		ev.Kind = EvAttemptFailed // no Failure at all
	case "done":
		ev.Kind, ev.Text = EvAttemptDone, text
		ev.StopReason = parseStop(t, strArg(t, d, "stop", "end_turn"))
		ev.StopSequence = strArg(t, d, "seq", "")
		ev.ToolCalls = parseToolCalls(t, d)
		for _, v := range listArg(d, "thinking") {
			ev.Thinking = append(ev.Thinking, parseThinking(v))
		}
	case "elapse":
		if e.last.Action.Kind != ActWait {
			t.Fatalf("%s: elapse without a wait", d.Pos)
		}
		e.now = e.now.Add(e.last.Action.Delay)
		ev.Kind, ev.Now = EvWaitElapsed, e.now
	case "compacted":
		ev.Kind, ev.Text, ev.StopReason = EvAttemptDone, strArg(t, d, "summary", text), StopEndTurn
	case "compact-failed":
		ev.Kind, ev.Failure = EvAttemptFailed, parseFailure(t, d)
	case "compact-failed-raw":
		ev.Kind = EvAttemptFailed // no Failure at all
	case "tools":
		ev.Kind, ev.Results = EvToolResults, e.toolResults(d)
	case "verdict":
		ev.Kind, ev.VerdictMessage = EvStopHookVerdict, strArg(t, d, "msg", text)
		ev.Verdict = parseVerdict(t, d)
	case "cancel":
		ev.Kind, ev.Reason, ev.Text = EvCancelled, strArg(t, d, "reason", ""), text
	case "over-budget":
		ev.Kind, ev.Reason = EvBudgetExceeded, strArg(t, d, "reason", "")
		ev.RetryAfter = durArg(t, d, "retry-after", 0)
	default:
		return Event{}, false
	}
	ev.NotSent = d.HasArg("not-sent")
	return ev, true
}

func (e *env) toolResults(d *datadriven.TestData) []Block {
	halt, size := strArg(e.t, d, "halt", ""), intArg(e.t, d, "size", 0)
	var rs []Block
	for _, c := range e.last.Action.ToolCalls {
		text := "result of " + c.Name
		if size > 0 {
			text = blob(size)
		}
		rs = append(rs, Block{Kind: BlockToolResult, ToolUseID: c.ID, Text: text, Halt: c.ID == halt})
	}
	return rs
}

// show prints a step and checks the wire promises on it.
func (e *env) show(st Step) string {
	e.last = st
	e.wire.check(e.t, st)
	var sb strings.Builder
	if c := st.Checkpoint; c != nil {
		e.ckpt = roundTrip(e.t, c)
		fmt.Fprintf(&sb, "checkpoint %s turn=%d after #%d\n", c.Phase, c.Turn, c.Attempt)
	}
	if len(st.Void) > 0 {
		fmt.Fprintf(&sb, "void %s\n", renderAttempts(st.Void))
	}
	if len(st.Deliver) > 0 {
		var ds []string
		for _, d := range st.Deliver {
			s := "#" + strconv.Itoa(d.Attempt)
			if len(d.ToolCalls) > 0 {
				s += "(" + renderToolCalls(d.ToolCalls) + ")"
			}
			ds = append(ds, s)
		}
		fmt.Fprintf(&sb, "deliver %s\n", strings.Join(ds, " "))
	}
	for _, tr := range st.Transitions {
		sb.WriteString(renderTransition(tr))
		sb.WriteString("\n")
	}
	a := st.Action
	switch a.Kind {
	case ActCall, ActSummarize:
		sb.WriteString(e.renderCall(a))
	case ActWait:
		fmt.Fprintf(&sb, "wait %s\n", a.Delay)
	case ActAwaitTools:
		fmt.Fprintf(&sb, "await-tools %s\n", renderToolCalls(a.ToolCalls))
	case ActAwaitStopHook:
		fmt.Fprintf(&sb, "await-stop-hook answer=%s\n", short(a.Answer.Blocks[0].Text))
	case ActFinish:
		sb.WriteString(renderResult(a.Result))
	}
	return sb.String()
}

func (e *env) renderCall(a Action) string {
	c := a.Call
	verb := "call"
	if a.Kind == ActSummarize {
		verb = "summarize"
	}
	s := fmt.Sprintf("%s #%d %s max_tokens=%d", verb, c.Attempt, c.Route.Name, c.MaxTokens)
	if c.Prefill != "" {
		s += " prefill=" + short(c.Prefill)
	}
	s += "\n"
	if a.Kind == ActSummarize {
		return s + "  transcript: " + short(c.Messages[0].Blocks[0].Text) + "\n"
	}
	if !slices.EqualFunc(c.Messages, e.shown, messagesEqual) {
		s += "  msgs: " + renderMessages(c.Messages, 40, " | ") + "\n"
		e.shown = c.Messages
	}
	return s
}

func renderTransition(t Transition) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s #%d", t.Reason, t.Attempt)
	if t.Turn > 1 {
		fmt.Fprintf(&sb, " turn=%d", t.Turn)
	}
	if t.Terminal {
		sb.WriteString(" terminal")
	}
	if len(t.DiscardAttempts) > 0 {
		fmt.Fprintf(&sb, " discard=%v", t.DiscardAttempts)
	}
	if t.Retry > 0 {
		fmt.Fprintf(&sb, " retry=%d", t.Retry)
	}
	if t.Backoff > 0 {
		fmt.Fprintf(&sb, " backoff=%s", t.Backoff)
	}
	if t.Terminal {
		fmt.Fprintf(&sb, " route=%s", t.From.Name)
	} else {
		fmt.Fprintf(&sb, " %s→%s max_tokens=%d", t.From.Name, t.To.Name, t.MaxTokens)
	}
	if f := t.Failure; f != nil {
		fmt.Fprintf(&sb, " failure=%s", f.Kind)
		if f.HTTPStatus != 0 {
			fmt.Fprintf(&sb, "(%d)", f.HTTPStatus)
		}
	}
	if len(t.Stripped) > 0 {
		fmt.Fprintf(&sb, " stripped=%v", t.Stripped)
	}
	fmt.Fprintf(&sb, " — %s", t.Message)
	return sb.String()
}

func renderResult(r *Result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "finish %s stop=%s truncated=%t route=%s", r.Reason, r.StopReason, r.Truncated, r.Route.Name)
	if r.StopSequence != "" {
		fmt.Fprintf(&sb, " stop_sequence=%q", r.StopSequence)
	}
	sb.WriteString("\n")
	fmt.Fprintf(&sb, "  text: %s\n", shortN(r.Text, 120))
	if len(r.ToolCalls) > 0 {
		fmt.Fprintf(&sb, "  tool calls: %s\n", renderToolCalls(r.ToolCalls))
	}
	var as []string
	for _, a := range r.Attempts {
		o := map[Outcome]string{OutcomeAnswered: "answered", OutcomeDiscarded: "discarded", OutcomeFailed: "failed"}[a.Outcome]
		as = append(as, fmt.Sprintf("#%d %s %s", a.Attempt, a.Route.Name, o))
	}
	if len(as) == 0 {
		as = append(as, "none")
	}
	fmt.Fprintf(&sb, "  attempts: %s\n", strings.Join(as, ", "))
	fmt.Fprintf(&sb, "  usage: in=%d out=%d\n", r.Usage.InputTokens, r.Usage.OutputTokens)
	if r.Failure != nil {
		fmt.Fprintf(&sb, "  failure: %s\n", r.Failure.Error())
	}
	if r.Retryable {
		fmt.Fprintf(&sb, "  retryable after %s\n", r.RetryAfter)
	}
	if r.Transcript != nil {
		fmt.Fprintf(&sb, "  transcript: %s\n", renderMessages(r.Transcript, 40, " | "))
	}
	return sb.String()
}

func renderAttempts(as []int) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = "#" + strconv.Itoa(a)
	}
	return strings.Join(s, " ")
}

func renderToolCalls(cs []ToolCall) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.ID+":"+c.Name)
	}
	return strings.Join(s, ", ")
}

// renderMessages prints a conversation, one message per sep, texts cut to
// width bytes.
func renderMessages(msgs []Message, width int, sep string) string {
	var out []string
	for _, m := range msgs {
		var bs []string
		for _, b := range m.Blocks {
			bs = append(bs, renderTestBlock(b, width))
		}
		out = append(out, m.Role.String()+" "+strings.Join(bs, " + "))
	}
	return strings.Join(out, sep)
}

func renderTestBlock(b Block, width int) string {
	text := shortN(b.Text, width)
	switch b.Kind {
	case BlockImage, BlockDocument:
		s := "image"
		if b.Kind == BlockDocument {
			s = "document"
		}
		if b.URL != "" {
			s += " url"
		}
		return "[" + s + "]"
	case BlockToolUse:
		return fmt.Sprintf("tool_use(%s %s)", b.ToolUseID, b.ToolName)
	case BlockToolResult:
		return fmt.Sprintf("tool_result(%s %s)", b.ToolUseID, text)
	case BlockThinking:
		if b.Redacted {
			return fmt.Sprintf("redacted_thinking(%s)", b.Data)
		}
		return fmt.Sprintf("thinking(%s %s)", text, b.Signature)
	}
	return text
}

func short(s string) string { return shortN(s, 40) }

// shortN quotes s, cut to about n bytes with its full length noted.
func shortN(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…(%d bytes)", s[:cut], len(s))
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func messagesEqual(a, b Message) bool {
	return a.Role == b.Role && slices.EqualFunc(a.Blocks, b.Blocks, func(x, y Block) bool {
		return x.Kind == y.Kind && x.Text == y.Text && x.ToolUseID == y.ToolUseID && x.URL == y.URL &&
			x.Signature == y.Signature && x.Redacted == y.Redacted && string(x.Data) == string(y.Data)
	})
}

func parseRoutes(t testing.TB, d *datadriven.TestData) []Route {
	arg, ok := d.Arg("routes")
	if !ok {
		return []Route{{Name: "a", Provider: "sim", Model: "a"}}
	}
	if arg.Vals[0] == "none" {
		return nil
	}
	var rs []Route
	for _, spec := range arg.Vals {
		fields := strings.Split(strings.TrimSpace(spec), ":")
		r := Route{Name: fields[0], Provider: "sim", Model: fields[0]}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "prefill":
				r.Prefill = true
			case "thinking":
				r.Thinking = true
			case "w":
				r.ContextWindow = atoi(t, v)
			case "max":
				r.MaxOutputTokens = atoi(t, v)
			default:
				t.Fatalf("%s: bad route option %q", d.Pos, f)
			}
		}
		rs = append(rs, r)
	}
	return rs
}

func parseMessages(t testing.TB, input string) []Message {
	if strings.TrimSpace(input) == "" {
		return []Message{UserText("Write a poem")}
	}
	var msgs []Message
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		role, rest, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("bad message line %q", line)
		}
		m := Message{Role: RoleUser}
		if strings.TrimSpace(role) == "assistant" {
			m.Role = RoleAssistant
		}
		for _, item := range strings.Split(rest, "|") {
			m.Blocks = append(m.Blocks, parseBlock(t, strings.TrimSpace(item)))
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func parseBlock(t testing.TB, item string) Block {
	switch {
	case item == "img":
		return Block{Kind: BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")}
	case item == "img-url":
		return Block{Kind: BlockImage, URL: "https://example.com/cat.png"}
	case item == "doc":
		return Block{Kind: BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF-1.7"), Title: "report"}
	case item == "doc-url":
		return Block{Kind: BlockDocument, URL: "https://example.com/paper.pdf"}
	case strings.HasPrefix(item, "blob:"):
		return TextBlock(blob(atoi(t, strings.TrimPrefix(item, "blob:"))))
	case strings.HasPrefix(item, "tool_use:"):
		f := strings.SplitN(item, ":", 3)
		return Block{Kind: BlockToolUse, ToolUseID: f[1], ToolName: f[2], ToolInput: []byte("{}")}
	case strings.HasPrefix(item, "thinking:"), strings.HasPrefix(item, "redacted:"):
		return parseThinking(item)
	case strings.HasPrefix(item, "tool_result:"):
		f := strings.SplitN(item, ":", 3)
		b := parseBlock(t, f[2])
		return Block{Kind: BlockToolResult, ToolUseID: f[1], Text: b.Text}
	}
	return TextBlock(item)
}

// parseThinking reads a thinking block: TEXT:SIG (or thinking:TEXT:SIG),
// or redacted:DATA.
func parseThinking(v string) Block {
	if data, ok := strings.CutPrefix(v, "redacted:"); ok {
		return Block{Kind: BlockThinking, Redacted: true, Data: []byte(data)}
	}
	text, sig, _ := strings.Cut(strings.TrimPrefix(v, "thinking:"), ":")
	return Block{Kind: BlockThinking, Text: text, Signature: sig}
}

// blob returns n bytes of filler text.
func blob(n int) string { return strings.Repeat("lorem ipsum ", n/12+1)[:n] }

func parseFailure(t testing.TB, d *datadriven.TestData) *Failure {
	kind := strArg(t, d, "kind", "unknown")
	i := slices.Index(failureKindNames[:], kind)
	if i < 0 {
		t.Fatalf("%s: unknown failure kind %q", d.Pos, kind)
	}
	f := &Failure{
		Kind:          FailureKind(i),
		Provider:      "sim",
		HTTPStatus:    intArg(t, d, "status", 0),
		Message:       strArg(t, d, "msg", ""),
		RetryAfter:    durArg(t, d, "retry-after", 0),
		InputTokens:   intArg(t, d, "x", 0),
		MaxTokens:     intArg(t, d, "y", 0),
		ContextWindow: intArg(t, d, "z", intArg(t, d, "window", 0)),
		PromptTokens:  intArg(t, d, "prompt", 0),
		Silence:       durArg(t, d, "silence", 0),
	}
	for _, v := range listArg(d, "blocks") {
		msg, blk, _ := strings.Cut(v, ".")
		f.MediaBlocks = append(f.MediaBlocks, BlockRef{Message: atoi(t, msg), Block: atoi(t, blk)})
	}
	switch strArg(t, d, "should-retry", "") {
	case "true":
		f.ShouldRetry = 1
	case "false":
		f.ShouldRetry = -1
	}
	return f
}

func parseStop(t testing.TB, s string) StopReason {
	i := slices.Index(stopReasonNames[:], s)
	if i < 0 {
		t.Fatalf("unknown stop reason %q", s)
	}
	return StopReason(i)
}

// listArg returns the values of a list argument such as open=(a, b).
func listArg(d *datadriven.TestData, key string) []string {
	arg, ok := d.Arg(key)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range arg.Vals {
		out = append(out, strings.TrimSpace(v))
	}
	return out
}

func parseToolCalls(t testing.TB, d *datadriven.TestData) []ToolCall {
	arg, ok := d.Arg("tools")
	if !ok {
		return nil
	}
	var cs []ToolCall
	for _, v := range arg.Vals {
		id, name, _ := strings.Cut(strings.TrimSpace(v), ":")
		cs = append(cs, ToolCall{ID: id, Name: name, Input: []byte("{}")})
	}
	return cs
}

func parseVerdict(t testing.TB, d *datadriven.TestData) Verdict {
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "allow":
			return VerdictAllow
		case "block":
			return VerdictBlock
		case "prevent":
			return VerdictPrevent
		case "bogus":
			return Verdict(99)
		}
	}
	t.Fatalf("%s: verdict needs allow, block or prevent", d.Pos)
	return 0
}

func strArg(t testing.TB, d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok {
		return strings.Join(a.Vals, ", ")
	}
	return def
}

func intArg(t testing.TB, d *datadriven.TestData, key string, def int) int {
	if a, ok := d.Arg(key); ok {
		return atoi(t, a.SingleVal(t))
	}
	return def
}

func floatArg(t testing.TB, d *datadriven.TestData, key string, def float64) float64 {
	if a, ok := d.Arg(key); ok {
		f, err := strconv.ParseFloat(a.SingleVal(t), 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	return def
}

func durArg(t testing.TB, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	if a, ok := d.Arg(key); ok {
		v, err := time.ParseDuration(a.SingleVal(t))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return def
}

func atoi(t testing.TB, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// expandBlob turns a text of the form BLOBn into n bytes of filler, so a
// transcript can make an answer bulky.
func expandBlob(t testing.TB, s string) string {
	if n, ok := strings.CutPrefix(s, "BLOB"); ok {
		return blob(atoi(t, n))
	}
	return s
}
