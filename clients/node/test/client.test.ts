// The Client over real grpc-js, against an in-process fake server on
// loopback: the API key and metadata on the wire, the status trailer typed,
// a stream and a Session through real HTTP/2, wrapping a stub or a channel.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Server, ServerCredentials, credentials, type sendUnaryData, type ServerUnaryCall, type ServerWritableStream, type ServerDuplexStream, Metadata } from "@grpc/grpc-js";
import {
  AttachRequest,
  CancelRequest,
  CancelResponse,
  Client,
  CompleteRequest,
  CompleteResponse,
  CompletiondError,
  CompletionClient,
  CompletionEvent,
  CompletionService,
  GrpcStatus,
  ListRoutesRequest,
  ListRoutesResponse,
  PromptCacheMode,
  ReasoningEffort,
  SessionRequest,
  ToolChoiceMode,
  TransitionReason,
  cacheBreakpoint,
  documentBlock,
  imageUrlBlock,
  promptCacheCaller,
  toolChoiceTool,
  userText,
} from "../src/index";
import { Events, detailsBin } from "./build";

/** seen records the metadata of every call the fake server received. */
const seen: Metadata[] = [];
/** peers records the client address of every Complete call: one per connection. */
const peers: string[] = [];
/** requests records the request of every Stream and Complete call, as the server decoded it. */
const requests: CompleteRequest[] = [];

function answer(): CompletionEvent[] {
  const e = new Events();
  return [e.started("cmpl_fake"), e.text(1, "Hello"), e.text(1, " there"), e.completed(1), e.result(1, "Hello there")];
}

const BAD = detailsBin(GrpcStatus.INVALID_ARGUMENT, "invalid request", { violations: [["messages", "at least one message is required"]] });

/** failWith ends a call with a status carrying details, as completiond does. */
function statusOf(code: GrpcStatus, message: string, bin: string) {
  const md = new Metadata();
  md.set("grpc-status-details-bin", Buffer.from(bin, "base64"));
  return { code, details: message, metadata: md };
}

const impl = {
  stream(call: ServerWritableStream<CompleteRequest, CompletionEvent>) {
    seen.push(call.metadata);
    requests.push(call.request);
    for (const ev of answer()) call.write(ev);
    call.end();
  },
  complete(call: ServerUnaryCall<CompleteRequest, CompleteResponse>, cb: sendUnaryData<CompleteResponse>) {
    seen.push(call.metadata);
    peers.push(call.getPeer());
    requests.push(call.request);
    if (call.request.messages.length === 0) return cb(statusOf(GrpcStatus.INVALID_ARGUMENT, "invalid request", BAD), null);
    cb(null, CompleteResponse.fromPartial({ completionId: "cmpl_fake", result: answer().at(-1)!.result }));
  },
  session(call: ServerDuplexStream<SessionRequest, CompletionEvent>) {
    seen.push(call.metadata);
    const e = new Events();
    call.on("data", (req: SessionRequest) => {
      if (req.start) {
        call.write(e.started("cmpl_sess"));
        call.write(e.toolCall(1, "toolu_1"));
      } else if (req.toolResults) {
        const text = req.toolResults.results[0]!.text;
        call.write(e.transition(1, TransitionReason.TRANSITION_REASON_NEXT_TURN, { turn: 2 }));
        call.write(e.text(2, `The tool said ${text}.`, 2));
        call.write(e.transition(2, TransitionReason.TRANSITION_REASON_HOOK_STOPPED, { terminal: true, turn: 2 }));
        call.write(e.result(2, `The tool said ${text}.`, 2, TransitionReason.TRANSITION_REASON_HOOK_STOPPED));
        const bin = detailsBin(GrpcStatus.ABORTED, "completion ended HOOK_STOPPED", { reason: "HOOK_STOPPED" });
        call.emit("error", statusOf(GrpcStatus.ABORTED, "completion ended HOOK_STOPPED", bin));
      }
    });
  },
  cancel(call: ServerUnaryCall<CancelRequest, CancelResponse>, cb: sendUnaryData<CancelResponse>) {
    seen.push(call.metadata);
    if (call.request.completionId === "cmpl_gone") {
      const bin = detailsBin(GrpcStatus.NOT_FOUND, "no completion", { reason: "COMPLETION_NOT_FOUND" });
      return cb(statusOf(GrpcStatus.NOT_FOUND, "no completion", bin), null);
    }
    cb(null, CancelResponse.fromPartial({ reason: TransitionReason.TRANSITION_REASON_ABORTED_STREAMING, code: 1, resultSeq: 7 }));
  },
  listRoutes(call: ServerUnaryCall<ListRoutesRequest, ListRoutesResponse>, cb: sendUnaryData<ListRoutesResponse>) {
    seen.push(call.metadata);
    cb(null, ListRoutesResponse.fromPartial({ routes: [{ name: "sim", isDefault: true, capabilities: { prefill: true } }, { name: "sim-large", circuitOpen: true }] }));
  },
  attach(call: ServerWritableStream<AttachRequest, CompletionEvent>) {
    seen.push(call.metadata);
    for (const ev of answer().filter((ev) => ev.seq > call.request.afterSeq)) call.write(ev);
    call.end();
  },
};

