package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/client"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Sessions under the fleet's chaos. Some of TestFleetChaos's callers run
// resumable Sessions instead of Streams: the sim calls a tool in the first
// turn, the caller sends its result, the next turn answers, and the caller,
// registered as the stop hook, judges that answer. When a call breaks, the
// caller resumes the Session through another replica after the last seq it
// received and sends again the answers no transition confirmed, as the
// client libraries do (docs/api.md, Resumable completions). Besides the
// Stream's promises, a Session must ask for each tool result and verdict
// under an id of its own, take each once — its transcript holds each tool
// result once, and the block verdict took effect once — and end COMPLETED.

// chaosSessionCaller reports whether caller i runs Sessions: every third
// (3 of the 10), so that the load stays about the Streams'.
func chaosSessionCaller(i int) bool { return i%3 == 2 }

// chaosSessionKind is what one Session completion asks of its caller.
type chaosSessionKind struct {
	name string
	// route: sim continues a broken turn by prefill (STREAM_RESUME),
	// sim-noprefill starts it again (RETRY).
	route string
	// block: the stop hook blocks the first answer, with chaosBlockMessage,
	// and allows the next (STOP_HOOK_BLOCKING once, then COMPLETED);
	// otherwise it allows the first.
	block bool
}

// chaosSessionKinds alternate in each Session caller's completions. The
// block goes with sim-noprefill: the answer after a block is the sim's
// extension of its whole answer, which it cannot continue by prefill (it
// would start it again), so a STREAM_RESUME there would change the text
// though nothing broke.
var chaosSessionKinds = []chaosSessionKind{
	{name: "session-allow", route: "sim"},
	{name: "session-block", route: "sim-noprefill", block: true},
}

// chaosBlockMessage is the block verdict's message to the model.
const chaosBlockMessage = "Cite a source for it."

// chaosToolPreamble is what the sim says before its tool call
// (provider/sim's toolPreamble). The Session's reply (sim.reply) begins
// with it and then a space token, so that a turn after the tool call, or
// a takeover before it, continues the reply from what the conversation
// holds: the text is the same whichever way the turns went.
const chaosToolPreamble = "Let me check. "

// chaosSessionKey names one Session caller's kind of completion.
type chaosSessionKey struct {
	caller int
	kind   string
}

// chaosSession is a Session completion's caller's side, across its calls.
type chaosSession struct {
	kind chaosSessionKind
	// rng draws how long the caller runs a tool or judges an answer; nil:
	// it answers at once.
	rng *rand.Rand
	// answered counts the answers sent to each tool call and stop-hook
	// request ("call:ID", "hook:ID"), resends after a resume not counted.
	answered map[string]int
	// results are the tool results sent, by call id.
	results map[string]string
	// unconfirmed are the answers sent since the last transition, sent
	// again after a resume: the Session decides nothing before it has
	// them, so a transition after them says they arrived.
	unconfirmed []*completionv1.SessionRequest
	resent      int
	// sent is what the caller sent, one a line, for a failure's report.
	sent []string
}

// newChaosSession is the caller's side of a Session of kind, before its
// start.
func newChaosSession(kind chaosSessionKind, rng *rand.Rand) *chaosSession {
	return &chaosSession{kind: kind, rng: rng, answered: map[string]int{}, results: map[string]string{}}
}

// think is how long the caller takes to answer m: up to a second to run a
// tool, half a second to judge an answer, as a caller would. The chaos
// then often finds the Session awaiting its caller (a takeover from the
// checkpoint), or an answer sent and not yet confirmed (sent again after
// the resume).
func (s *chaosSession) think(m *completionv1.SessionRequest) time.Duration {
	if s.rng == nil {
		return 0
	}
	if m.GetToolResults() != nil {
		return time.Duration(s.rng.Int64N(int64(time.Second)))
	}
	return time.Duration(s.rng.Int64N(int64(500 * time.Millisecond)))
}

