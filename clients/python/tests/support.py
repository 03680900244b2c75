"""Test support: the golden transcripts, and a fake gRPC channel that plays scripted calls."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import grpc
from google.protobuf import json_format

import completiond
from completiond import pb

#: TRANSCRIPTS is clients/testdata/transcripts (COMPLETIOND_TRANSCRIPTS overrides it).
TRANSCRIPTS = pathlib.Path(
    os.environ.get("COMPLETIOND_TRANSCRIPTS") or pathlib.Path(__file__).resolve().parents[2] / "testdata" / "transcripts"
)


def transcript_files() -> List[pathlib.Path]:
    """Every transcript file, sorted by name."""
    return sorted(TRANSCRIPTS.glob("*.json"))


def load(path: pathlib.Path) -> Dict[str, Any]:
    """One transcript, parsed."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def unwire(b64: str, kind: Any) -> Any:
    """Decodes a transcript's "wire" field (standard base64 of a serialized message)."""
    return kind.FromString(base64.b64decode(b64))


def events(transcript: Dict[str, Any]) -> List[pb.CompletionEvent]:
    """The transcript's events, decoded from their wire bytes."""
    return [unwire(e["wire"], pb.CompletionEvent) for e in transcript["events"]]


def status_error(transcript: Dict[str, Any]) -> Optional[completiond.CompletionError]:
    """The library's error for the transcript's status (decoded from details_bin)."""
    st = transcript["status"]
    return completiond.error_from_status(st["code"], st["message"], base64.b64decode(st["details_bin"]))


def event(seq: int, attempt: int = 1, turn: int = 1, **payload: Any) -> pb.CompletionEvent:
    """One CompletionEvent; payload is its oneof, e.g. delta=pb.TokenDelta(...)."""
    return pb.CompletionEvent(seq=seq, attempt=attempt, turn=turn, **payload)


def text(seq: int, piece: str, attempt: int = 1, turn: int = 1, thinking: bool = False) -> pb.CompletionEvent:
    """A delta event."""
    kind = pb.DELTA_KIND_THINKING if thinking else pb.DELTA_KIND_TEXT
    return event(seq, attempt, turn, delta=pb.TokenDelta(kind=kind, text=piece))


def completed(seq: int, answer: str, attempt: int = 1, reason: "pb.TransitionReason" = pb.TRANSITION_REASON_COMPLETED,
              **result: Any) -> List[pb.CompletionEvent]:
    """A terminal transition and the result, at seq and seq+1."""
    message = pb.Message(role=pb.ROLE_ASSISTANT, content=[pb.ContentBlock(text=pb.TextBlock(text=answer))])
    return [
        event(seq, attempt, transition=pb.Transition(reason=reason, terminal=True)),
        event(seq + 1, attempt, result=pb.Result(reason=reason, message=message,
                                                 stop_reason=pb.STOP_REASON_END_TURN, **result)),
    ]


class FakeRpcError(grpc.RpcError):
    """What a failed grpc call raises: code, details and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str = "", details_bin: bytes = b"") -> None:
        super().__init__(details)
        self._code, self._details = code, details
        self._trailers: Tuple[Tuple[str, Any], ...] = ((completiond.errors.DETAILS_KEY, details_bin),) if details_bin else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Tuple[Tuple[str, Any], ...]:
        return self._trailers


class FakeCall:
    """A streaming call: iterates what its handler yields (bytes or messages), raises its errors."""

    def __init__(self, items: Iterable[Any], deserialize: Callable[[bytes], Any]) -> None:
        self._items = iter(items)
        self._deserialize = deserialize
        self.cancelled = False

    def __iter__(self) -> "FakeCall":
        return self

    def __next__(self) -> Any:
        if self.cancelled:
            raise FakeRpcError(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        item = next(self._items)
        # Everything goes through the wire, as it would over a channel.
        return self._deserialize(item if isinstance(item, bytes) else item.SerializeToString())

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Recorded:
    """One call a FakeChannel received."""

    def __init__(self, method: str, request: Any, metadata: Sequence[Tuple[str, str]], timeout: Optional[float]):
        self.method, self.request, self.metadata, self.timeout = method, request, list(metadata or ()), timeout


class FakeChannel:
    """A grpc.Channel stand-in whose methods are handlers: handler(request) → events, or a response.

    A handler is keyed by the method's short name (Stream, Complete, Session,
    Attach); it may raise FakeRpcError. Requests are serialized and parsed
    again, so they cross the wire as they would.
    """

    def __init__(self, **handlers: Callable[..., Any]) -> None:
        self.handlers = handlers
        self.calls: List[Recorded] = []

    def _callable(self, path: str, ser: Callable[[Any], bytes], de: Callable[[bytes], Any], streaming: bool,
                  client_streaming: bool = False) -> Callable[..., Any]:
        name = path.rsplit("/", 1)[-1]

        def call(request: Any, timeout: Optional[float] = None, metadata: Any = None, **_: Any) -> Any:
            self.calls.append(Recorded(name, request, metadata, timeout))
            handler = self.handlers[name]
            if client_streaming:
                return FakeCall(_later(handler, _Serialized(request, ser)), de)
            parsed = type(request).FromString(ser(request))
            if streaming:
                return FakeCall(_later(handler, parsed), de)
            return de(handler(parsed).SerializeToString())

        return call

    def unary_unary(self, path: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:
        return self._callable(path, request_serializer, response_deserializer, streaming=False)

    def unary_stream(self, path: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:
        return self._callable(path, request_serializer, response_deserializer, streaming=True)

    def stream_stream(self, path: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:
        return self._callable(path, request_serializer, response_deserializer, streaming=True, client_streaming=True)

    def stream_unary(self, path: str, **_: Any) -> Any:  # pragma: no cover - the service has none
        raise NotImplementedError(path)

    def close(self) -> None:
        pass


def _later(handler: Callable[[Any], Iterable[Any]], request: Any) -> Iterator[Any]:
    """The handler's events, run when the call is first read: a streaming call fails on reading."""
    yield from handler(request)


class _Serialized:
    """A client's request iterator as a server sees it: each request's wire bytes, parsed back."""

    def __init__(self, requests: Iterator[Any], ser: Callable[[Any], bytes]) -> None:
        self._requests, self._ser = requests, ser

    def next(self, timeout: float = 2.0) -> Optional[pb.SessionRequest]:
        """The next request, None when the client half-closed or sent nothing within timeout."""
        box: List[Any] = []
        t = threading.Thread(target=lambda: box.append(next(self._requests, None)), daemon=True)
        t.start()
        t.join(timeout)
        if not box or box[0] is None:
            return None
        return pb.SessionRequest.FromString(self._ser(box[0]))

    def rest(self) -> List[pb.SessionRequest]:
        """Every request still to come (after the client half-closed)."""
        out = []
        while (req := self.next()) is not None:
            out.append(req)
        return out


def session_start(transcript: Dict[str, Any]) -> pb.SessionStart:
    """A Session transcript's start, from its protojson."""
    return json_format.ParseDict(transcript["request"], pb.SessionStart())


def sent(transcript: Dict[str, Any]) -> List[Tuple[int, pb.SessionRequest]]:
    """What a Session transcript's caller sent after start: (after_seq, request), decoded from the wire."""
    return [(s["after_seq"], unwire(s["wire"], pb.SessionRequest)) for s in transcript.get("sent", [])]
