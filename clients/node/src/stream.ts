// CompletionStream: the events of one completion as an async iterable that
// keeps a Fold, types the final status, and heals a dropped connection of a
// resumable completion with Attach.

import { status as GrpcStatus } from "@grpc/grpc-js";
import type { CompletionEvent } from "./gen/completion/v1/completion";
import { CompletiondError, errorFromGrpc, errorFromResult, errorFromStatus } from "./errors";
import { Fold } from "./fold";
import { onAbort } from "./abort";

/** ReconnectPolicy says how a resumable stream attaches again after its connection dropped. */
export interface ReconnectPolicy {
  /** initialBackoffMs is the wait before the first Attach; it doubles with each failed one. */
  initialBackoffMs: number;
  /** maxBackoffMs caps the wait between Attach calls. */
  maxBackoffMs: number;
  /** windowMs bounds how long after a drop the stream keeps trying (and, for a Stream, its resume grace). */
  windowMs: number;
}

/** DEFAULT_RECONNECT: 50 ms doubling to 1 s, for up to 30 s after the drop (as the Go and Python clients). */
export const DEFAULT_RECONNECT: Readonly<ReconnectPolicy> = { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000 };

/** EventCall is a server-streaming call of CompletionEvents (grpc-js ClientReadableStream fits). */
export interface EventCall extends AsyncIterable<CompletionEvent> {
  /** cancel stops the call; it does nothing once the call has ended. */
  cancel(): void;
}

/** StreamSource is what a CompletionStream calls: the first RPC, then Attach to heal drops. */
export interface StreamSource {
  /** open starts the stream's first call. */
  open(): EventCall;
  /** attach follows completionId after afterSeq. */
  attach(completionId: string, afterSeq: number): EventCall;
  /** resumable says whether a dropped connection may be healed with attach. */
  resumable: boolean;
  /** graceMs bounds the healing too: no Attach later than this after the drop (0: the policy's window only). */
  graceMs: number;
  /** policy is the reconnect policy. */
  policy: ReconnectPolicy;
  /** signal cancels the stream when aborted. */
  signal?: AbortSignal;
  /** fold is the Fold to keep (a new one by default). */
  fold?: Fold;
  /** attached says that open itself calls Attach (Client.attach). */
  attached?: boolean;
}

/**
 * CompletionStream is one completion's events. Iterate it once with
 * `for await`; each event is folded into `fold` before it is yielded, an
 * event seen twice after a reconnect is not yielded again, and when the
 * call ends with a status other than OK the iteration throws a
 * CompletiondError that carries the fold's result and completion id.
 * Attach ends OK however the completion ended, so a stream that attached
 * throws the error its result stands for (errorFromResult) when the
 * completion did not end COMPLETED. Leaving the loop early cancels the call.
 */
export class CompletionStream implements AsyncIterable<CompletionEvent> {
  /** fold is the completion folded so far: its text, turns, transitions, result. */
  readonly fold: Fold;
  readonly #src: StreamSource;
  #iterated = false;
  #cancelled = false;
  #call: EventCall | undefined;
  #reconnects = 0;

  /** Client.stream and Client.attach make CompletionStreams; tests may make their own. */
  constructor(src: StreamSource) {
    this.#src = src;
    this.fold = src.fold ?? new Fold();
  }

  /** reconnects counts the Attach calls that healed a dropped connection. */
  get reconnects(): number {
    return this.#reconnects;
  }

  /** cancel stops the stream; the iteration then throws a CANCELLED CompletiondError. */
  cancel(): void {
    this.#cancelled = true;
    this.#call?.cancel();
  }

  /** done reads the stream to its end and resolves to the fold (or rejects with the CompletiondError). */
  async done(): Promise<Fold> {
    for await (const _ of this) {
      // Folding is all there is to do with each event.
    }
    return this.fold;
  }

  [Symbol.asyncIterator](): AsyncIterator<CompletionEvent> {
    if (this.#iterated) {
      throw new Error("a CompletionStream can be iterated only once");
    }
    this.#iterated = true;
    return this.#events();
  }

  async *#events(): AsyncGenerator<CompletionEvent, void, undefined> {
    const unlisten = onAbort(this.#src.signal, () => this.cancel());
    let failed = 0; // Attach calls in a row that brought nothing
    let droppedAt: number | undefined;
    let attached = this.#src.attached ?? false; // following with Attach, which ends OK however the completion ended
    try {
      this.#call = this.#src.open();
      for (;;) {
        let failure: unknown;
        let noResult = false;
        try {
          for await (const ev of this.#call) {
            if (this.fold.add(ev)) {
              failed = 0;
              droppedAt = undefined;
              yield ev;
            }
          }
          if (this.fold.done) {
            const ended = attached ? errorFromResult(this.fold.result!, this.fold.completionId) : undefined;
            if (ended !== undefined) throw ended;
            return;
          }
          // The server never ends OK before the result: a proxy or a
          // restarting server did. Attach may still have the rest.
          failure = errorFromStatus(GrpcStatus.INTERNAL, "the stream ended without a result");
          noResult = true;
        } catch (err) {
          failure = err;
        }
        droppedAt ??= Date.now();
        if (!this.#mayResume(failure, noResult, failed, droppedAt)) {
          throw this.#typed(failure);
        }
        await sleep(backoffMs(this.#src.policy, failed));
        failed++;
        if (this.#cancelled) throw this.#typed(failure);
        this.#reconnects++;
        attached = true;
        this.#call = this.#src.attach(this.fold.completionId, this.fold.lastSeq);
      }
    } finally {
      unlisten();
      this.#call?.cancel();
    }
  }

  #typed(err: unknown): CompletiondError {
    if (this.#cancelled && !(err instanceof CompletiondError && err.code === GrpcStatus.CANCELLED)) {
      err = { code: GrpcStatus.CANCELLED, details: "cancelled by the caller" };
    }
    return errorFromGrpc(err, { completionId: this.fold.completionId, result: this.fold.result });
  }

  /**
   * mayResume: only a resumable completion that has started and not ended,
   * only a transport failure (UNAVAILABLE without the ErrorInfo a status
   * completiond decided carries) or an end without a result, within the
   * reconnect window and the grace.
   */
  #mayResume(failure: unknown, noResult: boolean, failed: number, droppedAt: number): boolean {
    const src = this.#src;
    if (this.#cancelled || !src.resumable || this.fold.completionId === "" || this.fold.done) return false;
    const window = src.graceMs > 0 ? Math.min(src.policy.windowMs, src.graceMs) : src.policy.windowMs;
    if (Date.now() + backoffMs(src.policy, failed) - droppedAt > window) return false;
    if (noResult) return true;
    const e = errorFromGrpc(failure);
    return e.code === GrpcStatus.UNAVAILABLE && e.reason === "";
  }
}

function backoffMs(p: ReconnectPolicy, failed: number): number {
  return Math.min(p.initialBackoffMs * 2 ** failed, p.maxBackoffMs);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
