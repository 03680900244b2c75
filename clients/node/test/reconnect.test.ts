// The reconnect rule the three client libraries share
// (clients/testdata/reconnect.json), and the jitter of each pause.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { CompletionEvent, Fold, GrpcStatus } from "../src/index";
import { dropped, restartable, retryDelayMs, waitMs } from "../src/reconnect";
import { detailsBin } from "./build";
import { serviceError } from "./fakes";

/** ReconnectCase is one row of the shared table. */
interface ReconnectCase {
  name: string;
  code: string;
  reason: string;
  retry_delay_seconds: number | null;
  started: boolean;
  result: boolean;
  reconnect: boolean;
  restart?: boolean;
  min_wait_seconds: number | null;
}

const RULE = path.resolve(__dirname, "..", "..", "..", "testdata", "reconnect.json");

function cases(): ReconnectCase[] {
  return (JSON.parse(readFileSync(RULE, "utf8")) as { cases: ReconnectCase[] }).cases;
}

/** end is what a call of the case failed with (undefined: it ended OK), its details in the status trailer. */
function end(c: ReconnectCase): unknown {
  if (c.code === "OK") return undefined;
  const code = (GrpcStatus as unknown as Record<string, number>)[c.code];
  assert.equal(typeof code, "number", c.code);
  const d: { reason?: string; retrySeconds?: number; retryNanos?: number } = {};
  if (c.reason !== "") d.reason = c.reason;
  if (c.retry_delay_seconds !== null) {
    d.retrySeconds = Math.floor(c.retry_delay_seconds);
    d.retryNanos = Math.round((c.retry_delay_seconds - d.retrySeconds) * 1e9);
  }
  const withDetails = d.reason !== undefined || d.retrySeconds !== undefined;
  return serviceError({ code, message: c.name, detailsBin: withDetails ? detailsBin(code, c.name, d) : undefined });
}

/** fold is what the call had received: the started event, the result. */
function fold(c: ReconnectCase): Fold {
  const f = new Fold();
  if (c.started) f.add(CompletionEvent.fromPartial({ seq: 1, started: { completionId: "cmpl_r" } }));
  if (c.result) f.add(CompletionEvent.fromPartial({ seq: 2, result: {} }));
  return f;
}

describe("reconnect", () => {
  test("the shared table: when a resumable stream reconnects, and its first pause with no jitter", () => {
    const zero = { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000, random: () => 0 };
    const rows = cases();
    assert.ok(rows.length > 0);
    for (const c of rows) {
      const failure = end(c);
      assert.equal(dropped(failure, fold(c)), c.reconnect, c.name);
      assert.equal(restartable(failure, fold(c)), c.restart ?? false, `${c.name}: restart`);
      if (c.reconnect) assert.equal(waitMs(zero, 1, retryDelayMs(failure)), (c.min_wait_seconds ?? NaN) * 1000, c.name);
    }
  });

  test("full jitter: a random part of the backoff (50 ms doubling to 1 s), at least the RetryInfo delay", () => {
    let fraction = 0;
    const p = { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000, random: () => fraction };
    const table: [number, number, number, number][] = [
      [1, 0.5, 0, 25],
      [2, 0.5, 0, 50],
      [5, 0.25, 0, 200],
      [6, 0.999, 0, 999],
      [40, 0.1, 0, 100],
      [1, 0.1, 1000, 1000],
      [6, 0.9, 500, 900],
    ];
    for (const [tries, f, floor, want] of table) {
      fraction = f;
      assert.ok(Math.abs(waitMs(p, tries, floor) - want) < 1e-9, `tries ${tries}, fraction ${f}, floor ${floor}`);
    }
    const byDefault = { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000 };
    for (let i = 0; i < 100; i++) {
      const w = waitMs(byDefault, 3);
      assert.ok(w >= 0 && w < 200, `${w}`);
    }
  });
});
