"""The Session RPC: a multi-turn completion whose tools and stop hook run in the caller."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator, List, Mapping, Optional, Union, cast

import grpc

from completiond._proto.completion.v1 import completion_pb2 as pb
from completiond.errors import CompletionError, error_from_grpc
from completiond.fold import Fold, tool_input
from completiond.stream import Reconnect, _Drop, dropped, restartable, seconds

#: ToolOutput is what a tool returns: the result's text, or a whole ToolResultBlock.
ToolOutput = Union[str, pb.ToolResultBlock]
#: ToolCallback runs one tool call.
ToolCallback = Callable[[pb.ToolCall], ToolOutput]
#: ToolFunction runs one tool by name, given the call's input as a dict.
ToolFunction = Callable[[dict], ToolOutput]
#: StopHookCallback judges a final answer: a verdict (see :func:`allow`,
#: :func:`block`, :func:`prevent`), a Verdict value, or None for VERDICT_ALLOW.
StopHookCallback = Callable[[pb.StopHookRequest], Union[pb.StopHookVerdict, int, None]]
#: EventCallback sees every event, after the fold and before the loop answers it.
EventCallback = Callable[[pb.CompletionEvent], None]

_CLOSE = object()  # ends the request stream (half-close)


def allow() -> pb.StopHookVerdict:
    """A stop-hook verdict that lets the answer stand (COMPLETED)."""
    return pb.StopHookVerdict(verdict=pb.VERDICT_ALLOW)


def block(message: str) -> pb.StopHookVerdict:
    """A stop-hook verdict that sends message to the model, which answers again (STOP_HOOK_BLOCKING)."""
    return pb.StopHookVerdict(verdict=pb.VERDICT_BLOCK, message=message)


def prevent(message: str = "") -> pb.StopHookVerdict:
    """A stop-hook verdict that ends the completion (STOP_HOOK_PREVENTED)."""
    return pb.StopHookVerdict(verdict=pb.VERDICT_PREVENT, message=message)


class Session(Iterator[pb.CompletionEvent]):
    """One Session RPC: iterate its events and answer them with the send methods.

    The start message is sent first. Like a :class:`~completiond.Stream`, it
    keeps :attr:`fold` up to date and raises a
    :class:`~completiond.CompletionError` when the RPC ends with a status
    other than OK. :meth:`Client.run_session` drives one with callbacks.

    When the start's request has ``resume_grace`` and the stream breaks
    (UNAVAILABLE, or an end without a result) after the started event and
    before the result, the session opens a new Session stream whose first
    message is ``resume(completion_id, last_seq)`` — after the same backoff,
    within the same window as a Stream's Attach — and sends again every
    answer and cancel sent since the last transition it received (a
    transition after them says the server had them; it drops an answer it
    already has). Events it already handed out are not handed out again.
    """

    def __init__(
        self,
        open_call: Callable[[Iterator[pb.SessionRequest], Optional[float]], Any],
        start: pb.SessionStart,
        *,
        reconnect: Reconnect = Reconnect(),
        timeout: Optional[float] = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Use :meth:`Client.session`; open_call(requests, timeout) starts the RPC with a request iterator.

        timeout (seconds) bounds the whole session, resumes included.
        """
        #: fold is the fold of every event handed out so far.
        self.fold: Fold = Fold()
        #: reconnects counts the resumed Session streams opened after a drop.
        self.reconnects: int = 0
        #: restarts counts the starts sent again after a drop before the started event.
        self.restarts: int = 0
        self._start = start
        grace = seconds(start.request.resume_grace) if start.request.HasField("resume_grace") else 0.0
        self._window = min(reconnect.window, grace)
        self._reconnect = reconnect
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._sleep = sleep
        self._open_call = open_call
        self._lock = threading.Lock()
        self._closed = False  # the caller half-closed: nothing more will be sent
        self._cancelled = False  # the RPC was cancelled: no resume
        # The answers and cancels sent since the last transition received:
        # sent again to a resumed stream, as the server may not have had them.
        self._unconfirmed: List[pb.SessionRequest] = []
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._queue.put(pb.SessionRequest(start=start))
        self._call = open_call(self._requests(self._queue), self._remaining())
        self._events = self._run()

    def __iter__(self) -> "Session":
        return self

    def __next__(self) -> pb.CompletionEvent:
        return next(self._events)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.fold.ended:
            self.cancel()
        self.close()

    def send(self, request: pb.SessionRequest) -> None:
        """Sends one SessionRequest (after start); refused once the request stream is closed."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the session's request stream is closed")
            if request.WhichOneof("request") in _ANSWERS:
                self._unconfirmed.append(request)
            self._queue.put(request)

    def send_tool_results(self, results: Iterable[pb.ToolResultBlock]) -> None:
        """Answers pending tool calls, one result each."""
        self.send(pb.SessionRequest(tool_results=pb.ToolResults(results=list(results))))

    def send_verdict(self, verdict: pb.StopHookVerdict) -> None:
        """Answers a stop_hook_request (the verdict repeats its hook_id)."""
        self.send(pb.SessionRequest(stop_hook_verdict=verdict))

    def send_cancel(self, reason: str = "") -> None:
        """Asks the service to end the completion (ABORTED_TOOLS or ABORTED_STREAMING)."""
        self.send(pb.SessionRequest(cancel=pb.Cancel(reason=reason)))

    def close(self) -> None:
        """Half-closes the request stream: nothing more will be sent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(_CLOSE)

    def cancel(self) -> None:
        """Cancels the RPC itself (from any thread); iteration then raises CANCELLED."""
        with self._lock:
            self._cancelled = True
            call = self._call
        call.cancel()

    def _remaining(self) -> Optional[float]:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    @staticmethod
    def _requests(requests: "queue.Queue[Any]") -> Iterator[pb.SessionRequest]:
        while True:
            item = requests.get()
            if item is _CLOSE:
                return
            yield item

    def _run(self) -> Iterator[pb.CompletionEvent]:
        call = self._call
        drop = _Drop()
        try:
            while True:
                err: Optional[grpc.RpcError] = None
                try:
                    for event in call:
                        if not self.fold.add(event):
                            continue  # a resumed stream may repeat what was handed out
                        drop = _Drop()  # events flow again: a later drop starts afresh
                        if event.HasField("transition"):
                            with self._lock:
                                self._unconfirmed = []
                        yield event
                except grpc.RpcError as e:
                    err = e
                if err is None and self.fold.ended:
                    return
                if self._resumable(err):
                    call = self._resume(drop, err)
                elif self._restartable(err):
                    call = self._reopen(drop, err, pb.SessionRequest(start=self._start), self._reconnect.window)
                    self.restarts += call is not None
                else:
                    call = None
                if call is None:
                    if err is None:  # the server never ends a session OK without its result
                        raise self._error(CompletionError(grpc.StatusCode.INTERNAL, "the stream ended without a result"))
                    raise self._error(error_from_grpc(err)) from None
        finally:
            self.close()

    def _resumable(self, err: Optional[grpc.RpcError]) -> bool:
        """Whether the stream's end is a dropped connection of a Session that may be resumed."""
        return self._window > 0 and not self._cancelled and dropped(err, self.fold)

    def _restartable(self, err: Optional[grpc.RpcError]) -> bool:
        """Whether the start, with its idempotency_key, is to be sent again: a drop before started."""
        return bool(self._start.request.idempotency_key) and not self._cancelled and restartable(err, self.fold)

    def _resume(self, drop: _Drop, cause: Optional[grpc.RpcError]) -> Any:
        """Waits the next backoff after cause, then opens a Session stream that resumes after the
        last seq and sends the unconfirmed messages again; None once the window is over."""
        resume = pb.SessionResume(completion_id=self.fold.completion_id, after_seq=self.fold.last_seq)
        call = self._reopen(drop, cause, pb.SessionRequest(resume=resume), self._window)
        self.reconnects += call is not None
        return call

    def _reopen(self, drop: _Drop, cause: Optional[grpc.RpcError], first: pb.SessionRequest, window: float) -> Any:
        """Waits the next backoff after cause, then opens a Session stream whose first message is
        first (a resume, or the start sent again), followed by the unconfirmed messages; None once
        the window is over."""
        if not drop.pause(self._reconnect, window, self._deadline, self._sleep, cause):
            return None
        with self._lock:
            if self._cancelled:
                raise self._error(CompletionError(grpc.StatusCode.CANCELLED, "cancelled by the caller"))
            old, self._queue = self._queue, queue.Queue()
            old.put(_CLOSE)  # the broken call's request iterator ends
            self._queue.put(first)
            for request in self._unconfirmed:
                self._queue.put(request)
            if self._closed:
                self._queue.put(_CLOSE)
            self._call = self._open_call(self._requests(self._queue), self._remaining())
            return self._call

    def _error(self, err: CompletionError) -> CompletionError:
        """err with what the session knows: the fold, its result and completion id."""
        err.result, err.completion_id, err.fold = self.fold.result, self.fold.completion_id, self.fold
        return err


