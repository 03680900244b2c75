// error: what a failure looks like, typed. A persistent outage ends
// UNAVAILABLE with RetryInfo; a Retry-After over the ceiling ends
// RESOURCE_EXHAUSTED with the upstream's wait; a bad request is refused with
// field violations. Each CompletiondError says all of it in fields.
//
//   make run                                  # in one terminal
//   npm --prefix examples/node run error      # in another (after make node-deps)

import { Client, CompletiondError, transitionReasonToJSON, userText } from "@completiond/client";

const client = new Client(); // COMPLETIOND_ADDR, else localhost:50051
const question = [userText("Tell me about recovery.")];

const cases = [
  // The last route of the chain stays overloaded; one retry is enough to show it.
  ["outage", () => client.stream({ route: "sim-large", messages: question, metadata: { "sim.faults": "overload*20" }, policy: { maxRetries: 1 } }).done()],
  // A 429 asking for 10 minutes, over the 60 s ceiling; no fallback to take.
  ["rate limit over the ceiling", () => client.stream({ route: "sim-small", messages: question, metadata: { "sim.faults": "rate_limit=10m" }, policy: { disableFallback: true } }).done()],
  ["bad request", () => client.complete({ messages: [], maxOutputTokens: 0 })],
];

try {
  for (const [name, run] of cases) {
    try {
      await run();
      console.log(`${name}: no error?`);
      process.exitCode = 1;
    } catch (err) {
      if (!(err instanceof CompletiondError)) throw err;
      print(name, err);
    }
  }
  // Leave sim-large as we found it: the outage counted against its circuit
  // breaker, and five failures in a row open it for 30 s — the next example
  // (or this one run again) would find the route skipped. One clean answer
  // resets the count.
  await client.stream({ route: "sim-large", messages: [userText("ok")], metadata: { "sim.words": "1" } }).done();
} finally {
  client.close();
}

/** print shows every typed field of the error. */
function print(name, err) {
  console.log(`${name}: ${err.codeName} — ${err.details}`);
  console.log(`  terminal reason: ${transitionReasonToJSON(err.terminalReason)} (ErrorInfo reason ${JSON.stringify(err.reason)})`);
  console.log(`  retryable: ${err.retryable}${err.retryable ? `, RetryInfo delay ${err.retryDelay}s` : ""}`);
  const md = Object.entries(err.metadata).sort(([a], [b]) => a.localeCompare(b));
  if (md.length) console.log(`  metadata: ${md.map(([k, v]) => `${k}=${v}`).join(" ")}`);
  if (err.completionId) console.log(`  completion: ${err.completionId}, result: ${err.result ? transitionReasonToJSON(err.result.reason) : "none"}`);
  for (const v of err.fieldViolations) console.log(`  field ${v.field}: ${v.description}`);
}
