// Typed errors: a failed completiond status with its google.rpc details
// decoded, so that callers branch on fields instead of parsing messages.

import { type Metadata, status as GrpcStatus } from "@grpc/grpc-js";
import type { Duration } from "./gen/google/protobuf/duration";
import { BadRequest, ErrorInfo, RetryInfo } from "./gen/google/rpc/error_details";
import { Status } from "./gen/google/rpc/status";
import {
  ErrorKind,
  Result,
  TransitionReason,
  UpstreamError,
  errorKindToJSON,
  transitionReasonFromJSON,
  transitionReasonToJSON,
} from "./gen/completion/v1/completion";

/** DOMAIN is the google.rpc.ErrorInfo domain of completiond's own statuses. */
export const DOMAIN = "completiond.completion.v1";

/** DETAILS_TRAILER is the trailer that carries the binary google.rpc.Status. */
export const DETAILS_TRAILER = "grpc-status-details-bin";

/** FieldViolation is one field of a refused request and what is wrong with it. */
export interface FieldViolation {
  /** field is the field's path, e.g. "messages" or "messages[0].content". */
  field: string;
  /** description says what is wrong with it. */
  description: string;
}

/** What a CompletiondError knows besides its status (what the stream had). */
export interface ErrorContext {
  /** completionId is the completion's id, when the stream had started. */
  completionId?: string;
  /** result is the completion's result, when the stream carried one. */
  result?: Result;
  /** cause is the underlying error, e.g. grpc-js's ServiceError. */
  cause?: unknown;
}

/**
 * CompletiondError is a failed completiond call, typed: the gRPC status with
 * its details (ErrorInfo, RetryInfo, BadRequest) decoded. Every stream that
 * does not end COMPLETED ends with one.
 */
export class CompletiondError extends Error {
  /** code is the gRPC status code (grpc-js `status`, e.g. status.UNAVAILABLE = 14). */
  readonly code: GrpcStatus;
  /** codeName is the code's name in upper snake case, e.g. "UNAVAILABLE". */
  readonly codeName: string;
  /** details is the status message as the server sent it. */
  readonly details: string;
  /** reason is ErrorInfo.reason as sent, e.g. "MODEL_ERROR" ("" without ErrorInfo). */
  readonly reason: string;
  /**
   * terminalReason is the TransitionReason that reason names, or
   * TRANSITION_REASON_UNSPECIFIED when it names none (a refused request, a
   * dropped connection, a protocol violation).
   */
  readonly terminalReason: TransitionReason;
  /** domain is ErrorInfo.domain (DOMAIN for completiond's own; "" without). */
  readonly domain: string;
  /** metadata is ErrorInfo.metadata ({} without). */
  readonly metadata: Record<string, string>;
  /** retryable is true exactly when the status carries RetryInfo: the same request may succeed later. */
  readonly retryable: boolean;
  /** retryDelay is RetryInfo.retry_delay in seconds, null without RetryInfo. */
  readonly retryDelay: number | null;
  /** fieldViolations are a refused request's BadRequest field violations ([] without). */
  readonly fieldViolations: FieldViolation[];
  /** completionId is the completion's id ("" when the stream never started). */
  readonly completionId: string;
  /** result is the completion's result, when the stream carried one. */
  readonly result: Result | undefined;

  /** Use errorFromStatus or errorFromGrpc rather than this constructor. */
  constructor(code: GrpcStatus, details: string, status: Status | undefined, context: ErrorContext = {}) {
    const decoded = decodeDetails(status);
    super(describe(code, details, decoded), context.cause === undefined ? undefined : { cause: context.cause });
    this.name = "CompletiondError";
    this.code = code;
    this.codeName = codeName(code);
    this.details = details;
    this.reason = decoded.reason;
    this.terminalReason = decoded.terminalReason;
    this.domain = decoded.domain;
    this.metadata = decoded.metadata;
    this.retryable = decoded.retryDelay !== null;
    this.retryDelay = decoded.retryDelay;
    this.fieldViolations = decoded.fieldViolations;
    this.completionId = context.completionId ?? "";
    this.result = context.result;
  }

  /** withContext returns a copy of this error that also knows the stream's id and result. */
  withContext(context: ErrorContext): CompletiondError {
    const copy = Object.create(CompletiondError.prototype) as CompletiondError;
    Object.assign(copy, this, {
      completionId: context.completionId ?? this.completionId,
      result: context.result ?? this.result,
    });
    copy.stack = this.stack;
    return copy;
  }
}

/** The parts of a status's details this library reads. */
interface Decoded {
  reason: string;
  terminalReason: TransitionReason;
  domain: string;
  metadata: Record<string, string>;
  retryDelay: number | null;
  fieldViolations: FieldViolation[];
}

