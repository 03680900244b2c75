"""A completion's event stream that folds as it goes and reconnects when it may."""

from __future__ import annotations

import dataclasses
import random
import secrets
import threading
import time
from typing import Any, Callable, Iterator, Optional

import grpc

from completiond._proto.completion.v1 import completion_pb2 as pb
from completiond.errors import CompletionError, error_from_grpc
from completiond.fold import Fold

@dataclasses.dataclass(frozen=True)
class Reconnect:
    """How a stream reconnects after its connection dropped.

    It applies to a Stream whose request has a resume_grace (the server keeps
    the completion running that long without a caller), which attaches again,
    to Attach streams, and to a Session whose request has one, which resumes.

    Each pause is drawn with full jitter, uniformly between 0 and the backoff
    of that try, so that the callers of a replica that died do not all come
    back to the survivors at the same instant; a status that carries
    RetryInfo (OVERLOADED: 1 s) makes the pause at least its delay.
    """

    #: backoff is the most the pause before the first reconnect (Attach, or a
    #: Session resume) may be, in seconds; it doubles on each failed one, up
    #: to max_backoff.
    backoff: float = 0.05
    #: max_backoff caps the backoff, in seconds.
    max_backoff: float = 1.0
    #: window bounds how long after a drop the stream keeps trying, in
    #: seconds, further bounded by the request's resume_grace.
    window: float = 30.0
    #: jitter returns the fraction, in [0, 1), of the backoff a pause waits
    #: (random.random; tests set it).
    jitter: Callable[[], float] = random.random

    def delay(self, attempt: int) -> float:
        """The backoff of reconnect number attempt (1-based) since the drop: the longest its pause may be."""
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff)

    def wait(self, attempt: int, floor: float = 0.0) -> float:
        """The pause before reconnect number attempt after a drop whose status asked for floor
        (its RetryInfo delay): a random part of the backoff, at least floor."""
        return max(self.jitter() * self.delay(attempt), floor)


class _Drop:
    """One broken connection being healed: when it broke, and the reconnects tried since.

    A Stream (which reconnects with Attach) and a Session (with a
    SessionResume) share it, so both wait the same backoff for as long.
    """

    def __init__(self) -> None:
        self.at: Optional[float] = None
        self.tries = 0

    def next_wait(self, reconnect: Reconnect, window: float, deadline: Optional[float],
                  cause: Optional[grpc.RpcError] = None) -> Optional[float]:
        """The wait before the next reconnect after cause (the drop's error, None for a stream that
        ended without one); None once the window since the drop (or the deadline) would be over by
        then."""
        now = time.monotonic()
        if self.at is None:
            self.at = now
        self.tries += 1
        wait = reconnect.wait(self.tries, retry_delay(cause))
        end = self.at + window
        if deadline is not None:
            end = min(end, deadline)
        if now + wait > end:
            return None
        return wait

    def pause(self, reconnect: Reconnect, window: float, deadline: Optional[float],
              sleep: Callable[[float], None], cause: Optional[grpc.RpcError] = None) -> bool:
        """Waits before the next reconnect after cause; False, without waiting, once the window
        since the drop (or the deadline) would be over by then."""
        wait = self.next_wait(reconnect, window, deadline, cause)
        if wait is None:
            return False
        sleep(wait)
        return True


def dropped(err: Optional[grpc.RpcError], fold: Fold) -> bool:
    """Whether err (None: the call ended OK), ending a stream of fold's completion, is one to reconnect after.

    The rule the three client libraries share (docs/clients.md, pinned by
    clients/testdata/reconnect.json): before the result and once the
    completion has an id, an end without a status (the stream cut) or
    UNAVAILABLE, with or without ErrorInfo — a transport drop, a replica that
    lost the completion's lease, Redis away, an attach refused as OVERLOADED.
    The server's word on the completion itself only ever follows the result;
    before it, UNAVAILABLE is about this connection or replica, and the
    completion's log, which a reconnect replays, is the truth. Every other
    code is final.
    """
    if fold.ended or not fold.completion_id:
        return False
    if err is None:
        return True
    code = err.code() if callable(getattr(err, "code", None)) else None
    return bool(code == grpc.StatusCode.UNAVAILABLE)


