// Requests as plain objects: the sampling fields, stop sequences, the total
// output bound and the tool choice helpers, as they go on the wire.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  CompleteRequest,
  type CompleteRequestInit,
  ToolChoice,
  ToolChoiceMode,
  toolChoiceAny,
  toolChoiceAuto,
  toolChoiceNone,
  toolChoiceTool,
  userText,
} from "../src/index";

/** wire is the request as the server decodes it: fromPartial, encoded, decoded. */
function wire(init: CompleteRequestInit): CompleteRequest {
  return CompleteRequest.decode(CompleteRequest.encode(CompleteRequest.fromPartial(init)).finish());
}

const M = ToolChoiceMode;

describe("requests", { timeout: 10_000 }, () => {
  test("sampling, stop sequences and the total output bound reach the wire", () => {
    const req = wire({
      messages: [userText("hi")],
      temperature: 0.25,
      topP: 0.9,
      topK: 40,
      seed: -7,
      stopSequences: ["END", "\n\nHuman:"],
      maxTotalOutputTokens: 20000,
    });
    assert.equal(req.temperature, 0.25);
    assert.equal(req.topP, 0.9);
    assert.equal(req.topK, 40);
    assert.equal(req.seed, -7);
    assert.deepEqual(req.stopSequences, ["END", "\n\nHuman:"]);
    assert.equal(req.maxTotalOutputTokens, 20000);
    assert.equal(req.toolChoice, undefined);
  });

  test("zero is sent, not left unset; absent fields stay absent", () => {
    const zero = wire({ messages: [userText("hi")], temperature: 0, seed: 0 });
    assert.equal(zero.temperature, 0);
    assert.equal(zero.seed, 0);
    const plain = wire({ messages: [userText("hi")] });
    for (const field of ["temperature", "topP", "topK", "seed", "maxTotalOutputTokens", "toolChoice"] as const) {
      assert.equal(plain[field], undefined, field);
    }
    assert.deepEqual(plain.stopSequences, []);
  });

  test("the tool choice helpers", () => {
    const cases: [string, ToolChoice, ToolChoice][] = [
      ["auto", toolChoiceAuto(), { mode: M.TOOL_CHOICE_MODE_AUTO, name: "", disableParallelToolUse: false }],
      ["any", toolChoiceAny(), { mode: M.TOOL_CHOICE_MODE_ANY, name: "", disableParallelToolUse: false }],
      ["none", toolChoiceNone(), { mode: M.TOOL_CHOICE_MODE_NONE, name: "", disableParallelToolUse: false }],
      ["a named tool", toolChoiceTool("search"), { mode: M.TOOL_CHOICE_MODE_TOOL, name: "search", disableParallelToolUse: false }],
      [
        "auto, one call at most",
        toolChoiceAuto({ disableParallelToolUse: true }),
        { mode: M.TOOL_CHOICE_MODE_AUTO, name: "", disableParallelToolUse: true },
      ],
      [
        "a named tool, one call at most",
        toolChoiceTool("search", { disableParallelToolUse: true }),
        { mode: M.TOOL_CHOICE_MODE_TOOL, name: "search", disableParallelToolUse: true },
      ],
    ];
    for (const [name, choice, want] of cases) {
      assert.deepEqual(choice, want, name);
      const req = wire({ messages: [userText("hi")], tools: [{ name: "search" }], toolChoice: choice });
      assert.deepEqual(req.toolChoice, want, `${name}, on the wire`);
    }
    // A partial tool choice: only the flag, the mode left to the provider (auto).
    const flagOnly = wire({ messages: [userText("hi")], toolChoice: { disableParallelToolUse: true } });
    assert.deepEqual(flagOnly.toolChoice, { mode: M.TOOL_CHOICE_MODE_UNSPECIFIED, name: "", disableParallelToolUse: true });
  });
});
