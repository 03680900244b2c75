"""The fold of a completion's events: what the stream contract says they add up to.

A delta belongs to its event's attempt and turn; a transition's
``discarded_attempts`` (and ``discard_output``, for the event's own attempt)
voids every delta of those attempts, already received or still to come; the
kept deltas of a turn, in arrival order, are its answer. Tool calls are never
discarded: the service sends one only once its attempt is settled. Events at
or below a seq already folded are ignored, so a client that reconnects and
sees an event twice folds it once.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Set, Tuple

from google.protobuf import json_format

from completiond._proto.completion.v1 import completion_pb2 as pb


@dataclasses.dataclass
class Turn:
    """The kept output of one conversation turn."""

    #: turn is the turn number (1-based).
    turn: int
    #: text is the turn's kept TEXT deltas, concatenated in arrival order.
    text: str = ""
    #: thinking is the turn's kept THINKING deltas, concatenated likewise.
    thinking: str = ""
    #: tool_calls are the turn's tool_call events, in order.
    tool_calls: List[pb.ToolCall] = dataclasses.field(default_factory=list)


class Fold:
    """Folds CompletionEvents into the completion's answer, per the stream contract.

    Feed it every event with :meth:`add` (a :class:`~completiond.Stream`
    does); read the answer so far at any time.
    """

    def __init__(self) -> None:
        #: completion_id is started.completion_id ("" before the started event).
        self.completion_id: str = ""
        #: started is the started event's payload, None before it.
        self.started: Optional[pb.Started] = None
        #: last_seq is the seq of the last event folded (0 before any): the
        #: after_seq of an Attach that misses nothing.
        self.last_seq: int = 0
        #: turn is the turn of the latest event folded (0 before any).
        self.turn: int = 0
        #: transitions are every transition, in order (their reasons: :attr:`transition_reasons`).
        self.transitions: List[pb.Transition] = []
        #: terminal is the terminal transition, None before it.
        self.terminal: Optional[pb.Transition] = None
        #: result is the result event's payload, None before it.
        self.result: Optional[pb.Result] = None
        #: stop_hook_requests are the stop-hook requests received, in order.
        self.stop_hook_requests: List[pb.StopHookRequest] = []
        self._discarded: Set[int] = set()
        # (turn, attempt, kind, text) of every delta, in arrival order.
        self._deltas: List[Tuple[int, int, int, str]] = []
        self._calls: List[Tuple[int, pb.ToolCall]] = []
        self._turns: Optional[List[Turn]] = None  # cache, dropped by every change

    def add(self, event: pb.CompletionEvent) -> bool:
        """Folds one event; False (and nothing changes) when its seq is not above the last one's.

        A stream that attached again may repeat events; they are folded once.
        """
        if event.seq and event.seq <= self.last_seq:
            return False
        self.last_seq = event.seq
        self.turn = max(self.turn, event.turn)
        kind = event.WhichOneof("event")
        if kind == "started":
            self.started = event.started
            self.completion_id = event.started.completion_id
        elif kind == "delta":
            self._deltas.append((event.turn, event.attempt, event.delta.kind, event.delta.text))
            self._turns = None
        elif kind == "tool_call":
            self._calls.append((event.turn, event.tool_call))
            self._turns = None
        elif kind == "transition":
            self._transition(event)
        elif kind == "stop_hook_request":
            self.stop_hook_requests.append(event.stop_hook_request)
        elif kind == "result":
            self.result = event.result
        return True

    def _transition(self, event: pb.CompletionEvent) -> None:
        tr = event.transition
        self.transitions.append(tr)
        voided = set(tr.discarded_attempts)
        if tr.discard_output:  # the contract puts it in discarded_attempts too; do not rely on it
            voided.add(event.attempt)
        if not voided <= self._discarded:
            self._discarded |= voided
            self._turns = None
        if tr.terminal:
            self.terminal = tr

    @property
    def reason(self) -> pb.TransitionReason:
        """The terminal transition's TransitionReason (TRANSITION_REASON_UNSPECIFIED before it)."""
        return self.terminal.reason if self.terminal is not None else pb.TRANSITION_REASON_UNSPECIFIED

    @property
    def transition_reasons(self) -> List[pb.TransitionReason]:
        """The TransitionReason of every transition, in order."""
        return [tr.reason for tr in self.transitions]

    @property
    def discarded_attempts(self) -> List[int]:
        """Every attempt any transition discarded, ascending."""
        return sorted(self._discarded)

    @property
    def stripped_blocks(self) -> List[str]:
        """The media blocks transitions replaced by a placeholder because an upstream rejected them.

        Every transition's stripped_blocks ("messages[i].content[j]"), in order.
        """
        return [block for tr in self.transitions for block in tr.stripped_blocks]

    @property
    def turns(self) -> List[Turn]:
        """Each turn that has kept output (text, thinking or tool calls), ascending by turn."""
        if self._turns is None:
            self._turns = self._build_turns()
        return self._turns

    def _build_turns(self) -> List[Turn]:
        turns: Dict[int, Turn] = {}
        text: Dict[int, List[str]] = {}
        thinking: Dict[int, List[str]] = {}
        for turn, attempt, kind, piece in self._deltas:
            if attempt in self._discarded:
                continue
            turns.setdefault(turn, Turn(turn))
            if kind == pb.DELTA_KIND_THINKING:
                thinking.setdefault(turn, []).append(piece)
            else:
                text.setdefault(turn, []).append(piece)
        for turn, call in self._calls:
            turns.setdefault(turn, Turn(turn)).tool_calls.append(call)
        for n, t in turns.items():
            t.text = "".join(text.get(n, ()))
            t.thinking = "".join(thinking.get(n, ()))
        return [turns[n] for n in sorted(turns)]

    @property
    def text(self) -> str:
        """The answer so far: every kept text delta of every turn, in arrival order.

        At the end it equals the text of the result's message (in a Session
        the result's message holds the text of all turns; :attr:`turns` splits it).
        """
        return "".join(piece for _, attempt, kind, piece in self._deltas
                       if kind != pb.DELTA_KIND_THINKING and attempt not in self._discarded)

    @property
    def thinking(self) -> str:
        """Every kept reasoning delta of every turn, in arrival order."""
        return "".join(piece for _, attempt, kind, piece in self._deltas
                       if kind == pb.DELTA_KIND_THINKING and attempt not in self._discarded)

    @property
    def tool_calls(self) -> List[pb.ToolCall]:
        """The tool calls of the latest turn (the turn of the latest event): the ones to answer."""
        return [call for turn, call in self._calls if turn == self.turn]

    @property
    def stop_reason(self) -> pb.StopReason:
        """The result's StopReason (STOP_REASON_UNSPECIFIED without a result)."""
        return self.result.stop_reason if self.result is not None else pb.STOP_REASON_UNSPECIFIED

    @property
    def stop_sequence(self) -> str:
        """The result's stop_sequence: the request's stop sequence that ended the answer ("" otherwise)."""
        return self.result.stop_sequence if self.result is not None else ""

    @property
    def truncated(self) -> bool:
        """The result's truncated flag (False without a result)."""
        return self.result.truncated if self.result is not None else False

    @property
    def ended(self) -> bool:
        """True once the result has been folded: the completion is over."""
        return self.result is not None

    def to_dict(self) -> Dict[str, Any]:
        """The fold as the golden transcripts' ``expect`` object (without ``error``)."""
        return {
            "completion_id": self.completion_id,
            "last_seq": self.last_seq,
            "reason": pb.TransitionReason.Name(self.reason) if self.terminal is not None else "",
            "transitions": [pb.TransitionReason.Name(r) for r in self.transition_reasons],
            "discarded_attempts": self.discarded_attempts,
            "stripped_blocks": self.stripped_blocks,
            "turns": [_turn_dict(t) for t in self.turns],
            "text": self.text,
            "thinking": self.thinking,
            "tool_calls": [_call_dict(c) for c in self.tool_calls],
            "stop_reason": pb.StopReason.Name(self.stop_reason) if self.result is not None else "",
            "stop_sequence": self.stop_sequence,
            "truncated": self.truncated,
        }


def tool_input(call: pb.ToolCall) -> Dict[str, Any]:
    """A tool call's input as a plain dict (the JSON object the model sent)."""
    return json_format.MessageToDict(call.input) if call.HasField("input") else {}


def _call_dict(call: pb.ToolCall) -> Dict[str, Any]:
    return {"id": call.id, "name": call.name, "input": tool_input(call)}


def _turn_dict(t: Turn) -> Dict[str, Any]:
    return {"turn": t.turn, "text": t.text, "thinking": t.thinking,
            "tool_calls": [_call_dict(c) for c in t.tool_calls]}
