// Builders of events and statuses for the unit tests.

import { Any } from "../src/gen/google/protobuf/any";
import { BadRequest, ErrorInfo, RetryInfo } from "../src/gen/google/rpc/error_details";
import { Status } from "../src/gen/google/rpc/status";
import {
  CompletionEvent,
  type DeepPartial,
  DeltaKind,
  Role,
  StopReason,
  TransitionReason,
} from "../src/index";

/** Events numbers the events it builds 1, 2, 3 … like one completion's stream. */
export class Events {
  seq = 0;

  ev(attempt: number, turn: number, body: DeepPartial<CompletionEvent>): CompletionEvent {
    return CompletionEvent.fromPartial({ ...body, seq: ++this.seq, attempt, turn });
  }

  started(id = "cmpl_test"): CompletionEvent {
    return this.ev(0, 1, { started: { completionId: id, route: "sim", model: "sim-1", provider: "sim" } });
  }

  text(attempt: number, text: string, turn = 1): CompletionEvent {
    return this.ev(attempt, turn, { delta: { kind: DeltaKind.DELTA_KIND_TEXT, text } });
  }

  thinking(attempt: number, text: string, turn = 1): CompletionEvent {
    return this.ev(attempt, turn, { delta: { kind: DeltaKind.DELTA_KIND_THINKING, text } });
  }

  toolCall(attempt: number, id: string, turn = 1, input: Record<string, unknown> = { city: "Oslo" }): CompletionEvent {
    return this.ev(attempt, turn, { toolCall: { id, name: "get_weather", input } });
  }

  transition(attempt: number, reason: TransitionReason, opts: { discarded?: number[]; turn?: number; terminal?: boolean } = {}) {
    const discarded = opts.discarded ?? [];
    return this.ev(attempt, opts.turn ?? 1, {
      transition: {
        reason,
        terminal: opts.terminal ?? false,
        discardOutput: discarded.includes(attempt),
        discardedAttempts: discarded,
      },
    });
  }

  completed(attempt: number, turn = 1): CompletionEvent {
    return this.transition(attempt, TransitionReason.TRANSITION_REASON_COMPLETED, { terminal: true, turn });
  }

  result(attempt: number, text: string, turn = 1, reason = TransitionReason.TRANSITION_REASON_COMPLETED): CompletionEvent {
    return this.ev(attempt, turn, {
      result: {
        reason,
        stopReason: StopReason.STOP_REASON_END_TURN,
        message: { role: Role.ROLE_ASSISTANT, content: text === "" ? [] : [{ text: { text } }] },
      },
    });
  }
}

/** detailsBin is the base64 google.rpc.Status of the grpc-status-details-bin trailer. */
export function detailsBin(
  code: number,
  message: string,
  d: { reason?: string; metadata?: Record<string, string>; retrySeconds?: number; retryNanos?: number; violations?: [string, string][] },
): string {
  const details: Any[] = [];
  if (d.reason !== undefined) {
    const info = ErrorInfo.encode({ reason: d.reason, domain: "completiond.completion.v1", metadata: d.metadata ?? {} });
    details.push({ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: Buffer.from(info.finish()) });
  }
  if (d.retrySeconds !== undefined) {
    const retry = RetryInfo.encode({ retryDelay: { seconds: d.retrySeconds, nanos: d.retryNanos ?? 0 } });
    details.push({ typeUrl: "type.googleapis.com/google.rpc.RetryInfo", value: Buffer.from(retry.finish()) });
  }
  if (d.violations !== undefined) {
    const bad = BadRequest.encode({ fieldViolations: d.violations.map(([field, description]) => ({ field, description, reason: "", localizedMessage: undefined })) });
    details.push({ typeUrl: "type.googleapis.com/google.rpc.BadRequest", value: Buffer.from(bad.finish()) });
  }
  return Buffer.from(Status.encode({ code, message, details }).finish()).toString("base64");
}