def restartable(err: Optional[grpc.RpcError], fold: Fold) -> bool:
    """Whether err (None: the call ended OK), ending a start that fold is the fold of, is one to send the start again after.

    The restart column of clients/testdata/reconnect.json: before the
    started event, a transport drop — the stream cut, or UNAVAILABLE without
    ErrorInfo. The start is sent again with the same idempotency_key, so the
    server attaches it to the completion the first one began, if it did. A
    refusal (any ErrorInfo) is the server's word and stands.
    """
    if fold.completion_id:
        return False
    if err is None:
        return True
    code = err.code() if callable(getattr(err, "code", None)) else None
    return bool(code == grpc.StatusCode.UNAVAILABLE) and not error_from_grpc(err).reason


def with_idempotency_key(request: pb.CompleteRequest) -> pb.CompleteRequest:
    """request when it has an idempotency_key, else a copy with a random one (16 bytes, hex).

    The caller's request is not changed, and each call gets its own key.
    """
    if request.idempotency_key:
        return request
    keyed = pb.CompleteRequest()
    keyed.CopyFrom(request)
    keyed.idempotency_key = secrets.token_hex(16)
    return keyed


def keyed_start(start: Any) -> pb.SessionStart:
    """A SessionStart (a bare CompleteRequest wrapped in one) whose request has an idempotency_key."""
    if isinstance(start, pb.CompleteRequest):
        return pb.SessionStart(request=with_idempotency_key(start))
    if start.request.idempotency_key:
        return start
    keyed = pb.SessionStart()
    keyed.CopyFrom(start)
    keyed.request.CopyFrom(with_idempotency_key(start.request))
    return keyed


def retry_delay(err: Optional[grpc.RpcError]) -> float:
    """The RetryInfo delay of err's status in seconds, 0 without one."""
    if err is None:
        return 0.0
    return error_from_grpc(err).retry_delay or 0.0


def seconds(d: Any) -> float:
    """A google.protobuf.Duration in seconds."""
    return d.seconds + d.nanos / 1e9


