// The Session loop over a fake call: what it sends, and when. The replay
// part drives it over every Session transcript and checks that it sends
// exactly what the recorded caller sent, after the same events.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  CancelSession,
  CompletiondError,
  type SessionHandlers,
  SessionRequest,
  SessionStart,
  TransitionReason,
  Verdict,
  runSessionOver,
  userText,
} from "../src/index";
import { Events, detailsBin } from "./build";
import { FakeSession, type Sent } from "./fakes";
import { events, expectOf, load, sent, transcriptFiles } from "./transcripts";

const R = TransitionReason;
const START = SessionStart.fromPartial({ request: { messages: [userText("weather?")] } });

/** toolTurns: started, a tool call, NEXT_TURN, the answer, COMPLETED, result. */
function toolTurns(): Events & { evs: ReturnType<Events["started"]>[] } {
  const e = new Events() as Events & { evs: ReturnType<Events["started"]>[] };
  e.evs = [
    e.started("cmpl_s"),
    e.toolCall(1, "toolu_1"),
    e.transition(1, R.TRANSITION_REASON_NEXT_TURN, { turn: 2 }),
    e.text(2, "Sunny.", 2),
    e.completed(2, 2),
    e.result(2, "Sunny.", 2),
  ];
  return e;
}

const kinds = (s: Sent[]) => s.map((x) => Object.keys(SessionRequest.toJSON(x.request) as object)[0]);

describe("runSessionOver", { timeout: 10_000 }, () => {
  test("sends start, a result for each tool call right after it, and half-closes after the result", async () => {
    const call = new FakeSession(toolTurns().evs);
    const seen: number[] = [];
    const fold = await runSessionOver(call, START, {
      onToolCall: (c) => `{"city": "${c.input?.city}", "sky": "clear"}`,
      onEvent: (ev) => void seen.push(ev.seq),
    });
    assert.deepEqual(kinds(call.sent), ["start", "toolResults"]);
    assert.deepEqual(call.sent[0]!.request.start, START);
    assert.equal(call.sent[1]!.afterSeq, 2);
    assert.deepEqual(call.sent[1]!.request.toolResults?.results, [
      { toolUseId: "toolu_1", text: '{"city": "Oslo", "sky": "clear"}', isError: false, halt: false },
    ]);
    assert.deepEqual(seen, [1, 2, 3, 4, 5, 6]);
    assert.equal(fold.text, "Sunny.");
    assert.equal(call.ended, true);
    assert.equal(call.cancelled, false);
  });

  test("a tool's exception is an is_error result with its message; a block is sent as given", async () => {
    const e = new Events();
    const evs = [e.started(), e.toolCall(1, "toolu_a"), e.toolCall(1, "toolu_b"), e.completed(1), e.result(1, "")];
    const call = new FakeSession(evs);
    await runSessionOver(call, START, {
      onToolCall: async (c) => {
        if (c.id === "toolu_a") throw new Error("no network");
        return { text: "halted", halt: true };
      },
    });
    assert.deepEqual(
      call.sent.slice(1).map((s) => s.request.toolResults?.results[0]),
      [
        { toolUseId: "toolu_a", text: "no network", isError: true, halt: false },
        { toolUseId: "toolu_b", text: "halted", isError: false, halt: true },
      ],
    );
  });

  test("stop hook: the callback's verdict with the hook id; VERDICT_ALLOW without a callback", async () => {
    const make = () => {
      const e = new Events();
      return [e.started(), e.text(1, "draft"), e.ev(1, 1, { stopHookRequest: { hookId: "hook_1" } }), e.completed(1), e.result(1, "draft")];
    };
    const blocked = new FakeSession(make());
    await runSessionOver(blocked, START, {
      onToolCall: () => "",
      onStopHook: (req, fold) => {
        assert.equal(req.hookId, "hook_1");
        assert.equal(fold.text, "draft");
        return { verdict: Verdict.VERDICT_BLOCK, message: "cite a source" };
      },
    });
    assert.deepEqual(blocked.sent[1]!.request.stopHookVerdict, { hookId: "hook_1", verdict: Verdict.VERDICT_BLOCK, message: "cite a source" });
    assert.equal(blocked.sent[1]!.afterSeq, 3);

    const allowed = new FakeSession(make());
    await runSessionOver(allowed, START, { onToolCall: () => "" });
    assert.deepEqual(allowed.sent[1]!.request.stopHookVerdict, { hookId: "hook_1", verdict: Verdict.VERDICT_ALLOW, message: "" });

    const prevented = new FakeSession(make());
    await runSessionOver(prevented, START, { onToolCall: () => "", onStopHook: () => Verdict.VERDICT_PREVENT });
    assert.equal(prevented.sent[1]!.request.stopHookVerdict?.verdict, Verdict.VERDICT_PREVENT);
  });

  test("a failed status rejects with the typed error carrying the result", async () => {
    const e = new Events();
    const evs = [e.started("cmpl_m"), e.toolCall(1, "toolu_1"), e.transition(1, R.TRANSITION_REASON_MAX_TURNS, { terminal: true }), e.result(1, "", 1, R.TRANSITION_REASON_MAX_TURNS)];
    const bin = detailsBin(8, "max turns", { reason: "MAX_TURNS" });
    const call = new FakeSession(evs, { code: 8, message: "max turns", detailsBin: bin });
    await assert.rejects(runSessionOver(call, START, { onToolCall: () => "ok" }), (err: unknown) => {
      assert.ok(err instanceof CompletiondError);
      assert.equal(err.codeName, "RESOURCE_EXHAUSTED");
      assert.equal(err.terminalReason, R.TRANSITION_REASON_MAX_TURNS);
      assert.equal(err.completionId, "cmpl_m");
      assert.equal(err.result?.reason, R.TRANSITION_REASON_MAX_TURNS);
      return true;
    });
  });

  test("aborting the signal sends Cancel once, then nothing more", async () => {
    const ac = new AbortController();
    const call = new FakeSession(toolTurns().evs);
    await runSessionOver(
      call,
      START,
      {
        onToolCall: () => {
          ac.abort("the user left");
          return "never sent";
        },
      },
      ac.signal,
    );
    assert.deepEqual(kinds(call.sent), ["start", "cancel"]);
    assert.deepEqual(call.sent[1]!.request.cancel, { reason: "the user left" });
    assert.equal(call.sent[1]!.afterSeq, 2);
  });

  test("a callback's CancelSession sends Cancel with its reason and answers nothing more", async () => {
    const call = new FakeSession(toolTurns().evs);
    let tools = 0;
    await runSessionOver(call, START, {
      onToolCall: () => {
        tools++;
        throw new CancelSession("no tools today");
      },
    });
    assert.deepEqual(kinds(call.sent), ["start", "cancel"]);
    assert.deepEqual(call.sent[1]!.request.cancel, { reason: "no tools today" });
    assert.equal(tools, 1);
  });

  test("another error thrown by onEvent sends Cancel with its message, stops the call and rejects with it", async () => {
    const call = new FakeSession(toolTurns().evs);
    const boom = new Error("printer on fire");
    await assert.rejects(runSessionOver(call, START, { onToolCall: () => "", onEvent: () => { throw boom; } }), boom);
    assert.deepEqual(kinds(call.sent), ["start", "cancel"]);
    assert.deepEqual(call.sent[1]!.request.cancel, { reason: "printer on fire" });
    assert.equal(call.cancelled, true);
  });
});