// chaosSessionStart is caller i's Session start of kind, its reply the
// tool preamble and then the caller's Stream answer (want).
func chaosSessionStart(i int, kind chaosSessionKind, want, pace, key string) *completionv1.SessionStart {
	return &completionv1.SessionStart{StopHook: true, Request: &completionv1.CompleteRequest{
		Route:    kind.route,
		Messages: chaosPrompt(i),
		Tools:    []*completionv1.Tool{{Name: "search", Description: "searches"}},
		Metadata: map[string]string{"sim.faults": "tool_use", "sim.pace": pace,
			"sim.reply": chaosToolPreamble + " " + want},
		ResumeGrace:    durationpb.New(30 * time.Second),
		IdempotencyKey: key,
	}}
}

// sessionAnswers are the Session callers' whole answers of each kind, from
// an uninterrupted Session before the chaos, each held to the checks the
// chaos's are (a Session that does not keep them without chaos says the
// test, not the fleet, is wrong).
func (f *chaosFleet) sessionAnswers(wants []string) map[chaosSessionKey]string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[chaosSessionKey]string{}
	for i := range chaosCallers {
		if !chaosSessionCaller(i) {
			continue
		}
		for _, kind := range chaosSessionKinds {
			s := newChaosSession(kind, nil)
			c := &chaosCompletion{caller: i, session: s}
			start := chaosSessionStart(i, kind, wants[i], "1ms", "")
			_, _, err := f.sessionCall(ctx, f.slots[0].cur, c, s, start)
			if !errors.Is(err, io.EOF) || len(c.events) == 0 || c.events[len(c.events)-1].GetResult() == nil {
				f.t.Fatalf("caller %d's uninterrupted %s: %v\n%s", i, kind.name, err, chaosEvents(c.events))
			}
			want := resultText(c.events[len(c.events)-1].GetResult())
			// The reply whole; after a block, the preamble and the sim's
			// extension of the reply (the blocked answer discarded).
			replied := want == start.GetRequest().GetMetadata()["sim.reply"]
			if kind.block {
				replied = strings.HasPrefix(want, chaosToolPreamble+" More:")
			}
			if bad := f.whole(c, want) + s.whole(c); bad != "" || len(s.results) != 1 || !replied {
				f.t.Fatalf("caller %d's uninterrupted %s (%d tool calls, the reply as expected: %v): %s\n%s", i, kind.name, len(s.results), replied, bad, chaosEvents(c.events))
			}
			out[chaosSessionKey{i, kind.name}] = want
		}
	}
	return out
}

// session runs c, a Session of the kind its turn among chaosSessionKinds
// says, to its end as complete runs a Stream: started through a random
// replica, resumed through another after the last seq received when a
// call breaks (started again with its idempotency key while no event
// came); then holds it to the Session's promises too.
func (f *chaosFleet) session(rng *rand.Rand, c *chaosCompletion, streamWant string) {
	kind := chaosSessionKinds[(c.caller+c.n)%len(chaosSessionKinds)]
	s := newChaosSession(kind, rng)
	c.session = s
	want := f.sessionWants[chaosSessionKey{c.caller, kind.name}]
	start := chaosSessionStart(c.caller, kind, streamWant, "20ms", c.key)
	f.drive(rng, c, want, func(r *chaosReplica) (chaosCall, bool, error) { return f.sessionCall(f.ctx, r, c, s, start) })
	if c.failure == "" && len(c.events) > 0 && c.events[len(c.events)-1].GetResult() != nil {
		c.failure = s.whole(c)
	}
	if c.failure != "" {
		c.failure += "\nwhat the caller sent:\n" + strings.Join(s.sent, "")
	}
}