#: _ANSWERS are the messages a resumed stream sends again until a transition confirms them.
_ANSWERS = ("tool_results", "stop_hook_verdict", "cancel")


class CancelSession(Exception):
    """Raised by a run_session callback to end the session: the loop sends Cancel(reason).

    The service then ends the completion (ABORTED_TOOLS while tools run,
    ABORTED_STREAMING while the model streams) and the session raises its
    CANCELLED CompletionError.
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        #: reason is recorded in the terminal transition.
        self.reason: str = reason


Tools = Union[ToolCallback, Mapping[str, ToolFunction], None]


def answer_tool(tools: Tools, call: pb.ToolCall) -> pb.ToolResultBlock:
    """Runs one tool call and makes its result.

    tools is one callback given the ToolCall, or a mapping from tool name to a
    function given the call's input as a dict. A tool that raises gives an
    is_error result with the exception's message (CancelSession excepted: it
    propagates); an unknown tool, or no tools, an is_error result saying so.
    """
    try:
        if tools is None:
            return pb.ToolResultBlock(tool_use_id=call.id, text="this caller runs no tools", is_error=True)
        if callable(tools):
            out = tools(call)
        elif call.name in tools:
            out = tools[call.name](tool_input(call))
        else:
            return pb.ToolResultBlock(tool_use_id=call.id, text=f"unknown tool {call.name}", is_error=True)
    except CancelSession:
        raise
    except Exception as exc:  # the model is told, and may try again; the loop goes on
        return pb.ToolResultBlock(tool_use_id=call.id, text=str(exc) or type(exc).__name__, is_error=True)
    if isinstance(out, str):
        return pb.ToolResultBlock(tool_use_id=call.id, text=out)
    if isinstance(out, pb.ToolResultBlock):
        block = pb.ToolResultBlock()
        block.CopyFrom(out)
        if not block.tool_use_id:
            block.tool_use_id = call.id
        return block
    raise TypeError(f"tool {call.name} returned {type(out).__name__}, want str or ToolResultBlock")


def judge(stop_hook: Optional[StopHookCallback], request: pb.StopHookRequest) -> pb.StopHookVerdict:
    """The verdict on one stop_hook_request: the callback's, VERDICT_ALLOW without one."""
    out = stop_hook(request) if stop_hook is not None else None
    verdict = pb.StopHookVerdict()
    if out is None:
        verdict.verdict = pb.VERDICT_ALLOW
    elif isinstance(out, pb.StopHookVerdict):
        verdict.CopyFrom(out)
    elif isinstance(out, int):
        verdict.verdict = cast(Any, out)  # a Verdict value
    else:
        raise TypeError(f"stop hook returned {type(out).__name__}, want StopHookVerdict, Verdict or None")
    if not verdict.hook_id:
        verdict.hook_id = request.hook_id
    return verdict


