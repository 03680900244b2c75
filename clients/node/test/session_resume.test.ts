// A Session with resumeGrace resumes after a drop: a new call whose first
// message is resume (completion id, last seq), then every answer and Cancel
// sent since the last transition received, sent again. Over fake calls:
// each leg plays its events and ends with its status, recording what the
// loop wrote to it and after which event.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  CancelSession,
  CompletiondError,
  CompletionEvent,
  GrpcStatus,
  type ReconnectPolicy,
  type SessionHandlers,
  SessionRequest,
  SessionStart,
  TransitionReason,
  Verdict,
  runSessionOver,
  userText,
} from "../src/index";
import { Events, detailsBin } from "./build";
import { FakeSessions, type Leg, type Sent } from "./fakes";

const R = TransitionReason;
// The whole backoff every time (random 1): the pauses, and so the counts of
// reconnects within a window, are then fixed.
const FAST: ReconnectPolicy = { initialBackoffMs: 1, maxBackoffMs: 4, windowMs: 5_000, random: () => 1 };
const DROP = { code: GrpcStatus.UNAVAILABLE, message: "Connection dropped" };
const OK = { code: 0 };

function start(graceSeconds = 60, idempotencyKey = ""): SessionStart {
  return SessionStart.fromPartial({
    request: { messages: [userText("weather?")], idempotencyKey, ...(graceSeconds > 0 ? { resumeGrace: { seconds: graceSeconds, nanos: 0 } } : {}) },
    stopHook: true,
  });
}

const resume = (afterSeq: number) => SessionRequest.fromPartial({ resume: { completionId: "cmpl_s", afterSeq } });
const result = (id: string) => SessionRequest.fromPartial({ toolResults: { results: [{ toolUseId: id, text: "sunny" }] } });
const requests = (s: Sent[]) => s.map((x) => x.request);

/** run drives the loop over legs; it records the seqs the handlers saw and the tools they ran. */
async function run(legs: Leg[], opts: { grace?: number; key?: string; policy?: ReconnectPolicy; handlers?: Partial<SessionHandlers>; signal?: AbortSignal; noReconnect?: boolean } = {}) {
  const src = new FakeSessions(legs);
  const seen: number[] = [];
  const ran: string[] = [];
  const handlers: SessionHandlers = {
    onToolCall: (call) => {
      ran.push(call.id);
      return "sunny";
    },
    ...opts.handlers,
    onEvent: async (ev, fold) => {
      seen.push(ev.seq);
      await opts.handlers?.onEvent?.(ev, fold);
    },
  };
  const reconnect = opts.noReconnect ? undefined : { open: () => src.open(), policy: opts.policy ?? FAST };
  let fold;
  let err: CompletiondError | undefined;
  try {
    fold = await runSessionOver(src.open(), start(opts.grace, opts.key), handlers, opts.signal, reconnect);
  } catch (e) {
    assert.ok(e instanceof CompletiondError, `not a CompletiondError: ${e}`);
    err = e;
  }
  return { src, seen, ran, fold, err };
}

/** turn2 is turn 2 after a tool call: NEXT_TURN, the answer, COMPLETED, the result. */
function turn2(e: Events, answer = "Sunny."): CompletionEvent[] {
  return [e.transition(1, R.TRANSITION_REASON_NEXT_TURN, { turn: 1 }), e.text(2, answer, 2), e.completed(2, 2), e.result(2, answer, 2)];
}