// sessionCall makes one Session call of c through r, under parent — its
// start when no event came yet, else a resume after the last seq received
// followed by the unconfirmed answers — answers what the Session asks as
// its events come, and adds them to c's. hung and err are as call's.
func (f *chaosFleet) sessionCall(parent context.Context, r *chaosReplica, c *chaosCompletion, s *chaosSession, start *completionv1.SessionStart) (call chaosCall, hung bool, err error) {
	call = chaosCall{via: r.label, kind: "start", at: f.since(time.Now())}
	first := &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: start}}
	if c.id != "" {
		call.kind, call.after = "resume", c.events[len(c.events)-1].GetSeq()
		first = &completionv1.SessionRequest{Request: &completionv1.SessionRequest_Resume{Resume: &completionv1.SessionResume{
			CompletionId: c.id, AfterSeq: call.after}}}
	}
	idle := idleOf(call.kind)
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	watchdog := time.AfterFunc(idle, func() { cancel(errChaosHang) })
	defer watchdog.Stop()
	st, err := r.rpc.Session(ctx)
	if err == nil {
		// A failed send says only that the stream is gone: Recv tells how.
		_ = st.Send(first)
		if call.kind == "resume" {
			for _, m := range s.unconfirmed {
				s.note(call, "again: "+chaosAnswerText(m))
				s.resent++
				_ = st.Send(m)
			}
		}
	}
	for err == nil {
		var ev *completionv1.CompletionEvent
		if ev, err = st.Recv(); err != nil {
			break
		}
		watchdog.Reset(idle)
		c.events = append(c.events, ev)
		call.events++
		if id := ev.GetStarted().GetCompletionId(); id != "" && c.id == "" {
			c.id = id
		}
		if ev.GetTransition() != nil {
			s.unconfirmed = nil
		}
		if m := s.answer(c, ev); m != nil {
			chaosSleep(ctx, s.think(m))
			s.note(call, chaosAnswerText(m))
			s.unconfirmed = append(s.unconfirmed, m)
			_ = st.Send(m)
		}
	}
	hung = errors.Is(context.Cause(ctx), errChaosHang)
	call.took = f.since(time.Now()) - call.at
	call.end = chaosCallEnd(err)
	return call, hung, err
}

// answer is the caller's answer to ev (nil when ev asks for none): a tool
// call's result, or a stop-hook verdict — a block while the Session has
// blocked no answer yet when its kind blocks, an allow otherwise.
func (s *chaosSession) answer(c *chaosCompletion, ev *completionv1.CompletionEvent) *completionv1.SessionRequest {
	if tc := ev.GetToolCall(); tc != nil {
		s.answered["call:"+tc.GetId()]++
		s.results[tc.GetId()] = fmt.Sprintf("the search for caller %d's completion %d (%s)", c.caller, c.n, tc.GetId())
		return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_ToolResults{ToolResults: &completionv1.ToolResults{
			Results: []*completionv1.ToolResultBlock{{ToolUseId: tc.GetId(), Text: s.results[tc.GetId()]}}}}}
	}
	hr := ev.GetStopHookRequest()
	if hr == nil {
		return nil
	}
	s.answered["hook:"+hr.GetHookId()]++
	v := &completionv1.StopHookVerdict{HookId: hr.GetHookId(), Verdict: completionv1.Verdict_VERDICT_ALLOW}
	if s.kind.block && countReason(c.events, completionv1.TransitionReason_TRANSITION_REASON_STOP_HOOK_BLOCKING) == 0 {
		v.Verdict, v.Message = completionv1.Verdict_VERDICT_BLOCK, chaosBlockMessage
	}
	return &completionv1.SessionRequest{Request: &completionv1.SessionRequest_StopHookVerdict{StopHookVerdict: v}}
}

// note records what the caller sent in call, after the last seq it had.
func (s *chaosSession) note(call chaosCall, what string) {
	s.sent = append(s.sent, fmt.Sprintf("    %8s via %-4s %s\n", call.at, call.via, what))
}

// chaosAnswerText is an answer, shortly.
func chaosAnswerText(m *completionv1.SessionRequest) string {
	if v := m.GetStopHookVerdict(); v != nil {
		return fmt.Sprintf("verdict %s for %s", v.GetVerdict(), v.GetHookId())
	}
	var ids []string
	for _, r := range m.GetToolResults().GetResults() {
		ids = append(ids, r.GetToolUseId())
	}
	return "tool results for " + strings.Join(ids, ", ")
}

