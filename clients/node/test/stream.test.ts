// CompletionStream over fake calls: folding, the typed end, and healing a
// dropped connection with Attach without repeating or losing an event.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  CompletiondError,
  CompletionEvent,
  CompletionStream,
  DEFAULT_RECONNECT,
  ErrorKind,
  GrpcStatus,
  type ReconnectPolicy,
  TransitionReason,
} from "../src/index";
import { Events, detailsBin } from "./build";
import { FakeSource, type Leg } from "./fakes";
import { withIdempotencyKey } from "../src/client";

// The whole backoff every time (random 1): the pauses, and so the counts of
// reconnects within a window, are then fixed.
const FAST: ReconnectPolicy = { initialBackoffMs: 1, maxBackoffMs: 4, windowMs: 5_000, random: () => 1 };
const DROP = { code: GrpcStatus.UNAVAILABLE, message: "Connection dropped" };

interface Opts {
  resumable?: boolean;
  graceMs?: number;
  signal?: AbortSignal;
  attached?: boolean;
  policy?: ReconnectPolicy;
  restart?: boolean;
}

function stream(legs: Leg[], opts: Opts = {}) {
  const src = new FakeSource(legs);
  const s = new CompletionStream({
    open: () => src.open(),
    attach: (id, seq) => src.attach(id, seq),
    resumable: opts.resumable ?? true,
    graceMs: opts.graceMs ?? 60_000,
    policy: opts.policy ?? FAST,
    signal: opts.signal,
    attached: opts.attached,
    restart: opts.restart,
  });
  return { s, src };
}

async function drain(s: CompletionStream): Promise<{ seqs: number[]; err?: CompletiondError }> {
  const seqs: number[] = [];
  try {
    for await (const ev of s) seqs.push(ev.seq);
  } catch (err) {
    assert.ok(err instanceof CompletiondError, `not a CompletiondError: ${err}`);
    return { seqs, err };
  }
  return { seqs };
}

/** whole is a clean completion of n text deltas: started, deltas, COMPLETED, result. */
function whole(n: number): CompletionEvent[] {
  const e = new Events();
  const words = Array.from({ length: n }, (_, i) => `w${i} `);
  return [e.started("cmpl_r"), ...words.map((w) => e.text(1, w)), e.completed(1), e.result(1, words.join(""))];
}