function decodeDetails(status: Status | undefined): Decoded {
  const out: Decoded = {
    reason: "",
    terminalReason: TransitionReason.TRANSITION_REASON_UNSPECIFIED,
    domain: "",
    metadata: {},
    retryDelay: null,
    fieldViolations: [],
  };
  for (const any of status?.details ?? []) {
    // Details of other types are skipped: a status may carry anything.
    switch (any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1)) {
      case "google.rpc.ErrorInfo": {
        const info = ErrorInfo.decode(any.value);
        out.reason = info.reason;
        out.domain = info.domain;
        out.metadata = { ...info.metadata };
        out.terminalReason = terminalReason(info.reason);
        break;
      }
      case "google.rpc.RetryInfo":
        out.retryDelay = seconds(RetryInfo.decode(any.value).retryDelay);
        break;
      case "google.rpc.BadRequest":
        for (const v of BadRequest.decode(any.value).fieldViolations) {
          out.fieldViolations.push({ field: v.field, description: v.description });
        }
        break;
    }
  }
  return out;
}

/** terminalReason maps an ErrorInfo reason ("MODEL_ERROR") to the TransitionReason it names. */
function terminalReason(reason: string): TransitionReason {
  if (reason === "") {
    return TransitionReason.TRANSITION_REASON_UNSPECIFIED;
  }
  const r = transitionReasonFromJSON("TRANSITION_REASON_" + reason);
  return r === TransitionReason.UNRECOGNIZED ? TransitionReason.TRANSITION_REASON_UNSPECIFIED : r;
}

/** seconds is a Duration in (fractional) seconds; an absent one is 0. */
export function seconds(d: Duration | undefined): number {
  return d === undefined ? 0 : d.seconds + d.nanos / 1e9;
}

/** codeName is a gRPC status code's name, e.g. "UNAVAILABLE" for 14. */
export function codeName(code: GrpcStatus): string {
  return GrpcStatus[code] ?? `CODE_${code}`;
}

function describe(code: GrpcStatus, details: string, d: Decoded): string {
  let s = `completiond: ${codeName(code)}`;
  if (d.reason !== "") s += ` (${d.reason})`;
  if (details !== "") s += `: ${details}`;
  if (d.retryDelay !== null) s += `; retry in ${d.retryDelay}s`;
  return s;
}

/**
 * errorFromStatus builds the typed error from a status: its code, its message
 * and the binary google.rpc.Status of the grpc-status-details-bin trailer
 * (raw bytes, or base64 as the golden transcripts store it; empty or absent
 * when there are no details).
 */
export function errorFromStatus(
  code: GrpcStatus,
  message: string,
  detailsBin?: Uint8Array | string,
  context: ErrorContext = {},
): CompletiondError {
  const bytes = typeof detailsBin === "string" ? Buffer.from(detailsBin, "base64") : detailsBin;
  const status = bytes !== undefined && bytes.length > 0 ? Status.decode(bytes) : undefined;
  return new CompletiondError(code, message, status, context);
}

/** What errorFromGrpc reads of grpc-js's ServiceError (or a StatusObject). */
export interface GrpcErrorLike {
  code?: number;
  details?: string;
  message?: string;
  metadata?: Metadata;
}

/**
 * errorFromGrpc types an error of a grpc-js call (a ServiceError): the code,
 * the status message and the details trailer. A CompletiondError is returned
 * as it is (with the context added); any other error becomes UNKNOWN.
 */
export function errorFromGrpc(err: unknown, context: ErrorContext = {}): CompletiondError {
  if (err instanceof CompletiondError) {
    return err.withContext(context);
  }
  const e = (typeof err === "object" && err !== null ? err : { message: String(err) }) as GrpcErrorLike;
  const code = typeof e.code === "number" ? (e.code as GrpcStatus) : GrpcStatus.UNKNOWN;
  const message = e.details ?? e.message ?? "";
  // Duck-typed: the Metadata may come from another copy of grpc-js.
  const bin = typeof e.metadata?.get === "function" ? e.metadata.get(DETAILS_TRAILER)[0] : undefined;
  const bytes = typeof bin === "string" ? Buffer.from(bin, "base64") : bin;
  return errorFromStatus(code, message, bytes, { ...context, cause: context.cause ?? err });
}

/** isCompletiondError reports whether err is a CompletiondError. */
export function isCompletiondError(err: unknown): err is CompletiondError {
  return err instanceof CompletiondError;
}

/**
 * The status code completiond answers for each terminal reason
 * (service/grpc_status.go), used only to rebuild the error of a completion
 * followed with Attach, which itself ends OK whatever the completion's end.
 */
const REASON_CODES: Partial<Record<TransitionReason, GrpcStatus>> = {
  [TransitionReason.TRANSITION_REASON_ABORTED_STREAMING]: GrpcStatus.CANCELLED,
  [TransitionReason.TRANSITION_REASON_ABORTED_TOOLS]: GrpcStatus.CANCELLED,
  [TransitionReason.TRANSITION_REASON_PROMPT_TOO_LONG]: GrpcStatus.FAILED_PRECONDITION,
  [TransitionReason.TRANSITION_REASON_BLOCKING_LIMIT]: GrpcStatus.FAILED_PRECONDITION,
  [TransitionReason.TRANSITION_REASON_IMAGE_ERROR]: GrpcStatus.FAILED_PRECONDITION,
  [TransitionReason.TRANSITION_REASON_MAX_TURNS]: GrpcStatus.RESOURCE_EXHAUSTED,
  [TransitionReason.TRANSITION_REASON_STOP_HOOK_PREVENTED]: GrpcStatus.ABORTED,
  [TransitionReason.TRANSITION_REASON_HOOK_STOPPED]: GrpcStatus.ABORTED,
};

