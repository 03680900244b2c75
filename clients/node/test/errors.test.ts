// Typed errors: google.rpc.Status details decoded from the trailer's bytes.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Metadata } from "@grpc/grpc-js";
import {
  CompletiondError,
  GrpcStatus,
  TransitionReason,
  errorFromGrpc,
  errorFromStatus,
  isCompletiondError,
} from "../src/index";
import { Events, detailsBin } from "./build";
import { serviceError } from "./fakes";

describe("errorFromStatus", { timeout: 10_000 }, () => {
  test("ErrorInfo, RetryInfo: the terminal reason, retryable and the delay in seconds", () => {
    const bin = detailsBin(14, "completion ended MODEL_ERROR", {
      reason: "MODEL_ERROR",
      metadata: { error_kind: "overloaded" },
      retrySeconds: 2,
      retryNanos: 562_500_000,
    });
    const e = errorFromStatus(GrpcStatus.UNAVAILABLE, "completion ended MODEL_ERROR", bin);
    assert.ok(e instanceof CompletiondError && e instanceof Error);
    assert.equal(e.code, GrpcStatus.UNAVAILABLE);
    assert.equal(e.codeName, "UNAVAILABLE");
    assert.equal(e.details, "completion ended MODEL_ERROR");
    assert.equal(e.reason, "MODEL_ERROR");
    assert.equal(e.terminalReason, TransitionReason.TRANSITION_REASON_MODEL_ERROR);
    assert.equal(e.domain, "completiond.completion.v1");
    assert.deepEqual(e.metadata, { error_kind: "overloaded" });
    assert.equal(e.retryable, true);
    assert.equal(e.retryDelay, 2.5625);
    assert.deepEqual(e.fieldViolations, []);
    assert.match(e.message, /UNAVAILABLE \(MODEL_ERROR\): completion ended MODEL_ERROR; retry in 2.5625s/);
  });

  test("BadRequest: the field violations; no ErrorInfo names no transition", () => {
    const bin = detailsBin(3, "invalid request", {
      violations: [
        ["messages", "at least one message is required"],
        ["max_output_tokens", "must be between 1 and 64000, got 0"],
      ],
    });
    const e = errorFromStatus(GrpcStatus.INVALID_ARGUMENT, "invalid request", Buffer.from(bin, "base64"));
    assert.equal(e.codeName, "INVALID_ARGUMENT");
    assert.equal(e.reason, "");
    assert.equal(e.terminalReason, TransitionReason.TRANSITION_REASON_UNSPECIFIED);
    assert.equal(e.retryable, false);
    assert.equal(e.retryDelay, null);
    assert.deepEqual(e.fieldViolations, [
      { field: "messages", description: "at least one message is required" },
      { field: "max_output_tokens", description: "must be between 1 and 64000, got 0" },
    ]);
  });

  test("an ErrorInfo reason that is no transition maps to UNSPECIFIED", () => {
    const e = errorFromStatus(GrpcStatus.INVALID_ARGUMENT, "x", detailsBin(3, "x", { reason: "SESSION_PROTOCOL" }));
    assert.equal(e.reason, "SESSION_PROTOCOL");
    assert.equal(e.terminalReason, TransitionReason.TRANSITION_REASON_UNSPECIFIED);
  });

  test("no details: empty fields", () => {
    for (const bin of [undefined, "", new Uint8Array()]) {
      const e = errorFromStatus(GrpcStatus.CANCELLED, "Cancelled on client", bin);
      assert.equal(e.reason, "");
      assert.equal(e.domain, "");
      assert.deepEqual(e.metadata, {});
      assert.equal(e.retryable, false);
      assert.equal(e.completionId, "");
      assert.equal(e.result, undefined);
    }
  });

  test("the context: completion id and result", () => {
    const e = new Events();
    const result = e.result(1, "partial").result!;
    const err = errorFromStatus(GrpcStatus.ABORTED, "stopped", undefined, { completionId: "cmpl_1", result });
    assert.equal(err.completionId, "cmpl_1");
    assert.equal(err.result, result);
  });
});

describe("errorFromGrpc", { timeout: 10_000 }, () => {
  test("a grpc-js ServiceError: code, details and the grpc-status-details-bin trailer", () => {
    const bin = detailsBin(8, "rate limited", { reason: "MODEL_ERROR", retrySeconds: 30 });
    const e = errorFromGrpc(serviceError({ code: 8, message: "rate limited", detailsBin: bin }), { completionId: "cmpl_2" });
    assert.equal(e.codeName, "RESOURCE_EXHAUSTED");
    assert.equal(e.details, "rate limited");
    assert.equal(e.terminalReason, TransitionReason.TRANSITION_REASON_MODEL_ERROR);
    assert.equal(e.retryDelay, 30);
    assert.equal(e.completionId, "cmpl_2");
    assert.ok(e.cause instanceof Error);
  });

  test("a trailer grpc-js left base64 is decoded too", () => {
    const md = new Metadata();
    const bin = detailsBin(14, "x", { reason: "ABORTED_STREAMING", retrySeconds: 1 });
    md.set("grpc-status-details-bin", Buffer.from(bin, "base64"));
    const e = errorFromGrpc({ code: 14, details: "x", metadata: md });
    assert.equal(e.terminalReason, TransitionReason.TRANSITION_REASON_ABORTED_STREAMING);
  });

  test("a CompletiondError stays itself, with the context added", () => {
    const first = errorFromStatus(GrpcStatus.ABORTED, "stopped");
    const again = errorFromGrpc(first, { completionId: "cmpl_3" });
    assert.ok(isCompletiondError(again));
    assert.equal(again.completionId, "cmpl_3");
    assert.equal(again.codeName, "ABORTED");
  });

  test("anything else is UNKNOWN with its message", () => {
    const e = errorFromGrpc(new TypeError("boom"));
    assert.equal(e.codeName, "UNKNOWN");
    assert.equal(e.details, "boom");
    assert.equal(errorFromGrpc("text").details, "text");
  });
});