def drive(
    session: Session,
    tools: Tools,
    stop_hook: Optional[StopHookCallback] = None,
    on_event: Optional[EventCallback] = None,
) -> Fold:
    """Runs a session's loop to its end: answers each tool call as it arrives, each stop hook.

    A tool call event is sent only once the attempt that made it is settled,
    so answering it at once is safe. A callback that raises CancelSession
    sends Cancel; a stop hook that raises anything else sends Cancel too
    ("stop hook failed: ..."), and the session's error is raised from it.
    Nothing is answered after a Cancel. An exception from on_event cancels
    the RPC and propagates. Returns the fold; raises the session's
    CompletionError when it does not end COMPLETED.
    """
    cause: Optional[BaseException] = None
    cancelled = False
    try:
        for event in session:
            if cancelled:
                continue
            try:
                if on_event is not None:
                    on_event(event)
                _answer(session, event, tools, stop_hook)
            except CancelSession as cancel:
                session.send_cancel(cancel.reason)
                cancelled = True
            except _HookFailed as failed:
                cause = failed.__cause__
                session.send_cancel(f"stop hook failed: {cause}")
                cancelled = True
    except CompletionError as err:
        if cause is not None:
            raise err from cause
        raise
    except BaseException:
        session.cancel()
        raise
    finally:
        session.close()
    return session.fold


class _HookFailed(Exception):
    """A stop hook raised (its exception is the __cause__)."""


def _answer(session: Session, event: pb.CompletionEvent, tools: Tools, stop_hook: Optional[StopHookCallback]) -> None:
    kind = event.WhichOneof("event")
    if kind == "tool_call":
        session.send_tool_results([answer_tool(tools, event.tool_call)])
    elif kind == "stop_hook_request":
        try:
            verdict = judge(stop_hook, event.stop_hook_request)
        except CancelSession:
            raise
        except Exception as exc:
            raise _HookFailed() from exc
        session.send_verdict(verdict)
