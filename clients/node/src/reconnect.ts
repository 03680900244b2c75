// Healing a dropped connection, shared by the stream (which attaches again)
// and the Session loop (which resumes): when a drop may be healed, and how
// long to wait before each try.

import { randomBytes } from "node:crypto";
import { status as GrpcStatus } from "@grpc/grpc-js";
import { errorFromGrpc } from "./errors";
import type { Fold } from "./fold";

/**
 * ReconnectPolicy says how a resumable stream attaches again, or a Session
 * resumes, after its connection dropped. Each pause is drawn with full
 * jitter, uniformly between 0 and the backoff of that try, so that the
 * callers of a replica that died do not all come back to the survivors at
 * the same instant; a status that carries RetryInfo (OVERLOADED: 1 s) makes
 * the pause at least its delay.
 */
export interface ReconnectPolicy {
  /** initialBackoffMs is the most the pause before the first reconnect may be; it doubles with each failed one. */
  initialBackoffMs: number;
  /** maxBackoffMs caps the backoff. */
  maxBackoffMs: number;
  /** windowMs bounds how long after a drop the stream keeps trying (and, for a Stream or Session, its resume grace). */
  windowMs: number;
  /** random returns the fraction, in [0, 1), of the backoff a pause waits (default Math.random; tests set it). */
  random?: () => number;
}

/** DEFAULT_RECONNECT: pauses of up to 50 ms doubling to 1 s, for up to 30 s after the drop (as the Go and Python clients). */
export const DEFAULT_RECONNECT: Readonly<ReconnectPolicy> = { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000 };

/** backoffMs is the backoff of reconnect number tries (1-based) since the drop: the longest its pause may be. */
export function backoffMs(p: ReconnectPolicy, tries: number): number {
  return Math.min(p.initialBackoffMs * 2 ** (tries - 1), p.maxBackoffMs);
}

/**
 * waitMs is the pause before reconnect number tries after a drop whose
 * status asked for floorMs (its RetryInfo delay): a random part of the
 * backoff, at least floorMs.
 */
export function waitMs(p: ReconnectPolicy, tries: number, floorMs = 0): number {
  const random = p.random ?? Math.random;
  return Math.max(random() * backoffMs(p, tries), floorMs);
}

/** retryDelayMs is the RetryInfo delay of the status a call failed with, 0 without one (or without a failure). */
export function retryDelayMs(failure: unknown): number {
  if (failure === undefined) return 0;
  return (errorFromGrpc(failure).retryDelay ?? 0) * 1000;
}

/** Drop is one broken connection being healed: when it broke, and the reconnects tried since. */
export class Drop {
  #at: number | undefined;
  #tries = 0;

  /**
   * pause waits before the next reconnect after failure (the drop's error,
   * undefined for a call that ended OK) and resolves true, or resolves
   * false at once when the window since the drop would be over by then.
   */
  async pause(policy: ReconnectPolicy, windowMs: number, failure?: unknown): Promise<boolean> {
    const now = Date.now();
    this.#at ??= now;
    this.#tries++;
    const wait = waitMs(policy, this.#tries, retryDelayMs(failure));
    if (now + wait > this.#at + windowMs) return false;
    await new Promise((resolve) => setTimeout(resolve, wait));
    return true;
  }
}

/**
 * dropped reports whether a call of fold's completion that ended with
 * failure (undefined: it ended OK) is one to reconnect after — the rule the
 * three client libraries share (docs/clients.md, pinned by
 * clients/testdata/reconnect.json): before the result and once the
 * completion has an id, an end without a status (the stream cut) or
 * UNAVAILABLE, with or without ErrorInfo — a transport drop, a replica that
 * lost the completion's lease, Redis away, an attach refused as OVERLOADED.
 * The server's word on the completion itself only ever follows the result;
 * before it, UNAVAILABLE is about this connection or replica, and the
 * completion's log, which a reconnect replays, is the truth. Every other
 * code is final.
 */
export function dropped(failure: unknown, fold: Fold): boolean {
  if (fold.done || fold.completionId === "") return false;
  if (failure === undefined) return true;
  return errorFromGrpc(failure).code === GrpcStatus.UNAVAILABLE;
}

/**
 * restartable reports whether a start of fold's completion that ended with
 * failure (undefined: it ended OK) is one to send again — the restart
 * column of clients/testdata/reconnect.json: before the started event, a
 * transport drop (the stream cut, or UNAVAILABLE without ErrorInfo). The
 * start goes again with the same idempotencyKey, so that the server
 * attaches it to the completion the first one began, if it did. A refusal
 * (any ErrorInfo) is the server's word and stands.
 */
export function restartable(failure: unknown, fold: Fold): boolean {
  if (fold.completionId !== "") return false;
  if (failure === undefined) return true;
  const e = errorFromGrpc(failure);
  return e.code === GrpcStatus.UNAVAILABLE && e.reason === "";
}

/** newIdempotencyKey is a random idempotency key: 16 bytes, hex. */
export function newIdempotencyKey(): string {
  return randomBytes(16).toString("hex");
}