describe("runSessionOver resumes a Session with resumeGrace after a drop", { timeout: 10_000 }, () => {
  test("a drop while a tool result is awaited: resume after the last seq, the result sent again, the tool run once", async () => {
    const e = new Events();
    const first = [e.started("cmpl_s"), e.text(1, "Let me check. "), e.toolCall(1, "toolu_1")];
    const { src, seen, ran, fold, err } = await run([{ events: first, end: DROP }, { events: turn2(e), end: OK }]);
    assert.equal(err, undefined);
    assert.equal(src.calls.length, 2);
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(3), result("toolu_1")]);
    assert.deepEqual(ran, ["toolu_1"]);
    assert.deepEqual(seen, [1, 2, 3, 4, 5, 6, 7]);
    assert.equal(fold?.text, "Let me check. Sunny.");
    assert.equal(src.calls[1]!.ended, true, "the resumed call is half-closed after the result");
  });

  test("a start with an idempotencyKey that drops before started is sent again with it; a refusal is not", async () => {
    for (const grace of [0, 60]) {
      const e = new Events();
      const evs = [e.started("cmpl_s"), e.text(1, "Sunny."), e.completed(1, 1), e.result(1, "Sunny.", 1)];
      const { src, fold, err } = await run([{ events: [], end: DROP }, { events: evs, end: OK }], { grace, key: "k1" });
      assert.equal(err, undefined);
      assert.equal(src.calls.length, 2);
      assert.deepEqual(requests(src.calls[1]!.sent)[0], SessionRequest.fromPartial({ start: start(grace, "k1") }));
      assert.equal(fold?.text, "Sunny.");
    }
    const overloaded = detailsBin(14, "overloaded", { reason: "OVERLOADED" });
    const refused = await run([{ events: [], end: { code: GrpcStatus.UNAVAILABLE, message: "x", detailsBin: overloaded } }], { key: "k1" });
    assert.equal(refused.err?.reason, "OVERLOADED");
    assert.equal(refused.src.calls.length, 1);
  });

  test("a transition confirms the answers before it: after a drop in turn 2 nothing is sent again", async () => {
    const e = new Events();
    const evs = [e.started("cmpl_s"), e.toolCall(1, "toolu_1"), ...turn2(e, "Sunny.")];
    const { src, fold, err } = await run([{ events: evs.slice(0, 4), end: DROP }, { events: evs.slice(4), end: OK }]);
    assert.equal(err, undefined);
    assert.deepEqual(requests(src.calls[0]!.sent).slice(1), [result("toolu_1")]);
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(4)]);
    assert.equal(fold?.text, "Sunny.");
  });

  test("every answer since the last transition is sent again, in order, at each resume", async () => {
    const e = new Events();
    const first = [e.started("cmpl_s"), e.toolCall(1, "toolu_1"), e.toolCall(1, "toolu_2")];
    const { src, ran, err } = await run([
      { events: first, end: DROP },
      { events: [], end: DROP }, // down again before anything came
      { events: turn2(e), end: OK },
    ]);
    assert.equal(err, undefined);
    assert.deepEqual(ran, ["toolu_1", "toolu_2"]);
    for (const call of src.calls.slice(1)) {
      assert.deepEqual(requests(call.sent), [resume(3), result("toolu_1"), result("toolu_2")]);
    }
  });

  test("events the resumed call repeats are neither shown again nor answered", async () => {
    const e = new Events();
    const evs = [e.started("cmpl_s"), e.toolCall(1, "toolu_1"), ...turn2(e)];
    const { src, seen, ran, err } = await run([{ events: evs.slice(0, 3), end: DROP }, { events: evs.slice(1), end: OK }]);
    assert.equal(err, undefined);
    assert.deepEqual(seen, [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(ran, ["toolu_1"]);
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(3)], "the answer was confirmed by NEXT_TURN; the repeated call not answered");
  });

  test("a stop-hook verdict is sent again", async () => {
    const e = new Events();
    const first = [e.started("cmpl_s"), e.text(1, "Hi."), e.ev(1, 1, { stopHookRequest: { hookId: "hook_1" } })];
    const rest = [e.completed(1), e.result(1, "Hi.")];
    const { src, err } = await run([{ events: first, end: DROP }, { events: rest, end: OK }], {
      handlers: { onStopHook: () => ({ verdict: Verdict.VERDICT_BLOCK, message: "Cite." }) },
    });
    assert.equal(err, undefined);
    const verdict = SessionRequest.fromPartial({ stopHookVerdict: { hookId: "hook_1", verdict: Verdict.VERDICT_BLOCK, message: "Cite." } });
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(3), verdict]);
  });

  test("a Cancel is sent again, and nothing is answered after it", async () => {
    const e = new Events();
    const first = [e.started("cmpl_s"), e.toolCall(1, "toolu_1")];
    const rest = [e.transition(1, R.TRANSITION_REASON_ABORTED_TOOLS, { terminal: true }), e.result(1, "", 1, R.TRANSITION_REASON_ABORTED_TOOLS)];
    const bin = detailsBin(1, "completion ended ABORTED_TOOLS", { reason: "ABORTED_TOOLS" });
    const { src, ran, err } = await run(
      [{ events: first, end: DROP }, { events: [first[1]!, ...rest], end: { code: GrpcStatus.CANCELLED, message: "completion ended ABORTED_TOOLS", detailsBin: bin } }],
      {
        handlers: {
          onEvent: (ev) => {
            if (ev.toolCall !== undefined) throw new CancelSession("stop");
          },
        },
      },
    );
    assert.deepEqual(ran, []);
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(2), SessionRequest.fromPartial({ cancel: { reason: "stop" } })]);
    assert.equal(err?.codeName, "CANCELLED");
    assert.equal(err?.terminalReason, R.TRANSITION_REASON_ABORTED_TOOLS);
  });

  test("aborting the signal while the call is down: the Cancel goes with the resume", async () => {
    const e = new Events();
    const ac = new AbortController();
    const first = [e.started("cmpl_s"), e.toolCall(1, "toolu_1"), e.transition(1, R.TRANSITION_REASON_NEXT_TURN), e.text(2, "Sun", 2)];
    const rest = [e.transition(2, R.TRANSITION_REASON_ABORTED_STREAMING, { terminal: true, turn: 2 }), e.result(2, "", 2, R.TRANSITION_REASON_ABORTED_STREAMING)];
    const legs: Leg[] = [{ events: first, end: DROP }, { events: rest, end: { code: GrpcStatus.CANCELLED, message: "completion ended ABORTED_STREAMING" } }];
    const src = new FakeSessions(legs);
    const reconnect = {
      open: () => {
        ac.abort("the user left"); // while no call is up: the Cancel goes to the broken one, so it is sent again
        return src.open();
      },
      policy: FAST,
    };
    await assert.rejects(
      runSessionOver(src.open(), start(), { onToolCall: () => "sunny" }, ac.signal, reconnect),
      (err: unknown) => err instanceof CompletiondError && err.codeName === "CANCELLED",
    );
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(4), SessionRequest.fromPartial({ cancel: { reason: "the user left" } })]);
  });

  test("an end without a result resumes too", async () => {
    const e = new Events();
    const first = [e.started("cmpl_s"), e.toolCall(1, "toolu_1")];
    const { src, err } = await run([{ events: first, end: OK }, { events: turn2(e), end: OK }]);
    assert.equal(err, undefined);
    assert.deepEqual(requests(src.calls[1]!.sent), [resume(2), result("toolu_1")]);
  });

  test("no resume: without reconnect, without a grace, before started, after the result, another code, a final status with ErrorInfo", async () => {
    const e = new Events();
    const evs = [e.started("cmpl_s"), e.toolCall(1, "toolu_1"), e.completed(1), e.result(1, "")];
    // Any code but UNAVAILABLE is final (clients/testdata/reconnect.json).
    const decided = detailsBin(9, "cannot continue it here", { reason: "TAKEOVER_FAILED" });
    const cases: [string, Leg, { grace?: number; noReconnect?: boolean }, string][] = [
      ["without reconnect", { events: evs.slice(0, 2), end: DROP }, { noReconnect: true }, "UNAVAILABLE"],
      ["without a grace", { events: evs.slice(0, 2), end: DROP }, { grace: 0 }, "UNAVAILABLE"],
      ["before started", { events: [], end: DROP }, {}, "UNAVAILABLE"],
      ["after the result", { events: evs, end: DROP }, {}, "UNAVAILABLE"],
      ["another code", { events: evs.slice(0, 2), end: { code: GrpcStatus.ABORTED, message: "taken over" } }, {}, "ABORTED"],
      ["final", { events: evs.slice(0, 2), end: { code: GrpcStatus.FAILED_PRECONDITION, message: "x", detailsBin: decided } }, {}, "FAILED_PRECONDITION"],
    ];
    for (const [name, leg, opts, code] of cases) {
      const { src, err } = await run([leg, { events: evs.slice(2), end: OK }], opts);
      assert.equal(err?.codeName, code, name);
      assert.equal(src.calls.length, 1, name);
    }
  });

  test("a refused resume ends with its status", async () => {
    const e = new Events();
    const { err } = await run([
      { events: [e.started("cmpl_s"), e.toolCall(1, "toolu_1")], end: DROP },
      { events: [], end: { code: GrpcStatus.NOT_FOUND, message: "no completion cmpl_s" } },
    ]);
    assert.equal(err?.codeName, "NOT_FOUND");
    assert.equal(err?.completionId, "cmpl_s");
  });

  test("gives up once the window since the drop is over, with the drop's error", async () => {
    const e = new Events();
    const legs: Leg[] = [{ events: [e.started("cmpl_s"), e.toolCall(1, "toolu_1")], end: DROP }];
    for (let i = 0; i < 1000; i++) legs.push({ events: [], end: DROP });
    const started = Date.now();
    const { src, err } = await run(legs, { policy: { initialBackoffMs: 2, maxBackoffMs: 8, windowMs: 60, random: () => 1 } });
    assert.equal(err?.codeName, "UNAVAILABLE");
    assert.ok(src.calls.length >= 4, `${src.calls.length} calls`);
    assert.ok(src.calls.length < 60, `${src.calls.length} calls`);
    assert.ok(Date.now() - started < 60 + 1000, "no resume after the window");
    for (const call of src.calls.slice(1)) assert.deepEqual(requests(call.sent), [resume(2), result("toolu_1")]);
  });
});
