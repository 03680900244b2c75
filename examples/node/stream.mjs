// stream: one completion over Stream, printing each token as it arrives and
// each transition with its typed reason; the Fold keeps the answer.
//
//   make run                                  # in one terminal
//   npm --prefix examples/node run stream     # in another (after make node-deps)
//
// Flags: --route sim, --faults "rate_limit,cut=5" (the sim's fault script),
// -q "question". The address is COMPLETIOND_ADDR, else localhost:50051.

import { parseArgs } from "node:util";
import {
  Client,
  CompletiondError,
  errorKindToJSON,
  seconds,
  stopReasonToJSON,
  transitionReasonToJSON,
  userText,
} from "@completiond/client";

const { values: opts } = parseArgs({
  options: {
    route: { type: "string", default: "sim" },
    faults: { type: "string", default: "rate_limit,cut=5" },
    q: { type: "string", short: "q", default: "Tell me about recovery." },
  },
});

const client = new Client(); // COMPLETIOND_ADDR, else localhost:50051
const stream = client.stream({
  route: opts.route,
  messages: [userText(opts.q)],
  metadata: opts.route.startsWith("sim") ? { "sim.faults": opts.faults, "sim.pace": "10ms", "sim.words": "20" } : {},
});

try {
  for await (const ev of stream) {
    if (ev.started) console.log(`[started ${ev.started.completionId} on ${ev.started.route} (${ev.started.model})]`);
    if (ev.delta) process.stdout.write(ev.delta.text);
    if (ev.transition) console.log(`\n${describe(ev.transition, ev.attempt)}`);
    if (ev.result) {
      const r = ev.result;
      console.log(`[done: ${stopReasonToJSON(r.stopReason)}, ${r.attempts.length} attempts, ${r.usage?.outputTokens ?? 0} output tokens]`);
    }
  }
  const f = stream.fold;
  console.log(`answer (${f.discardedAttempts.length ? `attempts ${f.discardedAttempts} discarded` : "nothing discarded"}): ${f.text}`);
} catch (err) {
  if (!(err instanceof CompletiondError)) throw err;
  console.log(`\n[failed: ${err.codeName}, terminal reason ${transitionReasonToJSON(err.terminalReason)}: ${err.details}]`);
  process.exitCode = 1;
} finally {
  client.close();
}

/** describe says what a transition did: its reason and the details that matter. */
function describe(t, attempt) {
  const parts = [transitionReasonToJSON(t.reason).replace("TRANSITION_REASON_", "")];
  if (t.terminal) parts.push("terminal");
  if (t.error) parts.push(`after ${errorKindToJSON(t.error.kind).replace("ERROR_KIND_", "").toLowerCase()}${t.error.httpStatus ? ` (HTTP ${t.error.httpStatus})` : ""}`);
  if (t.backoff) parts.push(`backoff ${seconds(t.backoff)}s`);
  if (t.toRoute && !t.terminal) parts.push(`→ ${t.toRoute}`);
  if (t.discardedAttempts.length) parts.push(`output of attempt ${t.discardedAttempts.join(", ")} discarded`);
  return `[${parts.join(", ")}] (attempt ${attempt})`;
}
