// CompletionStream: the events of one completion as an async iterable that
// keeps a Fold, types the final status, and heals a dropped connection of a
// resumable completion with Attach.

import { status as GrpcStatus } from "@grpc/grpc-js";
import type { CompletionEvent } from "./gen/completion/v1/completion";
import { CompletiondError, errorFromGrpc, errorFromStatus } from "./errors";
import { Fold } from "./fold";
import { onAbort } from "./abort";
import { DEFAULT_RECONNECT, Drop, type ReconnectPolicy, dropped, restartable } from "./reconnect";

export { DEFAULT_RECONNECT, type ReconnectPolicy };

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
  /** restart says that open is a start with an idempotencyKey, called again after a drop before started (restartable). */
  restart?: boolean;
}

/**
 * CompletionStream is one completion's events. Iterate it once with
 * `for await`; each event is folded into `fold` before it is yielded, an
 * event seen twice after a reconnect is not yielded again, and when the
 * call ends with a status other than OK the iteration throws a
 * CompletiondError that carries the fold's result and completion id.
 * Attach ends with the status the completion's own stream ended with, so a
 * stream that attached throws the completion's real error like any other.
 * Leaving the loop early cancels the call.
 */
export class CompletionStream implements AsyncIterable<CompletionEvent> {
  /** fold is the completion folded so far: its text, turns, transitions, result. */
  readonly fold: Fold;
  readonly #src: StreamSource;
  #iterated = false;
  #cancelled = false;
  #call: EventCall | undefined;
  #reconnects = 0;
  #restarts = 0;

  /** Client.stream and Client.attach make CompletionStreams; tests may make their own. */
  constructor(src: StreamSource) {
    this.#src = src;
    this.fold = src.fold ?? new Fold();
  }

  /** reconnects counts the Attach calls that healed a dropped connection. */
  get reconnects(): number {
    return this.#reconnects;
  }

  /** restarts counts the starts sent again after a drop before the started event. */
  get restarts(): number {
    return this.#restarts;
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
    let drop = new Drop();
    try {
      this.#call = this.#src.open();
      for (;;) {
        let failure: unknown;
        try {
          for await (const ev of this.#call) {
            if (this.fold.add(ev)) {
              drop = new Drop(); // events flow again: a later drop starts afresh
              yield ev;
            }
          }
          if (this.fold.done) return;
        } catch (err) {
          failure = err;
        }
        const restart = !this.#cancelled && this.#src.restart === true && restartable(failure, this.fold);
        if (restart) {
          if (!(await drop.pause(this.#src.policy, this.#src.policy.windowMs, failure))) {
            throw this.#typed(failure ?? errorFromStatus(GrpcStatus.INTERNAL, "the stream ended without a result"));
          }
          if (this.#cancelled) throw this.#typed(failure);
          this.#restarts++;
          this.#call = this.#src.open();
          continue;
        }
        if (!this.#resumable(failure) || !(await drop.pause(this.#src.policy, this.#window(), failure))) {
          // The server never ends OK before the result: a proxy or a
          // restarting server did.
          throw this.#typed(failure ?? errorFromStatus(GrpcStatus.INTERNAL, "the stream ended without a result"));
        }
        if (this.#cancelled) throw this.#typed(failure);
        this.#reconnects++;
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

  /** resumable: only a resumable completion, not cancelled, whose call dropped (see dropped). */
  #resumable(failure: unknown): boolean {
    return !this.#cancelled && this.#src.resumable && dropped(failure, this.fold);
  }

  /** window is how long after a drop the stream may attach: the policy's, within the grace. */
  #window(): number {
    const src = this.#src;
    return src.graceMs > 0 ? Math.min(src.policy.windowMs, src.graceMs) : src.policy.windowMs;
  }
}