// whole checks the Session's own promises on a completion that whole found
// whole: turns never go backwards; each tool call and stop-hook request
// came once, under an id of its own, and was answered once; the result's
// transcript holds each call and its result once (asked, transcript); a
// turn followed each tool result (NEXT_TURN), the block took effect once
// when the kind blocks and never otherwise, and the answer the last
// verdict allowed is its turn's kept text. It returns what is broken, or
// "".
func (s *chaosSession) whole(c *chaosCompletion) string {
	calls, lastHook, bad := s.asked(c.events)
	if bad != "" {
		return bad
	}
	if bad := s.transcript(c.events[len(c.events)-1].GetResult(), calls); bad != "" {
		return bad
	}
	if n := countReason(c.events, completionv1.TransitionReason_TRANSITION_REASON_NEXT_TURN); n != len(calls) {
		return fmt.Sprintf("%d NEXT_TURN transitions after %d tool calls: want a turn after each result", n, len(calls))
	}
	if n := countReason(c.events, completionv1.TransitionReason_TRANSITION_REASON_STOP_HOOK_BLOCKING); n != s.blocks() {
		return fmt.Sprintf("%d STOP_HOOK_BLOCKING transitions: the caller's block took effect %d times, want %d", n, n, s.blocks())
	}
	if lastHook == nil {
		return "no stop-hook request: the caller allowed no answer"
	}
	if judged, kept := messageText(lastHook.GetStopHookRequest().GetAnswer()), turnText(c.events, lastHook); judged != kept {
		return fmt.Sprintf("the last stop-hook request judged %q, its turn's kept text is %q", judged, kept)
	}
	return ""
}

// asked checks what evs asked of the caller: turns never go backwards, and
// each tool call and stop-hook request came once and was answered once. It
// returns the tool calls by id and the last stop-hook request's event.
func (s *chaosSession) asked(evs []*completionv1.CompletionEvent) (calls map[string]int, lastHook *completionv1.CompletionEvent, bad string) {
	var turn int32
	calls, hooks := map[string]int{}, map[string]int{}
	for _, ev := range evs {
		if ev.GetTurn() < turn {
			return nil, nil, fmt.Sprintf("seq %d is of turn %d, after turn %d: turns went backwards", ev.GetSeq(), ev.GetTurn(), turn)
		}
		turn = ev.GetTurn()
		if tc := ev.GetToolCall(); tc != nil {
			calls[tc.GetId()]++
		}
		if hr := ev.GetStopHookRequest(); hr != nil {
			hooks[hr.GetHookId()]++
			lastHook = ev
		}
	}
	for id, n := range calls {
		if n != 1 || s.answered["call:"+id] != 1 {
			return nil, nil, fmt.Sprintf("tool call %s came %d times and was answered %d times: want once each", id, n, s.answered["call:"+id])
		}
	}
	for id, n := range hooks {
		if n != 1 || s.answered["hook:"+id] != 1 {
			return nil, nil, fmt.Sprintf("stop-hook request %s came %d times and was answered %d times: want once each", id, n, s.answered["hook:"+id])
		}
	}
	return calls, lastHook, ""
}

// blocks is how many blocks the caller's verdicts make take effect: one
// when its kind blocks.
func (s *chaosSession) blocks() int {
	if s.kind.block {
		return 1
	}
	return 0
}

