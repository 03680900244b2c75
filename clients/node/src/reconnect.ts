// Healing a dropped connection, shared by the stream (which attaches again)
// and the Session loop (which resumes): when a drop may be healed, and how
// long to wait before each try.

import { status as GrpcStatus } from "@grpc/grpc-js";
import { errorFromGrpc } from "./errors";
import type { Fold } from "./fold";

/** ReconnectPolicy says how a resumable stream attaches again, or a Session resumes, after its connection dropped. */
export interface ReconnectPolicy {
  /** initialBackoffMs is the wait before the first reconnect; it doubles with each failed one. */
  initialBackoffMs: number;
  /** maxBackoffMs caps the wait between reconnects. */
  maxBackoffMs: number;
  /** windowMs bounds how long after a drop the stream keeps trying (and, for a Stream or Session, its resume grace). */
  windowMs: number;
}

/** DEFAULT_RECONNECT: 50 ms doubling to 1 s, for up to 30 s after the drop (as the Go and Python clients). */
export const DEFAULT_RECONNECT: Readonly<ReconnectPolicy> = { initialBackoffMs: 50, maxBackoffMs: 1000, windowMs: 30_000 };

/** backoffMs is the wait before reconnect number tries (1-based) since the drop. */
export function backoffMs(p: ReconnectPolicy, tries: number): number {
  return Math.min(p.initialBackoffMs * 2 ** (tries - 1), p.maxBackoffMs);
}

/** Drop is one broken connection being healed: when it broke, and the reconnects tried since. */
export class Drop {
  #at: number | undefined;
  #tries = 0;

  /**
   * pause waits before the next reconnect and resolves true, or resolves
   * false at once when the window since the drop would be over by then.
   */
  async pause(policy: ReconnectPolicy, windowMs: number): Promise<boolean> {
    const now = Date.now();
    this.#at ??= now;
    this.#tries++;
    const wait = backoffMs(policy, this.#tries);
    if (now + wait > this.#at + windowMs) return false;
    await new Promise((resolve) => setTimeout(resolve, wait));
    return true;
  }
}

/**
 * dropped reports whether a call of fold's completion that ended with
 * failure (undefined: it ended OK) lost its connection rather than heard the
 * server's word: the server's own status only ever follows the result, so an
 * end before it — OK without a result, or UNAVAILABLE without the ErrorInfo
 * a status completiond decided carries — is the connection's; a completion
 * without an id has nothing to reconnect to.
 */
export function dropped(failure: unknown, fold: Fold): boolean {
  if (fold.done || fold.completionId === "") return false;
  if (failure === undefined) return true;
  const e = errorFromGrpc(failure);
  return e.code === GrpcStatus.UNAVAILABLE && e.reason === "";
}