describe("Client over grpc-js", { timeout: 10_000 }, () => {
  const server = new Server();
  let addr = "";

  before(async () => {
    server.addService(CompletionService, impl);
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    addr = `127.0.0.1:${port}`;
  });

  after(() => server.forceShutdown());

  test("stream: events folded; the API key and the call's metadata are sent", async () => {
    const c = new Client(addr, { apiKey: "k-123" });
    try {
      const s = c.stream({ messages: [userText("hi")] }, { metadata: { "x-request-id": "r-1" } });
      const fold = await s.done();
      assert.equal(fold.text, "Hello there");
      assert.equal(fold.completionId, "cmpl_fake");
      const md = seen.at(-1)!;
      assert.deepEqual(md.get("authorization"), ["Bearer k-123"]);
      assert.deepEqual(md.get("x-request-id"), ["r-1"]);
    } finally {
      c.close();
    }
  });

  test("stream and complete: sampling, stop sequences, tool choice and the total output bound reach the server", async () => {
    const c = new Client(addr);
    const request = {
      messages: [userText("hi")],
      tools: [{ name: "search" }],
      temperature: 0.5,
      topP: 0.9,
      topK: 40,
      seed: 7,
      stopSequences: ["\n\nHuman:"],
      toolChoice: toolChoiceTool("search", { disableParallelToolUse: true }),
      maxTotalOutputTokens: 2000,
    };
    try {
      await c.stream(request).done();
      await c.complete(request);
      for (const got of requests.slice(-2)) {
        assert.equal(got.temperature, 0.5);
        assert.equal(got.topP, 0.9);
        assert.equal(got.topK, 40);
        assert.equal(got.seed, 7);
        assert.deepEqual(got.stopSequences, ["\n\nHuman:"]);
        assert.deepEqual(got.toolChoice, { mode: ToolChoiceMode.TOOL_CHOICE_MODE_TOOL, name: "search", disableParallelToolUse: true });
        assert.equal(got.maxTotalOutputTokens, 2000);
      }
    } finally {
      c.close();
    }
  });

  test("stream and complete: reasoning, the prompt cache, images by URL, documents and cache breakpoints reach the server", async () => {
    const c = new Client(addr);
    const pdf = Buffer.from("%PDF-1.7\n");
    const request = {
      messages: [userText("Compare them.", imageUrlBlock("https://example.com/cat.jpg"), cacheBreakpoint(documentBlock(pdf, { title: "Spec" })))],
      tools: [cacheBreakpoint({ name: "search" })],
      reasoning: { effort: ReasoningEffort.REASONING_EFFORT_LOW, interleaved: true },
      promptCache: promptCacheCaller({ system: true }),
    };
    try {
      await c.stream(request).done();
      await c.complete(request);
      for (const got of requests.slice(-2)) {
        assert.deepEqual(got.reasoning, { effort: ReasoningEffort.REASONING_EFFORT_LOW, budgetTokens: 0, interleaved: true });
        assert.deepEqual(got.promptCache, { mode: PromptCacheMode.PROMPT_CACHE_MODE_CALLER, system: true });
        const [text, image, doc] = got.messages[0]!.content;
        assert.equal(text!.text?.text, "Compare them.");
        assert.equal(image!.image?.url, "https://example.com/cat.jpg");
        assert.deepEqual(doc!.document, { mediaType: "application/pdf", data: pdf, url: "", title: "Spec" });
        assert.deepEqual([text!.cacheBreakpoint, image!.cacheBreakpoint, doc!.cacheBreakpoint], [false, false, true]);
        assert.equal(got.tools[0]!.cacheBreakpoint, true);
      }
    } finally {
      c.close();
    }
  });

  test("complete: a status with details becomes a CompletiondError with its field violations", async () => {
    const c = new Client(addr);
    try {
      const resp = await c.complete({ messages: [userText("hi")] });
      assert.equal(resp.completionId, "cmpl_fake");
      assert.equal(seen.at(-1)!.get("authorization").length, 0, "no key, no header");
      await assert.rejects(c.complete({}), (err: unknown) => {
        assert.ok(err instanceof CompletiondError);
        assert.equal(err.codeName, "INVALID_ARGUMENT");
        assert.equal(err.details, "invalid request");
        assert.deepEqual(err.fieldViolations, [{ field: "messages", description: "at least one message is required" }]);
        return true;
      });
    } finally {
      c.close();
    }
  });

  test("cancel: the response as the server answered, a refusal typed with the id", async () => {
    const c = new Client(addr, { apiKey: "k-123" });
    try {
      const resp = await c.cancel("cmpl_running");
      assert.deepEqual(resp, CancelResponse.fromPartial({ reason: TransitionReason.TRANSITION_REASON_ABORTED_STREAMING, code: 1, resultSeq: 7 }));
      assert.deepEqual(seen.at(-1)!.get("authorization"), ["Bearer k-123"]);
      await assert.rejects(c.cancel("cmpl_gone"), (err: unknown) => {
        assert.ok(err instanceof CompletiondError);
        assert.equal(err.codeName, "NOT_FOUND");
        assert.equal(err.reason, "COMPLETION_NOT_FOUND");
        assert.equal(err.completionId, "cmpl_gone");
        assert.equal(err.retryable, false);
        return true;
      });
    } finally {
      c.close();
    }
  });

  test("listRoutes: the routes, in the server's order", async () => {
    const c = new Client(addr);
    try {
      const routes = await c.listRoutes();
      assert.deepEqual(routes.map((r) => r.name), ["sim", "sim-large"]);
      assert.equal(routes[0]!.isDefault, true);
      assert.equal(routes[0]!.capabilities!.prefill, true);
      assert.equal(routes[1]!.circuitOpen, true);
    } finally {
      c.close();
    }
  });

  test("runSession: the tool result goes out, the typed end comes back with the result", async () => {
    const c = new Client(addr);
    try {
      await assert.rejects(c.runSession({ request: { messages: [userText("hi")] } }, { onToolCall: () => "42" }), (err: unknown) => {
        assert.ok(err instanceof CompletiondError);
        assert.equal(err.codeName, "ABORTED");
        assert.equal(err.terminalReason, TransitionReason.TRANSITION_REASON_HOOK_STOPPED);
        assert.equal(err.completionId, "cmpl_sess");
        assert.equal(err.result?.message?.content[0]?.text?.text, "The tool said 42.");
        return true;
      });
    } finally {
      c.close();
    }
  });

  test("wrapping a generated stub, or a channel", async () => {
    const stub = new CompletionClient(addr, credentials.createInsecure());
    const wrapped = new Client(stub);
    assert.equal(wrapped.stub, stub);
    const rest = await wrapped.attach("cmpl_fake", 2).done();
    assert.equal(rest.lastSeq, 5);
    assert.equal(rest.text, " there");
    const onChannel = new Client("ignored:1", { channel: stub.getChannel() });
    assert.equal((await onChannel.complete({ messages: [userText("hi")] })).completionId, "cmpl_fake");
    stub.close();
  });

  test("connections: each call on the next of that many connections", async () => {
    for (const [connections, want] of [[undefined, 1], [1, 1], [3, 3]] as const) {
      const c = new Client(addr, { connections });
      try {
        peers.length = 0;
        for (let i = 0; i < 6; i++) await c.complete({ messages: [userText("hi")] });
        assert.equal(new Set(peers).size, want, `connections ${connections}: peers ${peers.join(" ")}`);
      } finally {
        c.close();
      }
    }
  });

  test("a connection refused is UNAVAILABLE, typed", async () => {
    const c = new Client("127.0.0.1:1");
    try {
      await assert.rejects(c.complete({ messages: [userText("hi")] }, { deadline: Date.now() + 2000 }), (err: unknown) => {
        assert.ok(err instanceof CompletiondError);
        assert.ok(["UNAVAILABLE", "DEADLINE_EXCEEDED"].includes(err.codeName), err.codeName);
        assert.equal(err.reason, "");
        return true;
      });
    } finally {
      c.close();
    }
  });
});
