"""Streams completions with the asyncio client: three at once over one channel, each with its transitions.

    make run                                                   # in one terminal
    PYTHONPATH=clients/python/src /usr/bin/python3 examples/python/async_stream.py

completiond.AsyncClient is the sync Client's twin on grpc.aio: ``async for``
the events, the same Fold, the same CompletionError. Most Python services are
asyncio; one channel carries many streams, so the three completions run
concurrently over one connection. On the sim provider each has its own fault
script, so each recovers in its own way.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import List, Tuple

import completiond
from completiond import pb

#: (name, the sim's fault script) of each completion.
SCRIPTS: List[Tuple[str, str]] = [
    ("clean", ""),
    ("rate-limited", "rate_limit"),
    ("cut", "cut=3"),
]


async def one(client: completiond.AsyncClient, name: str, faults: str) -> str:
    """Streams one completion; its transitions and the length of its answer, in a line."""
    request = completiond.text_request("Explain backoff.", metadata={"sim.faults": faults, "sim.words": "12",
                                                                      "sim.pace": "5ms"})
    stream = client.stream(request, timeout=60)
    reasons = []
    async for event in stream:
        if event.HasField("transition"):
            reasons.append(pb.TransitionReason.Name(event.transition.reason)[len("TRANSITION_REASON_"):])
    return f"{name:<13} {' '.join(reasons):<28} {len(stream.fold.text.split())} words"


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", default=completiond.default_address(), help="completiond address (COMPLETIOND_ADDR, else localhost:50051)")
    args = p.parse_args()
    async with completiond.AsyncClient(args.addr) as client:
        try:
            lines = await asyncio.gather(*(one(client, name, faults) for name, faults in SCRIPTS))
        except completiond.CompletionError as err:
            print(f"failed: {err}")
            return 1
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