describe("Session replay of the golden transcripts", { timeout: 10_000 }, () => {
  const sessions = transcriptFiles().map(load).filter((t) => t.rpc === "Session");

  test("there are Session transcripts", () => {
    assert.ok(sessions.length > 0, "no Session transcript to replay");
  });

  for (const t of sessions) {
    test(t.name, async () => {
      const want = sent(t);
      const call = new FakeSession(events(t), {
        code: t.status.code,
        message: t.status.message,
        detailsBin: t.status.details_bin,
      });
      const ac = new AbortController();
      const fromTranscript: SessionHandlers = {
        onToolCall: (c) => {
          const r = want.flatMap((s) => s.request.toolResults?.results ?? []).find((r) => r.toolUseId === c.id);
          assert.ok(r !== undefined || ac.signal.aborted, `the transcript answers no tool call ${c.id}`);
          return r ?? "";
        },
        onStopHook: (req) => {
          const v = want.map((s) => s.request.stopHookVerdict).find((v) => v?.hookId === req.hookId);
          assert.ok(v !== undefined, `the transcript answers no stop hook ${req.hookId}`);
          return v;
        },
        onEvent: (ev) => {
          // The recorded caller cancelled right after this event.
          const c = want.find((s) => s.request.cancel !== undefined && s.afterSeq === ev.seq);
          if (c !== undefined) ac.abort(c.request.cancel!.reason);
        },
      };
      const start = SessionStart.fromJSON(t.request);
      let err: CompletiondError | undefined;
      let fold;
      try {
        fold = await runSessionOver(call, start, fromTranscript, ac.signal);
      } catch (e) {
        assert.ok(e instanceof CompletiondError, `not a CompletiondError: ${e}`);
        err = e;
      }
      assert.deepEqual(call.sent[0]?.request.start, start, "the loop sends start first");
      const got = call.sent.slice(1); // after start
      assert.deepEqual(
        got.map((s) => ({ afterSeq: s.afterSeq, request: SessionRequest.toJSON(s.request) })),
        want.map((s) => ({ afterSeq: s.afterSeq, request: SessionRequest.toJSON(s.request) })),
        "what the loop sent, after which event",
      );
      assert.equal(err === undefined, t.status.code === 0, "the loop ends as the transcript does");
      if (fold !== undefined) {
        assert.deepEqual(expectOf(fold, undefined), t.expect);
      }
    });
  }
});
