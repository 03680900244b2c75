"""Runs a Session tool loop: the model asks for tools, this program runs them, until the model answers.

    make run                                                   # in one terminal
    PYTHONPATH=clients/python/src /usr/bin/python3 examples/python/toolloop.py

On the sim provider the tool calls are scripted (--faults): by default the
model calls get_weather twice, then answers. With --route naming a real
model, the model decides. Each tool_call event is answered the moment it
arrives, which is safe: completiond sends a call only once the attempt that
made it is settled (try --faults tool_reset=get_weather,tool_use=get_weather,tool_use=get_weather).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict

from google.protobuf import struct_pb2

import completiond
from completiond import pb


def get_weather(args: Dict[str, Any]) -> str:
    """The one tool: a forecast for a city (the sim passes the question as "query")."""
    city = args.get("city") or args.get("query", "")
    out = json.dumps({"city": city, "forecast": "sunny", "celsius": 21})
    print(f" → {out}]")
    return out


def show(event: pb.CompletionEvent) -> None:
    kind = event.WhichOneof("event")
    if kind == "delta" and event.delta.kind == pb.DELTA_KIND_TEXT:
        print(event.delta.text, end="", flush=True)
    elif kind == "tool_call":
        call = event.tool_call
        print(f"\n[tool {call.name}({json.dumps(completiond.tool_input(call))})", end="")
    elif kind == "transition":
        print(f"\n[{pb.TransitionReason.Name(event.transition.reason)[len('TRANSITION_REASON_'):]}]")
    elif kind == "result":
        r = event.result
        print(f"[done: {pb.StopReason.Name(r.stop_reason)}, {len(r.attempts)} attempts, {r.usage.output_tokens} output tokens]")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", default=completiond.default_address(), help="completiond address (COMPLETIOND_ADDR, else localhost:50051)")
    p.add_argument("--route", default="sim", help="route to call")
    p.add_argument("--faults", default="tool_use=get_weather,tool_use=get_weather",
                   help="the sim's fault script (sim routes only)")
    p.add_argument("-q", default="What is the weather in Lisbon and in Oslo?", help="the question")
    args = p.parse_args()

    schema = struct_pb2.Struct()
    schema.update({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    request = completiond.text_request(
        args.q, route=args.route,
        tools=[pb.Tool(name="get_weather", description="Current weather for a city.", input_schema=schema)],
        metadata={"sim.faults": args.faults, "sim.pace": "5ms"} if args.route.startswith("sim") else {})
    with completiond.Client(args.addr) as client:
        try:
            fold = client.run_session(pb.SessionStart(request=request, max_turns=5),
                                      {"get_weather": get_weather}, on_event=show, timeout=60)
        except completiond.CompletionError as err:
            print(f"\ntoolloop: {err}", file=sys.stderr)
            return 1
    print(f"[{len(fold.turns)} turns, {sum(len(t.tool_calls) for t in fold.turns)} tool calls answered]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
