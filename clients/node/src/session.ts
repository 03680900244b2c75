// The Session tool loop: start, answer each tool call and stop-hook request
// as it arrives, fold every event, type the end.

import { status as GrpcStatus } from "@grpc/grpc-js";
import {
  type CompletionEvent,
  type DeepPartial,
  SessionRequest,
  type SessionStart,
  type StopHookRequest,
  StopHookVerdict,
  type ToolCall,
  ToolResultBlock,
  Verdict,
} from "./gen/completion/v1/completion";
import { onAbort } from "./abort";
import { errorFromGrpc, errorFromStatus } from "./errors";
import { Fold } from "./fold";

/** ToolReply is what a tool callback returns: the result's text, or the whole block (halt, is_error …). */
export type ToolReply = string | DeepPartial<ToolResultBlock>;

/** StopHookReply is what a stop-hook callback returns: a Verdict, or the whole verdict (with a message). */
export type StopHookReply = Verdict | DeepPartial<StopHookVerdict>;

/**
 * CancelSession, thrown by a session callback, cancels the session: the loop
 * sends Cancel with its reason instead of an answer, answers nothing more,
 * and reads the stream to its end (ABORTED_TOOLS or ABORTED_STREAMING, a
 * CANCELLED CompletiondError).
 */
export class CancelSession extends Error {
  /** reason is sent in the Cancel and recorded in the terminal transition. */
  readonly reason: string;

  constructor(reason: string) {
    super(`session cancelled: ${reason}`);
    this.name = "CancelSession";
    this.reason = reason;
  }
}

/** SessionHandlers are the callbacks of a Session. */
export interface SessionHandlers {
  /**
   * onToolCall runs one tool call. A call arrives only once the attempt
   * that made it is settled, so running it at once is safe. A thrown error
   * becomes an is_error result carrying its message (CancelSession cancels).
   */
  onToolCall(call: ToolCall, fold: Fold): ToolReply | Promise<ToolReply>;
  /**
   * onStopHook judges a final answer (SessionStart.stopHook); without it
   * every answer is allowed (VERDICT_ALLOW). A thrown error cancels, as from onEvent.
   */
  onStopHook?(request: StopHookRequest, fold: Fold): StopHookReply | Promise<StopHookReply>;
  /**
   * onEvent sees every event (after it is folded, before it is answered). A
   * thrown CancelSession cancels the session; any other error sends Cancel
   * with its message, stops the call and rejects runSession with that error.
   */
  onEvent?(event: CompletionEvent, fold: Fold): void | Promise<void>;
}

/** SessionCall is a Session RPC's two streams (grpc-js ClientDuplexStream fits; tests use fakes). */
export interface SessionCall extends AsyncIterable<CompletionEvent> {
  /** write sends one request. */
  write(request: SessionRequest): unknown;
  /** end half-closes the sending side. */
  end(): unknown;
  /** cancel stops the call. */
  cancel(): void;
}

/**
 * runSessionOver drives the Session loop over call: it sends start, then
 * for each event folds it, calls handlers.onEvent, and answers tool calls
 * and stop-hook requests. It resolves to the Fold when the session ended
 * OK, and rejects with a CompletiondError (carrying the fold's result)
 * otherwise. Aborting signal, or a callback's CancelSession, sends Cancel:
 * the server then ends the session (ABORTED_TOOLS or ABORTED_STREAMING).
 */
export async function runSessionOver(
  call: SessionCall,
  start: SessionStart,
  handlers: SessionHandlers,
  signal?: AbortSignal,
): Promise<Fold> {
  const fold = new Fold();
  let closed = false; // Cancel sent, or the sending side ended: send nothing more
  const send = (req: DeepPartial<SessionRequest>) => {
    if (!closed) call.write(SessionRequest.fromPartial(req));
  };
  const cancel = (reason: string) => {
    send({ cancel: { reason } });
    closed = true;
  };
  const unlisten = onAbort(signal, () => cancel(abortReason(signal)));
  let ok = false;
  try {
    send({ start });
    const events = call[Symbol.asyncIterator]();
    for (;;) {
      const next = await events.next().catch((err: unknown) => {
        throw errorFromGrpc(err, { completionId: fold.completionId, result: fold.result });
      });
      if (next.done) break;
      const ev = next.value;
      if (!fold.add(ev)) continue;
      try {
        await handlers.onEvent?.(ev, fold);
        const reply = closed ? undefined : await answer(ev, handlers, fold);
        if (reply !== undefined) send(reply);
      } catch (err) {
        cancel(err instanceof CancelSession ? err.reason : errorText(err));
        if (!(err instanceof CancelSession)) throw err;
      }
      if (ev.result !== undefined && !closed) {
        closed = true;
        call.end();
      }
    }
    if (!fold.done) {
      throw errorFromStatus(GrpcStatus.INTERNAL, "the session ended without a result", undefined, {
        completionId: fold.completionId,
      });
    }
    ok = true;
    return fold;
  } finally {
    unlisten();
    if (!ok) call.cancel();
  }
}

/** answer is the request that answers ev, if it asks for one. */
async function answer(
  ev: CompletionEvent,
  handlers: SessionHandlers,
  fold: Fold,
): Promise<DeepPartial<SessionRequest> | undefined> {
  if (ev.toolCall !== undefined) {
    const result = await runTool(ev.toolCall, handlers, fold);
    return { toolResults: { results: [result] } };
  }
  if (ev.stopHookRequest !== undefined) {
    return { stopHookVerdict: await judge(ev.stopHookRequest, handlers, fold) };
  }
  return undefined;
}

/** runTool calls the tool callback; its error becomes an is_error result. */
async function runTool(call: ToolCall, handlers: SessionHandlers, fold: Fold): Promise<ToolResultBlock> {
  let reply: ToolReply;
  try {
    reply = await handlers.onToolCall(call, fold);
  } catch (err) {
    if (err instanceof CancelSession) throw err;
    return ToolResultBlock.fromPartial({ toolUseId: call.id, text: errorText(err), isError: true });
  }
  if (typeof reply === "string") {
    return ToolResultBlock.fromPartial({ toolUseId: call.id, text: reply });
  }
  return ToolResultBlock.fromPartial({ ...reply, toolUseId: reply.toolUseId || call.id });
}

/** judge calls the stop-hook callback (VERDICT_ALLOW without one). */
async function judge(req: StopHookRequest, handlers: SessionHandlers, fold: Fold): Promise<StopHookVerdict> {
  const reply = handlers.onStopHook === undefined ? Verdict.VERDICT_ALLOW : await handlers.onStopHook(req, fold);
  if (typeof reply === "number") {
    return StopHookVerdict.fromPartial({ hookId: req.hookId, verdict: reply });
  }
  return StopHookVerdict.fromPartial({ ...reply, hookId: reply.hookId || req.hookId });
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function abortReason(signal: AbortSignal | undefined): string {
  const r: unknown = signal?.reason;
  if (typeof r === "string") return r;
  if (r instanceof Error && r.name !== "AbortError") return r.message;
  return "cancelled by the caller";
}
