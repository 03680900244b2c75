// End to end against a real completiond (scripts/with-server sets
// COMPLETIOND_ADDR): transitions, discarded attempts, typed failures, a
// Session tool loop, a stop hook, cancel, Attach, and a dropped connection
// healed by the stream (Attach) and by a Session (resume).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  CompletiondError,
  type CompletionEvent,
  CompletionStream,
  GrpcStatus,
  Role,
  StopReason,
  TransitionReason,
  Verdict,
  duration,
  transitionReasonToJSON,
  userText,
} from "../../src/index";
import { CuttingProxy } from "./proxy";

const ADDR = process.env.COMPLETIOND_ADDR ?? "";
const R = TransitionReason;
const names = (rs: readonly { reason: TransitionReason }[]) => rs.map((t) => transitionReasonToJSON(t.reason).replace("TRANSITION_REASON_", ""));

/** sim is a request to the sim provider with a fault script. */
function sim(faults: string, extra: Record<string, unknown> = {}) {
  return {
    messages: [userText("Tell me about recovery.")],
    metadata: { "sim.faults": faults, "sim.pace": "1ms", "sim.words": "12" },
    ...extra,
  };
}

/** read drains a stream, returning the seqs it yielded and its error. */
async function read(s: CompletionStream): Promise<{ seqs: number[]; err?: CompletiondError }> {
  const seqs: number[] = [];
  try {
    for await (const ev of s) seqs.push(ev.seq);
  } catch (err) {
    assert.ok(err instanceof CompletiondError, `not a CompletiondError: ${err}`);
    return { seqs, err };
  }
  return { seqs };
}