class Stream(Iterator[pb.CompletionEvent]):
    """The events of one completion: iterate it for every event, in seq order, once each.

    :attr:`fold` is kept up to date with each event before it is handed out.
    When the completion does not end COMPLETED, iteration raises a
    :class:`~completiond.CompletionError` (carrying the fold's result when
    the stream had one) instead of stopping.

    When the request has ``resume_grace`` and the stream breaks (UNAVAILABLE:
    a dropped connection, a restarting server) after the started event and
    before the result, the stream calls ``Attach(completion_id, last_seq)``,
    again with a short backoff if that fails, within the grace and the
    :class:`Reconnect` window, and goes on: the caller sees one
    uninterrupted stream, every seq once. Attach ends with the status the
    completion's own stream ended with, so a stream that attached raises the
    completion's real error (code, ErrorInfo, RetryInfo) like any other.
    """

    def __init__(
        self,
        open_call: Callable[[Optional[float]], Any],
        open_attach: Callable[[str, int, Optional[float]], Any],
        *,
        resume_grace: float = 0.0,
        reconnect: Reconnect = Reconnect(),
        timeout: Optional[float] = None,
        fold: Optional[Fold] = None,
        attach_only: bool = False,
        restart: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Use :meth:`Client.stream` or :meth:`Client.attach`; this is their machinery.

        open_call(timeout) starts the RPC; open_attach(completion_id,
        after_seq, timeout) starts an Attach. attach_only says open_call is
        an Attach too: it may attach again within the reconnect window alone.
        restart says open_call is a start with an idempotency_key: it is
        called again after a drop before the started event (restartable).
        """
        #: fold is the fold of every event handed out so far.
        self.fold: Fold = fold if fold is not None else Fold()
        #: reconnects counts the Attach calls made after a drop.
        self.reconnects: int = 0
        #: restarts counts the starts sent again after a drop before the started event.
        self.restarts: int = 0
        self._restart = restart
        self._open_attach = open_attach
        self._window = reconnect.window if attach_only else min(reconnect.window, resume_grace)
        self._reconnect = reconnect
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._sleep = sleep
        self._lock = threading.Lock()
        self._call: Any = None
        self._cancelled = False
        self._events = self._run(open_call)

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> pb.CompletionEvent:
        return next(self._events)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.fold.ended:
            self.cancel()

    @property
    def completion_id(self) -> str:
        """The completion's id, from its started event ("" before it)."""
        return self.fold.completion_id

    @property
    def result(self) -> Optional[pb.Result]:
        """The completion's result, None before it."""
        return self.fold.result

    def wait(self) -> Fold:
        """Reads the remaining events and returns the fold; raises the stream's error, if any."""
        for _ in self:
            pass
        return self.fold

    def cancel(self) -> None:
        """Cancels the RPC (from any thread); iteration then raises CANCELLED.

        Without resume_grace the server cancels the completion at once
        (ABORTED_STREAMING); with it, the completion keeps running for the grace.
        """
        with self._lock:
            self._cancelled = True
            call = self._call
        if call is not None:
            call.cancel()

    def _remaining(self) -> Optional[float]:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def _start(self, open_fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._cancelled:
                raise self._error(CompletionError(grpc.StatusCode.CANCELLED, "cancelled by the caller"))
            self._call = open_fn()
            return self._call

    def _error(self, err: CompletionError) -> CompletionError:
        """err with what the stream knows: the fold, its result and completion id."""
        err.result, err.completion_id, err.fold = self.fold.result, self.fold.completion_id, self.fold
        return err

    def _run(self, open_call: Callable[[Optional[float]], Any]) -> Iterator[pb.CompletionEvent]:
        call = self._start(lambda: open_call(self._remaining()))
        drop = _Drop()
        while True:
            err: Optional[grpc.RpcError] = None
            try:
                for event in call:
                    if self.fold.add(event):
                        drop = _Drop()  # events flow again: a later drop starts afresh
                        yield event
            except grpc.RpcError as e:
                err = e
            if err is None and self.fold.ended:
                return
            if self._resumable(err):
                call = self._reattach(drop, err)
            elif self._restart and not self._cancelled and restartable(err, self.fold):
                call = self._restart_call(drop, err, open_call)
            else:
                call = None
            if call is None:
                if err is None:  # the server never ends a stream OK without its result
                    raise self._error(CompletionError(grpc.StatusCode.INTERNAL, "the stream ended without a result"))
                raise self._error(error_from_grpc(err)) from None

    def _reattach(self, drop: _Drop, cause: Optional[grpc.RpcError]) -> Any:
        """Waits the next backoff after cause and calls Attach after the last seq; None once the window is over."""
        if not drop.pause(self._reconnect, self._window, self._deadline, self._sleep, cause):
            return None
        call = self._start(lambda: self._open_attach(self.fold.completion_id, self.fold.last_seq, self._remaining()))
        self.reconnects += 1
        return call

    def _restart_call(self, drop: _Drop, cause: Optional[grpc.RpcError],
                      open_call: Callable[[Optional[float]], Any]) -> Any:
        """Waits the next backoff after cause and sends the start again; None once the window is over."""
        if not drop.pause(self._reconnect, self._reconnect.window, self._deadline, self._sleep, cause):
            return None
        call = self._start(lambda: open_call(self._remaining()))
        self.restarts += 1
        return call

    def _resumable(self, err: Optional[grpc.RpcError]) -> bool:
        """Whether the stream's end is a dropped connection of a completion that may be attached to again."""
        return self._window > 0 and not self._cancelled and dropped(err, self.fold)
