// toolloop: a Session tool loop. The model asks for tools, this program runs
// them and the library sends the results back, until the model answers.
// Each tool call arrives only once its attempt is settled, so running it at
// once is safe.
//
//   make run                                  # in one terminal
//   npm --prefix examples/node run toolloop   # in another (after make node-deps)
//
// Flags: --route sim, --faults (default: get_weather twice), -q "question".
// With --route naming a real model, the model decides which tools to call.

import { parseArgs } from "node:util";
import { Client, CompletiondError, stopReasonToJSON, transitionReasonToJSON, userText } from "@completiond/client";

const { values: opts } = parseArgs({
  options: {
    route: { type: "string", default: "sim" },
    faults: { type: "string", default: "tool_use=get_weather,tool_use=get_weather" },
    q: { type: "string", short: "q", default: "What is the weather in Lisbon and in Oslo?" },
  },
});

/** tools are what this program can run for the model. */
const tools = {
  get_weather: (input) => {
    const city = input?.city ?? input?.query; // the sim passes the question as "query"
    return JSON.stringify({ city, forecast: "sunny", celsius: 21 });
  },
};

const client = new Client(); // COMPLETIOND_ADDR, else localhost:50051
try {
  const fold = await client.runSession(
    {
      request: {
        route: opts.route,
        messages: [userText(opts.q)],
        tools: [
          {
            name: "get_weather",
            description: "Current weather for a city.",
            inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
          },
        ],
        metadata: opts.route.startsWith("sim") ? { "sim.faults": opts.faults, "sim.pace": "5ms" } : {},
      },
      maxTurns: 5,
    },
    {
      onToolCall: (call) => {
        const tool = tools[call.name];
        if (!tool) throw new Error(`unknown tool ${call.name}`); // sent as an is_error result
        const result = tool(call.input);
        console.log(`\n[tool ${call.name}(${JSON.stringify(call.input)}) → ${result}]`);
        return result;
      },
      onEvent: (ev) => {
        if (ev.delta) process.stdout.write(ev.delta.text);
        if (ev.transition) console.log(`\n[${transitionReasonToJSON(ev.transition.reason).replace("TRANSITION_REASON_", "")}]`);
      },
    },
  );
  const r = fold.result;
  console.log(`[done: ${stopReasonToJSON(r.stopReason)}, ${fold.turns.length} turns, ${r.attempts.length} attempts, ${r.usage?.outputTokens ?? 0} output tokens]`);
} catch (err) {
  if (!(err instanceof CompletiondError)) throw err;
  console.log(`[failed: ${err.codeName}, terminal reason ${transitionReasonToJSON(err.terminalReason)}: ${err.details}]`);
  process.exitCode = 1;
} finally {
  client.close();
}
