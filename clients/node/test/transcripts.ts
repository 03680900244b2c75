// Loading the shared golden transcripts (clients/testdata/README.md) and
// computing the `expect` object from what the library folds and types.

import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import {
  CompletiondError,
  CompletionEvent,
  Fold,
  SessionRequest,
  codeName,
  errorFromStatus,
  stopReasonToJSON,
  transitionReasonToJSON,
} from "../src/index";

/** TRANSCRIPTS is clients/testdata/transcripts (COMPLETIOND_TRANSCRIPTS overrides it). */
export const TRANSCRIPTS =
  process.env.COMPLETIOND_TRANSCRIPTS ?? path.resolve(__dirname, "..", "..", "..", "testdata", "transcripts");

/** Transcript is one file, as recorded. */
export interface Transcript {
  name: string;
  about: string;
  rpc: "Stream" | "Session";
  request: unknown;
  events: { wire: string; json: unknown }[];
  sent?: { after_seq: number; wire: string; json: unknown }[];
  status: { code: number; name: string; message: string; details_bin: string; details: unknown[] };
  expect: Record<string, unknown>;
}

/** transcriptFiles lists the transcript files, sorted ([] when the folder is missing). */
export function transcriptFiles(): string[] {
  let names: string[];
  try {
    names = readdirSync(TRANSCRIPTS);
  } catch {
    return [];
  }
  return names.filter((n) => n.endsWith(".json")).sort();
}

/** load reads one transcript file. */
export function load(file: string): Transcript {
  return JSON.parse(readFileSync(path.join(TRANSCRIPTS, file), "utf8")) as Transcript;
}

/** events decodes the wire bytes of a transcript's events. */
export function events(t: Transcript): CompletionEvent[] {
  return t.events.map((e) => CompletionEvent.decode(Buffer.from(e.wire, "base64")));
}

/** sent decodes the wire bytes of what a Session caller sent after start. */
export function sent(t: Transcript): { afterSeq: number; request: SessionRequest }[] {
  return (t.sent ?? []).map((s) => ({
    afterSeq: s.after_seq,
    request: SessionRequest.decode(Buffer.from(s.wire, "base64")),
  }));
}

/** statusError types a transcript's status (undefined when it is OK). */
export function statusError(t: Transcript, fold: Fold): CompletiondError | undefined {
  if (t.status.code === 0) return undefined;
  return errorFromStatus(t.status.code, t.status.message, t.status.details_bin, {
    completionId: fold.completionId,
    result: fold.result,
  });
}

/** expectOf is the `expect` object of the README computed from a fold and the typed error. */
export function expectOf(fold: Fold, err: CompletiondError | undefined): Record<string, unknown> {
  const calls = (cs: Fold["toolCalls"]) => cs.map((c) => ({ id: c.id, name: c.name, input: c.input ?? {} }));
  return {
    completion_id: fold.completionId,
    last_seq: fold.lastSeq,
    reason: fold.reason === undefined ? "" : transitionReasonToJSON(fold.reason),
    transitions: fold.transitions.map((t) => transitionReasonToJSON(t.reason)),
    discarded_attempts: fold.discardedAttempts,
    stripped_blocks: fold.strippedBlocks,
    turns: fold.turns.map((t) => ({ turn: t.turn, text: t.text, thinking: t.thinking, tool_calls: calls(t.toolCalls) })),
    text: fold.text,
    thinking: fold.thinking,
    tool_calls: calls(fold.toolCalls),
    stop_reason: fold.stopReason === undefined ? "" : stopReasonToJSON(fold.stopReason),
    stop_sequence: fold.stopSequence ?? "",
    truncated: fold.truncated,
    error: err === undefined ? null : errorOf(err),
  };
}

function errorOf(e: CompletiondError): Record<string, unknown> {
  return {
    code: codeName(e.code),
    message: e.details,
    reason: e.reason,
    terminal_reason: transitionReasonToJSON(e.terminalReason),
    domain: e.domain,
    metadata: e.metadata,
    retryable: e.retryable,
    retry_delay_seconds: e.retryDelay,
    field_violations: e.fieldViolations.map((v) => ({ field: v.field, description: v.description })),
  };
}
