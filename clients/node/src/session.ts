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
import { errorFromGrpc, errorFromStatus, seconds } from "./errors";
import { Fold } from "./fold";
import { DEFAULT_RECONNECT, Drop, type ReconnectPolicy, dropped, restartable } from "./reconnect";

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
 * SessionReconnect lets runSessionOver resume a Session whose request has a
 * resumeGrace after its connection dropped.
 */
export interface SessionReconnect {
  /** open starts a new Session call; the loop sends its first message (resume). */
  open(): SessionCall;
  /** policy is the backoff and window of the reconnects (DEFAULT_RECONNECT by default). */
  policy?: ReconnectPolicy;
}

/**
 * runSessionOver drives the Session loop over call: it sends start, then
 * for each event folds it, calls handlers.onEvent, and answers tool calls
 * and stop-hook requests. It resolves to the Fold when the session ended
 * OK, and rejects with a CompletiondError (carrying the fold's result)
 * otherwise. Aborting signal, or a callback's CancelSession, sends Cancel:
 * the server then ends the session (ABORTED_TOOLS or ABORTED_STREAMING).
 *
 * With reconnect, and start.request.resumeGrace set, a call that drops
 * (UNAVAILABLE, or an end without a result) after the started event and
 * before the result is healed: after the policy's backoff, within its
 * window and the grace, the loop opens a new call whose first message is
 * resume (completion id, last seq), and sends again every answer and
 * Cancel sent since the last transition received (a transition after them
 * proves the server had them; it drops an answer it already has). Events
 * already folded are not shown to the callbacks again.
 */
export async function runSessionOver(
  call: SessionCall,
  start: SessionStart,
  handlers: SessionHandlers,
  signal?: AbortSignal,
  reconnect?: SessionReconnect,
): Promise<Fold> {
  const fold = new Fold();
  const policy = reconnect?.policy ?? DEFAULT_RECONNECT;
  const graceMs = seconds(start.request?.resumeGrace) * 1000;
  const windowMs = reconnect === undefined ? 0 : Math.min(policy.windowMs, graceMs);
  let closed = false; // Cancel sent, or the sending side ended: send nothing more
  // unconfirmed are the answers (and a Cancel) sent since the last
  // transition: the server waits for answers before it decides anything,
  // so a transition after them says they arrived.
  let unconfirmed: SessionRequest[] = [];
  const write = (req: SessionRequest) => {
    try {
      call.write(req);
    } catch {
      // A call that broke: the events still to come and its status say how.
    }
  };
  const send = (req: DeepPartial<SessionRequest>) => {
    if (closed) return;
    const r = SessionRequest.fromPartial(req);
    if (r.toolResults !== undefined || r.stopHookVerdict !== undefined || r.cancel !== undefined) unconfirmed.push(r);
    write(r);
  };
  const cancel = (reason: string) => {
    send({ cancel: { reason } });
    closed = true;
  };
  const unlisten = onAbort(signal, () => cancel(abortReason(signal)));
  let drop = new Drop();
  /** follow reads call to its end, answering each event; it returns how the call ended (undefined: OK). */
  const follow = async (): Promise<unknown> => {
    const events = call[Symbol.asyncIterator]();
    for (;;) {
      let next: IteratorResult<CompletionEvent>;
      try {
        next = await events.next();
      } catch (err) {
        return err;
      }
      if (next.done) return undefined;
      const ev = next.value;
      if (!fold.add(ev)) continue; // a resumed call may repeat what was folded
      drop = new Drop(); // events flow again: a later drop starts afresh
      if (ev.transition !== undefined) unconfirmed = [];
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
  };
  let ok = false;
  try {
    send({ start });
    for (;;) {
      const failure = await follow();
      if (failure === undefined && fold.done) break;
      // A start with an idempotencyKey that dropped before started is sent
      // again with it: the server attaches it to the Session the first one
      // began, if it did (restartable; with or without a grace).
      if (reconnect !== undefined && !closed && (start.request?.idempotencyKey ?? "") !== "" && restartable(failure, fold)) {
        if (!(await drop.pause(policy, policy.windowMs, failure))) throw ended(failure, fold);
        call.cancel();
        try {
          call = reconnect.open();
        } catch (err) {
          throw ended(err, fold);
        }
        write(SessionRequest.fromPartial({ start }));
        continue;
      }
      if (reconnect === undefined || windowMs <= 0 || !dropped(failure, fold) || !(await drop.pause(policy, windowMs, failure))) {
        throw ended(failure, fold);
      }
      call.cancel();
      try {
        call = reconnect.open();
      } catch (err) {
        throw ended(err, fold);
      }
      write(SessionRequest.fromPartial({ resume: { completionId: fold.completionId, afterSeq: fold.lastSeq } }));
      for (const req of unconfirmed) write(req);
    }
    ok = true;
    return fold;
  } finally {
    unlisten();
    if (!ok) call.cancel();
  }
}

/** ended is the typed error of a call that ended with failure (undefined: OK without a result). */
function ended(failure: unknown, fold: Fold) {
  if (failure === undefined) {
    // The server never ends a session OK without its result.
    return errorFromStatus(GrpcStatus.INTERNAL, "the session ended without a result", undefined, {
      completionId: fold.completionId,
    });
  }
  return errorFromGrpc(failure, { completionId: fold.completionId, result: fold.result });
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
