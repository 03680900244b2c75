"""Streams one completion and prints each token and each transition with its typed reason.

    make run                                                   # in one terminal
    PYTHONPATH=clients/python/src /usr/bin/python3 examples/python/stream.py

On the sim provider the default fault script makes the first attempt fail
with a 503 (a RETRY) and the second one break after four tokens (a
STREAM_RESUME that keeps them), so the output shows the service recovering.
"""

from __future__ import annotations

import argparse
import sys

import completiond
from completiond import pb


def main() -> int:
    args = parse()
    request = completiond.text_request(args.prompt, route=args.route, metadata=sim_script(args))
    with completiond.Client(args.addr) as client:
        stream = client.stream(request, timeout=args.timeout)
        try:
            for event in stream:
                show(event)
        except completiond.CompletionError as err:
            print(f"\n[failed: {err.code.name}, terminal reason {err.terminal_reason_name}: {err.message}]")
            return 1
    fold = stream.fold
    print(f"[answer: {len(fold.text.split())} words kept, {len(fold.discarded_attempts)} attempts discarded,"
          f" completion {fold.completion_id}]")
    return 0


def show(event: pb.CompletionEvent) -> None:
    """Prints one event: tokens inline, a transition on a line of its own."""
    kind = event.WhichOneof("event")
    if kind == "started":
        print(f"[started {event.started.completion_id} on {event.started.route} ({event.started.model})]")
    elif kind == "delta" and event.delta.kind == pb.DELTA_KIND_TEXT:
        print(event.delta.text, end="", flush=True)
    elif kind == "transition":
        print("\n" + describe(event.transition))
    elif kind == "result":
        result = event.result
        print(f"[result: {pb.StopReason.Name(result.stop_reason)}, {len(result.attempts)} attempts,"
              f" {result.usage.output_tokens} output tokens]")


def describe(tr: pb.Transition) -> str:
    """A transition in one line: its reason, and what the service did about it."""
    reason = pb.TransitionReason.Name(tr.reason)[len("TRANSITION_REASON_"):]
    parts = [f"[transition {reason}"]
    if tr.terminal:
        parts.append("terminal")
    if tr.HasField("backoff"):
        parts.append(f"after {tr.backoff.ToTimedelta().total_seconds():g}s")
    if tr.discard_output:
        parts.append(f"discarding attempts {list(tr.discarded_attempts)}")
    if tr.HasField("error"):
        parts.append(f"because {pb.ErrorKind.Name(tr.error.kind)} {tr.error.http_status or ''}".rstrip())
    return ", ".join(parts) + "]"


def sim_script(args: argparse.Namespace) -> dict:
    if not args.route.startswith("sim"):
        return {}
    return {"sim.faults": args.faults, "sim.words": "30", "sim.pace": "10ms"}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", default=completiond.default_address(), help="completiond address (COMPLETIOND_ADDR, else localhost:50051)")
    p.add_argument("--route", default="sim", help="route to call")
    p.add_argument("--faults", default="server_error=503,cut=4", help="the sim's fault script (sim routes only)")
    p.add_argument("--timeout", type=float, default=60, help="seconds the whole stream may take")
    p.add_argument("prompt", nargs="?", default="Explain backoff.")
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main())