/** The code of a MODEL_ERROR by its upstream failure's kind, as the server maps it. */
const KIND_CODES: Partial<Record<ErrorKind, GrpcStatus>> = {
  [ErrorKind.ERROR_KIND_TIMEOUT]: GrpcStatus.DEADLINE_EXCEEDED,
  [ErrorKind.ERROR_KIND_QUOTA]: GrpcStatus.RESOURCE_EXHAUSTED,
  [ErrorKind.ERROR_KIND_RATE_LIMIT]: GrpcStatus.RESOURCE_EXHAUSTED,
  [ErrorKind.ERROR_KIND_INVALID_REQUEST]: GrpcStatus.FAILED_PRECONDITION,
  [ErrorKind.ERROR_KIND_CONTENT_FILTER]: GrpcStatus.FAILED_PRECONDITION,
  [ErrorKind.ERROR_KIND_PREFILL_REJECTED]: GrpcStatus.FAILED_PRECONDITION,
  [ErrorKind.ERROR_KIND_AUTH]: GrpcStatus.INTERNAL,
  [ErrorKind.ERROR_KIND_NOT_FOUND]: GrpcStatus.INTERNAL,
};

/**
 * errorFromResult is the error a completion's Result stands for (undefined
 * when it is COMPLETED). Attach ends OK once it has sent the result, so a
 * stream that attached has no status of its own: this rebuilds it as the
 * server would — the code it maps the terminal reason (and a MODEL_ERROR's
 * upstream failure) to, its message, ErrorInfo with the reason and the
 * failure's metadata. Whether RetryInfo would have come is not known from a
 * result, so such an error is never retryable.
 */
export function errorFromResult(result: Result, completionId = ""): CompletiondError | undefined {
  if (result.reason === TransitionReason.TRANSITION_REASON_COMPLETED) return undefined;
  const name = transitionReasonToJSON(result.reason).replace(/^TRANSITION_REASON_/, "");
  const failure = result.error;
  const code = REASON_CODES[result.reason] ?? (failure === undefined ? GrpcStatus.INTERNAL : kindCode(failure.kind));
  const message = `completion ended ${name}` + (failure === undefined ? "" : `: ${failureText(failure)}`);
  const info = ErrorInfo.encode({ reason: name, domain: DOMAIN, metadata: failure === undefined ? {} : failureMetadata(failure) });
  const status = Status.fromPartial({
    code,
    message,
    details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: Buffer.from(info.finish()) }],
  });
  return new CompletiondError(code, message, status, { completionId, result });
}

/** kindCode: the code of a MODEL_ERROR; outages (and an open circuit, a lost replica) are UNAVAILABLE, the rest INTERNAL. */
function kindCode(kind: ErrorKind): GrpcStatus {
  const code = KIND_CODES[kind];
  if (code !== undefined) return code;
  switch (kind) {
    case ErrorKind.ERROR_KIND_CONNECTION:
    case ErrorKind.ERROR_KIND_OVERLOADED:
    case ErrorKind.ERROR_KIND_SERVER:
    case ErrorKind.ERROR_KIND_STREAM_BROKEN:
    case ErrorKind.ERROR_KIND_CIRCUIT_OPEN:
    case ErrorKind.ERROR_KIND_REPLICA_LOST:
      return GrpcStatus.UNAVAILABLE;
  }
  return GrpcStatus.INTERNAL;
}

/** kindName is an ErrorKind as the server names it in messages and metadata, e.g. "rate_limit". */
function kindName(kind: ErrorKind): string {
  if (kind === ErrorKind.ERROR_KIND_UNSPECIFIED || kind === ErrorKind.UNRECOGNIZED) return "unknown";
  return errorKindToJSON(kind).replace(/^ERROR_KIND_/, "").toLowerCase();
}

function failureText(e: UpstreamError): string {
  let s = kindName(e.kind);
  if (e.httpStatus !== 0) s += ` (HTTP ${e.httpStatus})`;
  if (e.message !== "") s += `: ${e.message}`;
  return s;
}

function failureMetadata(e: UpstreamError): Record<string, string> {
  const md: Record<string, string> = { error_kind: kindName(e.kind) };
  const set = (k: string, v: string) => {
    if (v !== "") md[k] = v;
  };
  set("provider", e.provider);
  set("type", e.type);
  set("code", e.code);
  set("request_id", e.requestId);
  if (e.httpStatus !== 0) md.http_status = String(e.httpStatus);
  return md;
}