/** resultText is the text of a result's message. */
function resultText(s: CompletionStream): string {
  return (s.fold.result?.message?.content ?? []).map((b) => b.text?.text ?? "").join("");
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe("against completiond", { timeout: 120_000 }, () => {
  let client: Client;

  before(() => {
    assert.ok(ADDR !== "", "COMPLETIOND_ADDR is not set: run under scripts/with-server");
    client = new Client(ADDR);
  });

  after(() => client.close());

  test("server_error then completed: RETRY, COMPLETED, kept text = the answer", async () => {
    const s = client.stream(sim("server_error"));
    const { seqs, err } = await read(s);
    assert.equal(err, undefined);
    assert.deepEqual(names(s.fold.transitions), ["RETRY", "COMPLETED"]);
    assert.deepEqual(seqs, range(seqs.length));
    assert.match(s.fold.completionId, /^cmpl_/);
    assert.equal(s.fold.reason, R.TRANSITION_REASON_COMPLETED);
    assert.equal(s.fold.stopReason, StopReason.STOP_REASON_END_TURN);
    assert.ok(s.fold.text.length > 0);
    assert.equal(s.fold.text, resultText(s));
  });

  test("cut=4 on sim-noprefill: the cut attempt is discarded, not part of the answer", async () => {
    const s = client.stream(sim("cut=4", { route: "sim-noprefill" }));
    const { err } = await read(s);
    assert.equal(err, undefined);
    assert.deepEqual(names(s.fold.transitions), ["RETRY", "COMPLETED"]);
    assert.deepEqual(s.fold.discardedAttempts, [1]);
    assert.equal(s.fold.text, resultText(s));
  });

  test("sim-large overload*20: UNAVAILABLE, terminal MODEL_ERROR, RetryInfo, with the result", async () => {
    // maxRetries 1 keeps it short: the outage outlasts the retries either way.
    const s = client.stream(sim("overload*20", { route: "sim-large", policy: { maxRetries: 1 } }));
    const { err } = await read(s);
    assert.ok(err);
    assert.equal(err.code, GrpcStatus.UNAVAILABLE);
    assert.equal(err.reason, "MODEL_ERROR");
    assert.equal(err.terminalReason, R.TRANSITION_REASON_MODEL_ERROR);
    assert.equal(err.domain, "completiond.completion.v1");
    assert.equal(err.retryable, true);
    assert.ok(err.retryDelay !== null && err.retryDelay > 0, `retry delay ${err.retryDelay}`);
    assert.equal(err.completionId, s.fold.completionId);
    assert.equal(err.result?.reason, R.TRANSITION_REASON_MODEL_ERROR);
    // Leaves sim-large as the test found it: one clean answer resets the
    // failures the outage counted against its circuit breaker (five in a row
    // open it), which the examples' own outage would otherwise complete.
    const restored = await read(client.stream(sim("", { route: "sim-large" })));
    assert.equal(restored.err, undefined);
  });

  test("a Retry-After over the ceiling: RESOURCE_EXHAUSTED with the upstream's wait in RetryInfo", async () => {
    // Not on sim-large, whose circuit the outage above may have opened.
    const req = sim("rate_limit=10m", { route: "sim-small", policy: { disableFallback: true } });
    const { err } = await read(client.stream(req));
    assert.equal(err?.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.equal(err?.terminalReason, R.TRANSITION_REASON_MODEL_ERROR);
    assert.equal(err?.metadata.error_kind, "rate_limit");
    assert.equal(err?.retryDelay, 600);
  });

  test("complete: the aggregated answer; a bad request: INVALID_ARGUMENT with field violations", async () => {
    const resp = await client.complete(sim("rate_limit"));
    assert.match(resp.completionId, /^cmpl_/);
    assert.deepEqual(names(resp.transitions), ["RETRY", "COMPLETED"]);
    assert.equal(resp.result?.stopReason, StopReason.STOP_REASON_END_TURN);

    await assert.rejects(client.complete({ messages: [], maxOutputTokens: 0 }), (err: unknown) => {
      assert.ok(err instanceof CompletiondError);
      assert.equal(err.code, GrpcStatus.INVALID_ARGUMENT);
      assert.equal(err.terminalReason, R.TRANSITION_REASON_UNSPECIFIED);
      assert.equal(err.retryable, false);
      assert.deepEqual(err.fieldViolations.map((v) => v.field).sort(), ["max_output_tokens", "messages"]);
      return true;
    });
  });

  test("a Session tool loop: get_weather twice, then the answer", async () => {
    const calls: string[] = [];
    const fold = await client.runSession(
      {
        request: {
          ...sim("tool_use=get_weather,tool_use=get_weather"),
          tools: [{ name: "get_weather", description: "Current weather for a city.", inputSchema: { type: "object" } }],
        },
        maxTurns: 5,
      },
      {
        onToolCall: (call) => {
          calls.push(call.id);
          assert.equal(call.name, "get_weather");
          return JSON.stringify({ city: call.input?.query, forecast: "sunny" });
        },
      },
    );
    assert.equal(calls.length, 2);
    assert.deepEqual(names(fold.transitions), ["NEXT_TURN", "NEXT_TURN", "COMPLETED"]);
    assert.deepEqual(fold.turns.map((t) => t.toolCalls.length), [1, 1, 0]);
    assert.equal(fold.text, (fold.result?.message?.content ?? []).map((b) => b.text?.text ?? "").join(""));
    const transcript = fold.result?.transcript ?? [];
    const results = transcript.flatMap((m) => (m.role === Role.ROLE_USER ? m.content : [])).filter((b) => b.toolResult);
    assert.deepEqual(results.map((b) => b.toolResult?.toolUseId), calls);
  });

  test("a Session stop hook: BLOCK the first answer, allow the second", async () => {
    let asked = 0;
    const fold = await client.runSession(
      { request: sim(""), stopHook: true },
      {
        onToolCall: () => "",
        onStopHook: () => (++asked === 1 ? { verdict: Verdict.VERDICT_BLOCK, message: "Cite a source." } : Verdict.VERDICT_ALLOW),
      },
    );
    assert.equal(asked, 2);
    assert.deepEqual(names(fold.transitions), ["STOP_HOOK_BLOCKING", "COMPLETED"]);
  });

  test("a Session cancelled by its signal while a tool would run: ABORTED_TOOLS, CANCELLED", async () => {
    const ac = new AbortController();
    await assert.rejects(
      client.runSession(
        { request: { ...sim("tool_use=search"), tools: [{ name: "search" }] } },
        {
          onToolCall: () => {
            ac.abort("the user pressed stop");
            return "never sent";
          },
        },
        { signal: ac.signal },
      ),
      (err: unknown) => {
        assert.ok(err instanceof CompletiondError);
        assert.equal(err.code, GrpcStatus.CANCELLED);
        assert.equal(err.terminalReason, R.TRANSITION_REASON_ABORTED_TOOLS);
        assert.equal(err.result?.reason, R.TRANSITION_REASON_ABORTED_TOOLS);
        return true;
      },
    );
  });

  test("attach replays a finished completion after a seq", async () => {
    const s = client.stream(sim(""));
    const { seqs } = await read(s);
    const again = client.attach(s.fold.completionId, 3);
    const { seqs: rest, err } = await read(again);
    assert.equal(err, undefined);
    assert.deepEqual(rest, seqs.slice(3));
    assert.equal(again.fold.result?.reason, R.TRANSITION_REASON_COMPLETED);
  });

  test("leaving the loop early cancels the stream (no uncaught error afterwards)", async () => {
    const s = client.stream(sim("", { metadata: { "sim.pace": "20ms", "sim.words": "40" } }));
    for await (const ev of s) {
      if (ev.seq === 3) break;
    }
    await new Promise((r) => setTimeout(r, 100)); // the CANCELLED status arrives meanwhile
    assert.equal(s.fold.lastSeq, 3);
  });

  test("a dropped connection with resume_grace: Attach heals it, every seq exactly once", async () => {
    const proxy = await CuttingProxy.start(ADDR, 2000);
    const c = new Client(proxy.address);
    try {
      const s = c.stream({
        messages: [userText("Tell me about recovery.")],
        metadata: { "sim.pace": "10ms", "sim.words": "80" },
        resumeGrace: duration(60),
      });
      const { seqs, err } = await read(s);
      assert.equal(err, undefined);
      assert.equal(proxy.cuts, 1, "the proxy cut the connection");
      assert.ok(s.reconnects >= 1, "the stream attached again");
      assert.deepEqual(seqs, range(seqs.length), "every seq exactly once, in order");
      assert.equal(s.fold.reason, R.TRANSITION_REASON_COMPLETED);
      assert.equal(s.fold.text, resultText(s));
    } finally {
      c.close();
      await proxy.close();
    }
  });

  test("a drop, then the completion fails: the stream that attached throws the completion's own status", async () => {
    // Attach ends with the status the completion's stream ended with: code, ErrorInfo, RetryInfo.
    const proxy = await CuttingProxy.start(ADDR, 2000);
    const c = new Client(proxy.address);
    try {
      const s = c.stream({
        route: "sim-noprefill",
        messages: [userText("Tell me about recovery.")],
        metadata: { "sim.faults": "cut=60", "sim.pace": "10ms", "sim.words": "80" },
        policy: { maxRetries: 0, disableFallback: true },
        resumeGrace: duration(60),
      });
      const { seqs, err } = await read(s);
      assert.equal(proxy.cuts, 1);
      assert.ok(s.reconnects >= 1);
      assert.deepEqual(seqs, range(seqs.length));
      assert.equal(err?.code, GrpcStatus.UNAVAILABLE);
      assert.equal(err?.reason, "MODEL_ERROR");
      assert.equal(err?.terminalReason, R.TRANSITION_REASON_MODEL_ERROR);
      assert.equal(err?.domain, "completiond.completion.v1");
      assert.equal(err?.metadata.error_kind, "stream_broken");
      assert.equal(err?.metadata.provider, "sim");
      assert.match(err?.metadata.request_id ?? "", /^req_sim_/, "the upstream's request id, as sent");
      assert.match(err?.details ?? "", /^completion ended MODEL_ERROR: stream_broken \(HTTP 200\)/);
      assert.equal(err?.retryable, true, "the server's RetryInfo comes through the Attach");
      assert.ok(err?.retryDelay !== null && (err?.retryDelay ?? 0) > 0, `retry delay ${err?.retryDelay}`);
      assert.equal(err?.result?.reason, R.TRANSITION_REASON_MODEL_ERROR);
    } finally {
      c.close();
      await proxy.close();
    }
  });

  for (const [name, cutAt] of [
    // On the tool_call event, before its result is sent: the result is lost and must be sent again.
    ["awaiting a tool result", (ev: CompletionEvent) => ev.toolCall !== undefined],
    ["while turn 2 streams", (ev: CompletionEvent) => ev.turn === 2 && ev.delta !== undefined],
  ] as const) {
    test(`a Session with resume_grace resumes after a drop ${name}: every seq once, each tool once, the same answer`, async () => {
      const request = (grace: boolean) => ({
        request: {
          messages: [userText("Tell me about recovery.")],
          tools: [{ name: "search" }],
          metadata: { "sim.faults": "tool_use=search", "sim.pace": "20ms", "sim.words": "40" },
          ...(grace ? { resumeGrace: duration(60) } : {}),
        },
      });
      const proxy = await CuttingProxy.start(ADDR);
      const c = new Client(proxy.address);
      try {
        const seqs: number[] = [];
        const calls = new Map<string, number>();
        let cut = 0;
        const fold = await c.runSession(request(true), {
          onEvent: (ev) => {
            seqs.push(ev.seq);
            if (cut === 0 && cutAt(ev)) cut = proxy.cut();
          },
          onToolCall: (call) => {
            calls.set(call.id, (calls.get(call.id) ?? 0) + 1);
            return "42";
          },
        });
        assert.equal(cut, 1, "the proxy cut the session's connection");
        assert.ok(proxy.connections >= 2, "the session connected again");
        assert.deepEqual(seqs, range(seqs.length), "every seq once, in order");
        assert.equal(calls.size, 1);
        assert.deepEqual([...calls.values()], [1], "each tool call run once");
        const plain = await client.runSession(request(false), { onToolCall: () => "42" });
        assert.equal(fold.text, plain.text);
        assert.equal(fold.result?.attempts.length, plain.result?.attempts.length);
        assert.deepEqual(names(fold.transitions), ["NEXT_TURN", "COMPLETED"]);
        assert.equal(fold.text, (fold.result?.message?.content ?? []).map((b) => b.text?.text ?? "").join(""));
        const results = (fold.result?.transcript ?? []).flatMap((m) => m.content).filter((b) => b.toolResult !== undefined);
        assert.deepEqual(results.map((b) => [b.toolResult?.toolUseId, b.toolResult?.text]), [...calls.keys()].map((id) => [id, "42"]));
      } finally {
        c.close();
        await proxy.close();
      }
    });
  }

  test("without resume_grace the drop ends the stream: UNAVAILABLE, no Attach", async () => {
    const proxy = await CuttingProxy.start(ADDR, 2000);
    const c = new Client(proxy.address);
    try {
      const s = c.stream({ messages: [userText("Tell me about recovery.")], metadata: { "sim.pace": "10ms", "sim.words": "80" } });
      const { err } = await read(s);
      assert.equal(proxy.cuts, 1);
      assert.equal(err?.code, GrpcStatus.UNAVAILABLE);
      assert.equal(err?.reason, "");
      assert.equal(s.reconnects, 0);
      assert.match(err?.completionId ?? "", /^cmpl_/);
    } finally {
      c.close();
      await proxy.close();
    }
  });
});
