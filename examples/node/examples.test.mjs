// The examples, run as a user runs them (node <example>.mjs) against the
// server scripts/with-server started (COMPLETIOND_ADDR), with their output
// checked.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";

const run = promisify(execFile);

test("COMPLETIOND_ADDR names the server", () => {
  assert.ok(process.env.COMPLETIOND_ADDR, "run under scripts/with-server");
});

/** example runs one example and returns its output; it must exit 0. */
async function example(name, ...args) {
  const { stdout } = await run(process.execPath, [new URL(`${name}.mjs`, import.meta.url).pathname, ...args], {
    timeout: 30_000,
  });
  return stdout;
}

const count = (s, re) => (s.match(re) ?? []).length;

test("stream: the tokens, each transition with its reason, the answer", async () => {
  const out = await example("stream");
  assert.match(out, /^\[started cmpl_\w+ on sim \(sim-1\)\]$/m);
  assert.match(out, /^\[RETRY, after rate_limit \(HTTP 429\), backoff [\d.]+s, → sim\] \(attempt 1\)$/m);
  assert.match(out, /^\[STREAM_RESUME, after stream_broken/m);
  assert.match(out, /^\[COMPLETED, terminal\]/m);
  assert.match(out, /^\[done: STOP_REASON_END_TURN, 3 attempts, \d+ output tokens\]$/m);
  assert.match(out, /^answer \(nothing discarded\): Simulated answer to "Tell me about recovery\.":/m);
});

test("stream: a restart that discards the cut attempt", async () => {
  const out = await example("stream", "--route", "sim-noprefill", "--faults", "cut=4");
  assert.match(out, /^\[RETRY, after stream_broken .*output of attempt 1 discarded\]/m);
  assert.match(out, /^answer \(attempts 1 discarded\): /m);
});

test("error: terminal reason, retryable, RetryInfo delay, field violations", async () => {
  const out = await example("error");
  assert.match(out, /^outage: UNAVAILABLE — completion ended MODEL_ERROR/m);
  assert.match(out, /^ {2}terminal reason: TRANSITION_REASON_MODEL_ERROR \(ErrorInfo reason "MODEL_ERROR"\)$/m);
  assert.match(out, /^ {2}retryable: true, RetryInfo delay [\d.]+s$/m);
  assert.match(out, /^rate limit over the ceiling: RESOURCE_EXHAUSTED/m);
  assert.match(out, /RetryInfo delay 600s$/m);
  assert.match(out, /^bad request: INVALID_ARGUMENT/m);
  assert.match(out, /^ {2}retryable: false$/m);
  assert.match(out, /^ {2}field messages: at least one message is required$/m);
  assert.match(out, /^ {2}field max_output_tokens: /m);
});

test("error: run after run, the outage is the upstream's, never a circuit an earlier run left open", async () => {
  for (let i = 1; i <= 3; i++) {
    const out = await example("error");
    const outage = out.split("\nrate limit")[0];
    assert.match(outage, /^outage: UNAVAILABLE/m, `run ${i}`);
    assert.doesNotMatch(outage, /circuit/i, `run ${i}: ${outage}`);
  }
});

test("toolloop: get_weather twice, then the answer", async () => {
  const out = await example("toolloop");
  assert.equal(count(out, /^\[tool get_weather\(.*\) → \{"city":.*"forecast":"sunny"/gm), 2);
  assert.equal(count(out, /^\[NEXT_TURN\]$/gm), 2);
  assert.match(out, /^\[COMPLETED\]$/m);
  assert.match(out, /^\[done: STOP_REASON_END_TURN, 3 turns, 3 attempts, \d+ output tokens\]$/m);
});

test("toolloop: a stream broken right after a complete tool call never hands that call over", async () => {
  const out = await example("toolloop", "--faults", "tool_reset=get_weather,tool_use=get_weather,tool_use=get_weather");
  assert.equal(count(out, /^\[tool get_weather/gm), 2);
  assert.match(out, /^\[RETRY\]$/m);
  assert.match(out, /^\[done: STOP_REASON_END_TURN, 3 turns/m);
});
