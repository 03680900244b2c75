// AbortSignal plumbing shared by the stream and the session loop.

/** onAbort runs fn once when signal aborts (at once if it already has) and returns the unsubscribe. */
export function onAbort(signal: AbortSignal | undefined, fn: () => void): () => void {
  if (signal === undefined) return () => {};
  if (signal.aborted) {
    fn();
    return () => {};
  }
  signal.addEventListener("abort", fn, { once: true });
  return () => signal.removeEventListener("abort", fn);
}
