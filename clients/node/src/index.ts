// @completiond/client: the TypeScript client library of completiond.
//
// - Client connects (plain, TLS or mTLS, optional API key) or wraps a stub,
//   and offers stream, attach, complete, runSession, cancel and listRoutes.
// - Fold folds a completion's events into its answer as the stream contract
//   says (kept deltas per attempt and turn, discarded attempts, tool calls,
//   the result); every stream keeps one.
// - CompletiondError is a failed status, typed: the terminal transition
//   reason, RetryInfo, field violations, and the result when there was one.
//
// The generated messages and enums (ts-proto) are re-exported as they are.

export { Client, DEFAULT_ADDRESS, defaultAddress, withIdempotencyKey } from "./client";
export type { CallOptions, ClientOptions, CompleteRequestInit, SessionStartInit, TlsOptions } from "./client";
export { CompletionStream, DEFAULT_RECONNECT } from "./stream";
export type { EventCall, ReconnectPolicy, StreamSource } from "./stream";
export { Fold } from "./fold";
export type { Turn } from "./fold";
export { CancelSession, runSessionOver } from "./session";
export type { SessionCall, SessionHandlers, SessionReconnect, StopHookReply, ToolReply } from "./session";
export {
  CompletiondError,
  DETAILS_TRAILER,
  DOMAIN,
  codeName,
  errorFromGrpc,
  errorFromStatus,
  isCompletiondError,
  seconds,
} from "./errors";
export type { ErrorContext, FieldViolation, GrpcErrorLike } from "./errors";
export {
  cacheBreakpoint,
  documentBlock,
  documentUrlBlock,
  duration,
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
} from "./messages";
export type { DocumentOptions, PromptCacheOptions, ToolChoiceOptions } from "./messages";
export * from "./gen/completion/v1/completion";
export { Duration } from "./gen/google/protobuf/duration";
export { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