// transcript checks the result's transcript against the tool calls the
// Session sent (calls) and the results the caller sent: each call's
// tool_use once, its tool_result once with the text sent, nothing else;
// and the block message once when the kind blocks.
func (s *chaosSession) transcript(res *completionv1.Result, calls map[string]int) string {
	uses, results := map[string]int{}, map[string][]string{}
	blocked := 0
	for _, m := range res.GetTranscript() {
		for _, b := range m.GetContent() {
			if u := b.GetToolUse(); u != nil {
				uses[u.GetId()]++
			}
			if r := b.GetToolResult(); r != nil {
				results[r.GetToolUseId()] = append(results[r.GetToolUseId()], r.GetText())
			}
			if m.GetRole() == completionv1.Role_ROLE_USER && strings.Contains(b.GetText().GetText(), chaosBlockMessage) {
				blocked++
			}
		}
	}
	for id, n := range uses {
		if n != 1 || calls[id] != 1 {
			return fmt.Sprintf("the transcript holds tool call %s %d times; the Session sent it %d times", id, n, calls[id])
		}
	}
	for id := range calls {
		if uses[id] != 1 {
			return fmt.Sprintf("tool call %s, sent to the caller, is not in the transcript", id)
		}
		if got := results[id]; len(got) != 1 || got[0] != s.results[id] {
			return fmt.Sprintf("the transcript's results for tool call %s are %q: want once %q, the one sent", id, got, s.results[id])
		}
	}
	for id, got := range results {
		if calls[id] != 1 {
			return fmt.Sprintf("the transcript holds results %q for tool call %s, which the Session never sent", got, id)
		}
	}
	if blocked != s.blocks() {
		return fmt.Sprintf("the transcript holds the block message %d times, want %d", blocked, s.blocks())
	}
	return ""
}

// turnText is the kept text of ev's turn, as a caller folds evs up to ev.
func turnText(evs []*completionv1.CompletionEvent, ev *completionv1.CompletionEvent) string {
	var f client.Fold
	for _, e := range evs {
		f.Add(e)
		if e == ev {
			break
		}
	}
	for _, t := range f.Turns() {
		if t.Turn == ev.GetTurn() {
			return t.Text
		}
	}
	return ""
}

// countReason is how many of evs are transitions for reason.
func countReason(evs []*completionv1.CompletionEvent, reason completionv1.TransitionReason) int {
	n := 0
	for _, ev := range evs {
		if ev.GetTransition() != nil && ev.GetTransition().GetReason() == reason {
			n++
		}
	}
	return n
}

// messageText is m's text.
func messageText(m *completionv1.Message) string {
	return resultText(&completionv1.Result{Message: m})
}

// reportSessions tells what the Session callers met: their completions,
// the tool calls and stop-hook requests answered, the resumes (those that
// went on through another replica while the Session awaited its caller:
// a takeover from its checkpoint, with no transition), the answers sent
// again after one, and the takeovers mid-turn.
func (f *chaosFleet) reportSessions(done []*chaosCompletion) {
	var n, calls, hooks, resumes, awaiting, resent, takeovers int
	for _, c := range done {
		if c.session == nil {
			continue
		}
		n++
		for k := range c.session.answered {
			if strings.HasPrefix(k, "call:") {
				calls++
			} else {
				hooks++
			}
		}
		for i, call := range c.calls {
			if call.kind == "resume" {
				resumes++
				if call.events > 0 && call.via != c.calls[i-1].via && chaosAsks(c.events, call.after) {
					awaiting++
				}
			}
		}
		resent += c.session.resent
		for _, ev := range c.events {
			if ev.GetTransition().GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_REPLICA_LOST {
				takeovers++
				break
			}
		}
	}
	f.t.Logf("fleet chaos, seed %d: %d Sessions: %d tool calls and %d stop-hook requests answered, %d resumes (%d went on through another replica while the Session awaited its caller), %d answers sent again after one, %d taken over mid-turn (REPLICA_LOST)",
		f.seed, n, calls, hooks, resumes, awaiting, resent, takeovers)
}

// chaosAsks reports whether the event of seq in evs asks the caller for
// something: a tool call or a stop-hook request.
func chaosAsks(evs []*completionv1.CompletionEvent, seq uint64) bool {
	for _, ev := range evs {
		if ev.GetSeq() == seq {
			return ev.GetToolCall() != nil || ev.GetStopHookRequest() != nil
		}
	}
	return false
}
