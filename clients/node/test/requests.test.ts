// Requests as plain objects: the sampling fields, stop sequences, the total
// output bound and the tool choice helpers, as they go on the wire.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  CompleteRequest,
  type CompleteRequestInit,
  ContentBlock,
  PromptCache,
  PromptCacheMode,
  ReasoningEffort,
  Role,
  Tool,
  ToolChoice,
  ToolChoiceMode,
  cacheBreakpoint,
  documentBlock,
  documentUrlBlock,
  imageBlock,
  imageUrlBlock,
  promptCacheAuto,
  promptCacheCaller,
  promptCacheOff,
  textBlock,
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

  test("reasoning: its fields reach the wire; absent, it stays absent", () => {
    const req = wire({
      messages: [userText("hi")],
      reasoning: { effort: ReasoningEffort.REASONING_EFFORT_LOW, budgetTokens: 4096, interleaved: true },
    });
    assert.deepEqual(req.reasoning, { effort: ReasoningEffort.REASONING_EFFORT_LOW, budgetTokens: 4096, interleaved: true });
    const effortOnly = wire({ messages: [userText("hi")], reasoning: { effort: ReasoningEffort.REASONING_EFFORT_HIGH } });
    assert.deepEqual(effortOnly.reasoning, { effort: ReasoningEffort.REASONING_EFFORT_HIGH, budgetTokens: 0, interleaved: false });
    assert.equal(wire({ messages: [userText("hi")] }).reasoning, undefined);
  });

  test("the prompt cache helpers", () => {
    const M = PromptCacheMode;
    const cases: [string, PromptCache, PromptCache][] = [
      ["auto", promptCacheAuto(), { mode: M.PROMPT_CACHE_MODE_AUTO, system: false }],
      ["off", promptCacheOff(), { mode: M.PROMPT_CACHE_MODE_OFF, system: false }],
      ["caller", promptCacheCaller(), { mode: M.PROMPT_CACHE_MODE_CALLER, system: false }],
      ["auto, the system prompt marked", promptCacheAuto({ system: true }), { mode: M.PROMPT_CACHE_MODE_AUTO, system: true }],
      ["caller, the system prompt marked", promptCacheCaller({ system: true }), { mode: M.PROMPT_CACHE_MODE_CALLER, system: true }],
    ];
    for (const [name, cache, want] of cases) {
      assert.deepEqual(cache, want, name);
      assert.deepEqual(wire({ messages: [userText("hi")], promptCache: cache }).promptCache, want, `${name}, on the wire`);
    }
    const systemOnly = wire({ messages: [userText("hi")], promptCache: { system: true } });
    assert.deepEqual(systemOnly.promptCache, { mode: M.PROMPT_CACHE_MODE_UNSPECIFIED, system: true });
    assert.equal(wire({ messages: [userText("hi")] }).promptCache, undefined);
  });

  test("content blocks: images, documents, cache breakpoints", () => {
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47]);
    const pdf = Buffer.from("%PDF-1.7\n");
    const none = Buffer.alloc(0);
    const cases: [string, ContentBlock, ContentBlock][] = [
      ["text", textBlock("hi"), { text: { text: "hi" }, cacheBreakpoint: false }],
      ["an inline image", imageBlock("image/png", png),
        { image: { mediaType: "image/png", data: Buffer.from(png), url: "" }, cacheBreakpoint: false }],
      ["an image by URL", imageUrlBlock("https://example.com/cat.jpg"),
        { image: { mediaType: "", data: none, url: "https://example.com/cat.jpg" }, cacheBreakpoint: false }],
      ["a PDF", documentBlock(pdf, { title: "Spec" }),
        { document: { mediaType: "application/pdf", data: pdf, url: "", title: "Spec" }, cacheBreakpoint: false }],
      ["a PDF without a title", documentBlock(pdf),
        { document: { mediaType: "application/pdf", data: pdf, url: "", title: "" }, cacheBreakpoint: false }],
      ["a PDF by URL", documentUrlBlock("https://example.com/spec.pdf", { title: "Spec" }),
        { document: { mediaType: "", data: none, url: "https://example.com/spec.pdf", title: "Spec" }, cacheBreakpoint: false }],
      ["a cache breakpoint", cacheBreakpoint(textBlock("a long preamble")), { text: { text: "a long preamble" }, cacheBreakpoint: true }],
    ];
    for (const [name, block, want] of cases) {
      assert.deepEqual(block, want, name);
      assert.deepEqual(ContentBlock.decode(ContentBlock.encode(block).finish()), ContentBlock.fromPartial(want), `${name}, on the wire`);
    }
    const tool: Tool = { name: "search", description: "", inputSchema: undefined, cacheBreakpoint: false };
    assert.equal(cacheBreakpoint(tool), tool, "the tool itself, marked");
    assert.equal(tool.cacheBreakpoint, true);
    // A partial tool (a request's plain object) takes the mark too.
    assert.deepEqual(cacheBreakpoint({ name: "fetch" }), { name: "fetch", cacheBreakpoint: true });

    const req = wire({
      messages: [
        userText("Summarise it.", imageUrlBlock("https://example.com/cat.jpg"), cacheBreakpoint(documentUrlBlock("https://example.com/spec.pdf"))),
      ],
      tools: [cacheBreakpoint({ name: "fetch" })],
    });
    assert.equal(req.messages[0]!.role, Role.ROLE_USER);
    assert.deepEqual(
      req.messages[0]!.content.map((b) => [b.text?.text ?? b.image?.url ?? b.document?.url, b.cacheBreakpoint]),
      [["Summarise it.", false], ["https://example.com/cat.jpg", false], ["https://example.com/spec.pdf", true]],
    );
    assert.equal(req.tools[0]!.cacheBreakpoint, true);
  });
});