describe("CompletionStream", { timeout: 10_000 }, () => {
  test("yields and folds every event; ends without error on OK", async () => {
    const { s } = stream([{ events: whole(3), end: { code: 0 } }]);
    const { seqs, err } = await drain(s);
    assert.equal(err, undefined);
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6]);
    assert.equal(s.fold.text, "w0 w1 w2 ");
    assert.equal(s.reconnects, 0);
  });

  test("a failed status throws the typed error with the fold's result and id", async () => {
    const e = new Events();
    const evs = [
      e.started("cmpl_f"),
      e.transition(1, TransitionReason.TRANSITION_REASON_MODEL_ERROR, { terminal: true }),
      e.result(1, "", 1, TransitionReason.TRANSITION_REASON_MODEL_ERROR),
    ];
    const bin = detailsBin(9, "content filter", { reason: "MODEL_ERROR" });
    const { s } = stream([{ events: evs, end: { code: 9, message: "content filter", detailsBin: bin } }]);
    const { err } = await drain(s);
    assert.equal(err?.codeName, "FAILED_PRECONDITION");
    assert.equal(err?.terminalReason, TransitionReason.TRANSITION_REASON_MODEL_ERROR);
    assert.equal(err?.completionId, "cmpl_f");
    assert.equal(err?.result?.reason, TransitionReason.TRANSITION_REASON_MODEL_ERROR);
  });

  test("a drop after started is healed by Attach after the last seq; repeats are not yielded", async () => {
    const evs = whole(6); // seq 1..9
    const { s, src } = stream([
      { events: evs.slice(0, 4), end: DROP },
      { events: evs.slice(2), end: { code: 0 } }, // the server may replay from earlier: seq 3 and 4 again
    ]);
    const { seqs, err } = await drain(s);
    assert.equal(err, undefined);
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert.deepEqual(src.attaches, [{ completionId: "cmpl_r", afterSeq: 4 }]);
    assert.equal(s.reconnects, 1);
    assert.equal(s.fold.text, s.fold.result?.message?.content[0]?.text?.text);
  });

  test("Attach ends with the completion's own status: a stream that attached throws it as it came", async () => {
    const e = new Events();
    const failure = { kind: ErrorKind.ERROR_KIND_STREAM_BROKEN, provider: "sim", httpStatus: 200, message: "stream cut" };
    const evs = [
      e.started("cmpl_x"),
      e.text(1, "half "),
      e.transition(1, TransitionReason.TRANSITION_REASON_MODEL_ERROR, { terminal: true }),
      e.ev(1, 1, { result: { reason: TransitionReason.TRANSITION_REASON_MODEL_ERROR, error: failure } }),
    ];
    const message = "completion ended MODEL_ERROR: stream_broken (HTTP 200): stream cut";
    const metadata = { error_kind: "stream_broken", provider: "sim", http_status: "200" };
    const status = { code: GrpcStatus.UNAVAILABLE, message, detailsBin: detailsBin(14, message, { reason: "MODEL_ERROR", metadata, retrySeconds: 0, retryNanos: 5e8 }) };
    const { s } = stream([
      { events: evs.slice(0, 2), end: DROP },
      { events: evs.slice(2), end: status },
    ]);
    const { seqs, err } = await drain(s);
    assert.deepEqual(seqs, [1, 2, 3, 4]);
    assert.equal(s.reconnects, 1);
    assert.equal(err?.codeName, "UNAVAILABLE");
    assert.equal(err?.details, message);
    assert.equal(err?.terminalReason, TransitionReason.TRANSITION_REASON_MODEL_ERROR);
    assert.deepEqual(err?.metadata, metadata);
    assert.equal(err?.retryable, true);
    assert.equal(err?.retryDelay, 0.5);
    assert.equal(err?.completionId, "cmpl_x");
    assert.equal(err?.result?.reason, TransitionReason.TRANSITION_REASON_MODEL_ERROR);

    // OK after the result is COMPLETED, full stop: nothing is made up from the result.
    const ok = stream([
      { events: evs.slice(0, 2), end: DROP },
      { events: evs.slice(2), end: { code: 0 } },
    ]);
    assert.equal((await drain(ok.s)).err, undefined);
    const attached = stream([{ events: evs, end: { code: 0 } }], { attached: true });
    assert.equal((await drain(attached.s)).err, undefined);
  });

  test("several drops, and Attach calls that fail, within the window", async () => {
    const evs = whole(4); // seq 1..7
    const { s, src } = stream([
      { events: evs.slice(0, 2), end: DROP },
      { events: [], end: DROP }, // the server is not reachable yet
      { events: evs.slice(2, 5), end: DROP },
      { events: evs.slice(5), end: { code: 0 } },
    ]);
    const { seqs, err } = await drain(s);
    assert.equal(err, undefined);
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual(src.attaches.map((a) => a.afterSeq), [2, 2, 5]);
  });

  test("gives up once the reconnect window since the drop is over, with the drop's error", async () => {
    const evs = whole(2);
    const legs: Leg[] = [{ events: evs.slice(0, 2), end: DROP }];
    for (let i = 0; i < 1000; i++) legs.push({ events: [], end: DROP });
    const policy = { initialBackoffMs: 2, maxBackoffMs: 8, windowMs: 60, random: () => 1 };
    const started = Date.now();
    const { s, src } = stream(legs, { policy });
    const { seqs, err } = await drain(s);
    assert.deepEqual(seqs, [1, 2]);
    assert.equal(err?.codeName, "UNAVAILABLE");
    assert.equal(err?.completionId, "cmpl_r");
    assert.ok(src.attaches.length >= 3, `${src.attaches.length} attaches`);
    assert.ok(src.attaches.length < 60, `${src.attaches.length} attaches`);
    assert.ok(Date.now() - started < 60 + 1000, "no Attach after the window");
  });

  test("no Attach: without resume grace, before started, for a final status, or past the grace", async () => {
    const evs = whole(2);
    // Any code but UNAVAILABLE is final (clients/testdata/reconnect.json).
    const decided = detailsBin(9, "cannot continue it here", { reason: "TAKEOVER_FAILED" });
    const cases: [string, Leg[], { resumable?: boolean; graceMs?: number }][] = [
      ["not resumable", [{ events: evs.slice(0, 2), end: DROP }], { resumable: false }],
      ["before started", [{ events: [], end: DROP }], {}],
      ["final", [{ events: evs.slice(0, 2), end: { code: GrpcStatus.FAILED_PRECONDITION, message: "x", detailsBin: decided } }], {}],
      ["past the grace", [{ events: evs.slice(0, 2), end: DROP }], { graceMs: 0.5 }],
      ["not UNAVAILABLE", [{ events: evs.slice(0, 2), end: { code: GrpcStatus.INTERNAL, message: "x" } }], {}],
    ];
    for (const [name, legs, opts] of cases) {
      const { s, src } = stream(legs, opts);
      const { err } = await drain(s);
      assert.ok(err !== undefined, name);
      assert.equal(src.attaches.length, 0, name);
    }
  });

  test("a start that drops before started is sent again (restart), a refusal is not", async () => {
    const evs = whole(2);
    for (const end of [DROP, { code: 0 }]) {
      const { s, src } = stream([{ events: [], end }, { events: evs, end: { code: 0 } }], { restart: true, resumable: false });
      const { seqs, err } = await drain(s);
      assert.equal(err, undefined);
      assert.deepEqual(seqs, [1, 2, 3, 4, 5]);
      assert.equal(s.restarts, 1);
      assert.equal(src.attaches.length, 0);
    }
    const overloaded = detailsBin(14, "overloaded", { reason: "OVERLOADED" });
    const refused = stream([{ events: [], end: { code: GrpcStatus.UNAVAILABLE, message: "x", detailsBin: overloaded } }], { restart: true });
    const { err } = await drain(refused.s);
    assert.equal(err?.reason, "OVERLOADED");
    assert.equal(refused.s.restarts, 0);
  });

  test("withIdempotencyKey: a random 16-byte hex key per call unless the request has one; the caller's request untouched", () => {
    const request = { system: "s" };
    const a = withIdempotencyKey(request);
    const b = withIdempotencyKey(request);
    assert.match(a.idempotencyKey, /^[0-9a-f]{32}$/);
    assert.notEqual(a.idempotencyKey, b.idempotencyKey);
    assert.equal(a.system, "s");
    assert.deepEqual(request, { system: "s" });
    assert.equal(withIdempotencyKey({ idempotencyKey: "mine" }).idempotencyKey, "mine");
  });

  test("a stream that ends OK without a result is an INTERNAL error, or attaches again when resumable", async () => {
    const { s } = stream([{ events: whole(2).slice(0, 3), end: { code: 0 } }], { resumable: false });
    const { err } = await drain(s);
    assert.equal(err?.codeName, "INTERNAL");
    const evs = whole(2);
    const healed = stream([{ events: evs.slice(0, 3), end: { code: 0 } }, { events: evs.slice(3), end: { code: 0 } }]);
    const { seqs, err: none } = await drain(healed.s);
    assert.equal(none, undefined);
    assert.deepEqual(seqs, [1, 2, 3, 4, 5]);
    assert.deepEqual(healed.src.attaches, [{ completionId: "cmpl_r", afterSeq: 3 }]);
  });

  test("leaving the loop early cancels the call", async () => {
    const { s, src } = stream([{ events: whole(5), end: { code: 0 } }]);
    for await (const ev of s) {
      if (ev.seq === 2) break;
    }
    assert.equal(src.cancels, 1);
    assert.equal(s.fold.lastSeq, 2);
  });

  test("an aborted signal cancels: CANCELLED, no Attach", async () => {
    const ac = new AbortController();
    ac.abort();
    const { s, src } = stream([{ events: whole(2).slice(0, 2), end: DROP }], { signal: ac.signal });
    const { err } = await drain(s);
    assert.equal(err?.codeName, "CANCELLED");
    assert.equal(src.attaches.length, 0);
    assert.ok(src.cancels >= 1);
  });

  test("done() drains and returns the fold; a stream is iterated once", async () => {
    const { s } = stream([{ events: whole(1), end: { code: 0 } }]);
    const f = await s.done();
    assert.equal(f.text, "w0 ");
    assert.throws(() => s[Symbol.asyncIterator](), /only once/);
  });

  test("the default reconnect policy: 50 ms doubling to 1 s, for 30 s (as the Go and Python clients)", () => {
    assert.deepEqual({ ...DEFAULT_RECONNECT }, { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000 });
  });
});
