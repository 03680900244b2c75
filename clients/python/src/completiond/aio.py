"""The asyncio client of completiond (grpc.aio): the sync client's Stream, Attach, Complete and
Session tool loop, awaited.

>>> async with AsyncClient() as client:
...     stream = client.stream(text_request("Explain backoff."))
...     async for event in stream:
...         print(event.delta.text, end="")
...     print(stream.fold.text)

Events, folds, errors and requests are the sync client's: :class:`~completiond.Fold`,
:class:`~completiond.CompletionError`, :func:`~completiond.text_request`. A stream whose request
has ``resume_grace`` re-attaches after a dropped connection, with the same :class:`Reconnect`
backoff and window as the sync one.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from typing import Any, AsyncIterator, Awaitable, Callable, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from completiond._proto.completion.v1 import completion_pb2 as pb
from completiond._proto.completion.v1 import completion_pb2_grpc as pb_grpc
from completiond.client import Metadata, default_address, spread_options
from completiond.errors import CompletionError, error_from_grpc
from completiond.fold import Fold, tool_input
from completiond.session import CancelSession, ToolOutput, judge
from completiond.stream import Reconnect, _Drop, dropped, keyed_start, restartable, seconds, with_idempotency_key

#: AsyncToolCallback runs one tool call; it may be a coroutine function.
AsyncToolCallback = Callable[[pb.ToolCall], Union[ToolOutput, Awaitable[ToolOutput]]]
#: AsyncToolFunction runs one tool by name, given the call's input as a dict; it may be a coroutine function.
AsyncToolFunction = Callable[[dict], Union[ToolOutput, Awaitable[ToolOutput]]]
#: AsyncEventCallback sees every event first; it may be a coroutine function.
AsyncEventCallback = Callable[[pb.CompletionEvent], Union[None, Awaitable[None]]]


async def _maybe_await(value: Any) -> Any:
    """value, awaited when it is awaitable: callbacks may be plain or coroutine functions."""
    if inspect.isawaitable(value):
        return await value
    return value


class AsyncStream(AsyncIterator[pb.CompletionEvent]):
    """The events of one completion, for ``async for``: every event, in seq order, once each.

    The asyncio twin of :class:`~completiond.Stream`: :attr:`fold` is kept up
    to date with each event before it is handed out; a completion that does
    not end COMPLETED raises :class:`~completiond.CompletionError`; with
    ``resume_grace`` a dropped connection is healed with Attach.
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
    ) -> None:
        """Use :meth:`AsyncClient.stream` or :meth:`AsyncClient.attach`; this is their machinery."""
        #: fold is the fold of every event handed out so far.
        self.fold: Fold = fold if fold is not None else Fold()
        #: reconnects counts the Attach calls made after a drop.
        self.reconnects: int = 0
        #: restarts counts the starts sent again after a drop before the started event.
        self.restarts: int = 0
        self._restart = restart
        self._open_call = open_call
        self._open_attach = open_attach
        self._window = reconnect.window if attach_only else min(reconnect.window, resume_grace)
        self._reconnect = reconnect
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._call: Any = None
        self._cancelled = False
        self._events: Optional[AsyncIterator[pb.CompletionEvent]] = None

    def __aiter__(self) -> "AsyncStream":
        return self

    async def __anext__(self) -> pb.CompletionEvent:
        if self._events is None:
            self._events = self._run()
        return await self._events.__anext__()

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
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

    async def wait(self) -> Fold:
        """Reads the remaining events and returns the fold; raises the stream's error, if any."""
        async for _ in self:
            pass
        return self.fold

    def cancel(self) -> None:
        """Cancels the RPC; iteration then raises CANCELLED."""
        self._cancelled = True
        if self._call is not None:
            self._call.cancel()

    def _remaining(self) -> Optional[float]:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def _start(self, open_fn: Callable[[], Any]) -> Any:
        if self._cancelled:
            raise self._error(CompletionError(grpc.StatusCode.CANCELLED, "cancelled by the caller"))
        self._call = open_fn()
        return self._call

    def _error(self, err: CompletionError) -> CompletionError:
        err.result, err.completion_id, err.fold = self.fold.result, self.fold.completion_id, self.fold
        return err

    async def _run(self) -> AsyncIterator[pb.CompletionEvent]:
        call = self._start(lambda: self._open_call(self._remaining()))
        drop = _Drop()
        while True:
            err: Optional[grpc.RpcError] = None
            try:
                async for event in call:
                    if self.fold.add(event):
                        drop = _Drop()  # events flow again: a later drop starts afresh
                        yield event
            except grpc.RpcError as e:
                err = e
            except asyncio.CancelledError:
                if self._cancelled:  # grpc.aio ends a cancelled call so
                    raise self._error(CompletionError(grpc.StatusCode.CANCELLED, "cancelled by the caller")) from None
                raise
            if err is None and self.fold.ended:
                return
            if self._resumable(err):
                call = await self._reattach(drop, err)
            elif self._restart and not self._cancelled and restartable(err, self.fold):
                call = await self._restart_call(drop, err)
            else:
                call = None
            if call is None:
                if err is None:  # the server never ends a stream OK without its result
                    raise self._error(CompletionError(grpc.StatusCode.INTERNAL, "the stream ended without a result"))
                raise self._error(error_from_grpc(err)) from None

    async def _reattach(self, drop: _Drop, cause: Optional[grpc.RpcError]) -> Any:
        wait = drop.next_wait(self._reconnect, self._window, self._deadline, cause)
        if wait is None:
            return None
        await asyncio.sleep(wait)
        call = self._start(lambda: self._open_attach(self.fold.completion_id, self.fold.last_seq, self._remaining()))
        self.reconnects += 1
        return call

    async def _restart_call(self, drop: _Drop, cause: Optional[grpc.RpcError]) -> Any:
        """Waits the next backoff after cause and sends the start again (same idempotency_key)."""
        wait = drop.next_wait(self._reconnect, self._reconnect.window, self._deadline, cause)
        if wait is None:
            return None
        await asyncio.sleep(wait)
        call = self._start(lambda: self._open_call(self._remaining()))
        self.restarts += 1
        return call

    def _resumable(self, err: Optional[grpc.RpcError]) -> bool:
        return self._window > 0 and not self._cancelled and dropped(err, self.fold)


class AsyncSession(AsyncIterator[pb.CompletionEvent]):
    """One Session RPC for ``async for``: iterate its events and answer them with the send methods.

    The start message is sent first. It keeps :attr:`fold` up to date and
    raises :class:`~completiond.CompletionError` when the RPC ends with a
    status other than OK. It does not resume after a dropped connection (the
    sync :class:`~completiond.Session` does): a drop raises UNAVAILABLE.
    """

    def __init__(self, call: Any, start: pb.SessionStart) -> None:
        """Use :meth:`AsyncClient.session`."""
        #: fold is the fold of every event handed out so far.
        self.fold: Fold = Fold()
        self._call = call
        self._start = start
        self._started = False
        self._closed = False
        self._events: Optional[AsyncIterator[pb.CompletionEvent]] = None

    def __aiter__(self) -> "AsyncSession":
        return self

    async def __anext__(self) -> pb.CompletionEvent:
        if self._events is None:
            self._events = self._run()
        return await self._events.__anext__()

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self.fold.ended:
            self.cancel()
        await self.close()

    async def send(self, request: pb.SessionRequest) -> None:
        """Sends one SessionRequest (after start); refused once the request stream is closed."""
        if self._closed:
            raise RuntimeError("the session's request stream is closed")
        await self._send_start()
        await self._call.write(request)

    async def send_tool_results(self, results: Sequence[pb.ToolResultBlock]) -> None:
        """Answers tool calls."""
        await self.send(pb.SessionRequest(tool_results=pb.ToolResults(results=list(results))))

    async def send_verdict(self, verdict: pb.StopHookVerdict) -> None:
        """Answers a stop_hook_request."""
        await self.send(pb.SessionRequest(stop_hook_verdict=verdict))

    async def send_cancel(self, reason: str = "") -> None:
        """Asks the server to end the completion (ABORTED_TOOLS or ABORTED_STREAMING)."""
        await self.send(pb.SessionRequest(cancel=pb.Cancel(reason=reason)))

    async def close(self) -> None:
        """Half-closes the request stream: nothing more will be sent."""
        if not self._closed and not self._call.done():
            self._closed = True
            try:
                await self._send_start()
                await self._call.done_writing()
            except (grpc.RpcError, asyncio.InvalidStateError):
                pass  # the RPC has ended: nothing to close
        self._closed = True

    def cancel(self) -> None:
        """Cancels the RPC."""
        self._call.cancel()

    async def _send_start(self) -> None:
        if not self._started:
            self._started = True
            await self._call.write(pb.SessionRequest(start=self._start))

    def _error(self, err: CompletionError) -> CompletionError:
        err.result, err.completion_id, err.fold = self.fold.result, self.fold.completion_id, self.fold
        return err

    async def _run(self) -> AsyncIterator[pb.CompletionEvent]:
        try:
            await self._send_start()
            async for event in self._call:
                if self.fold.add(event):
                    yield event
        except grpc.RpcError as err:
            raise self._error(error_from_grpc(err)) from None
        if not self.fold.ended:
            raise self._error(CompletionError(grpc.StatusCode.INTERNAL, "the session ended without a result"))


AsyncTools = Union[AsyncToolCallback, Mapping[str, AsyncToolFunction], None]


async def answer_tool_async(tools: AsyncTools, call: pb.ToolCall) -> pb.ToolResultBlock:
    """The result of one tool call, as :func:`completiond.session.answer_tool` makes it; tools may be async."""
    try:
        if tools is None:
            return pb.ToolResultBlock(tool_use_id=call.id, text="this caller runs no tools", is_error=True)
        if callable(tools):
            out = await _maybe_await(tools(call))
        elif call.name in tools:
            out = await _maybe_await(tools[call.name](tool_input(call)))
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


class AsyncClient:
    """The asyncio client of completiond's ``completion.v1.Completion`` service.

    Its arguments are :class:`~completiond.Client`'s (connections
    included); the channels are ``grpc.aio`` channels. Use it as
    ``async with``, or ``await close()``.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        api_key: Optional[str] = None,
        tls: bool = False,
        root_certificates: Optional[bytes] = None,
        channel_credentials: Optional[grpc.ChannelCredentials] = None,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
        reconnect: Reconnect = Reconnect(),
        connections: int = 1,
    ) -> None:
        target = target or default_address()
        if channel_credentials is None and (tls or root_certificates is not None):
            channel_credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
        opts = spread_options(options, connections)
        channels = [
            grpc.aio.secure_channel(target, channel_credentials, options=opts) if channel_credentials is not None
            else grpc.aio.insecure_channel(target, options=opts)
            for _ in range(max(connections, 1))
        ]
        self._init(channels, api_key, reconnect, owned=True)

    @classmethod
    def from_channel(
        cls, channel: grpc.aio.Channel, *, api_key: Optional[str] = None, reconnect: Reconnect = Reconnect()
    ) -> "AsyncClient":
        """A client over an existing grpc.aio channel, which :meth:`close` leaves open."""
        client = cls.__new__(cls)
        client._init([channel], api_key, reconnect, owned=False)
        return client

    def _init(
        self, channels: List[grpc.aio.Channel], api_key: Optional[str], reconnect: Reconnect, owned: bool
    ) -> None:
        #: channels are the grpc.aio channels the calls go over, each call on the next.
        self.channels: List[grpc.aio.Channel] = channels
        #: channel is the first of them (the only one by default).
        self.channel: grpc.aio.Channel = channels[0]
        self._stubs = [pb_grpc.CompletionStub(c) for c in channels]
        self._turn = itertools.count()
        self._metadata: List[Tuple[str, str]] = [("authorization", "Bearer " + api_key)] if api_key else []
        self._owned = owned
        #: reconnect says how streams attach again after a drop.
        self.reconnect: Reconnect = reconnect

    @property
    def stub(self) -> pb_grpc.CompletionStub:
        """The generated stub, for anything this client does not wrap: over the next channel at each use."""
        return self._stubs[next(self._turn) % len(self._stubs)]

    async def close(self) -> None:
        """Closes the channels, if this client opened them."""
        if self._owned:
            for channel in self.channels:
                await channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _md(self, metadata: Optional[Metadata]) -> List[Tuple[str, str]]:
        return self._metadata + list(metadata or ())

    def stream(
        self, request: pb.CompleteRequest, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> AsyncStream:
        """Starts a Stream RPC: ``async for`` the result's events (see :class:`AsyncStream`).

        As the sync client's :meth:`~completiond.Client.stream`, the request
        carries an idempotency_key, and a start that dropped before its
        started event is sent again with it.
        """
        request = with_idempotency_key(request)
        md = self._md(metadata)
        grace = seconds(request.resume_grace) if request.HasField("resume_grace") else 0.0
        return AsyncStream(
            lambda t: self.stub.Stream(request, timeout=t, metadata=md),
            lambda cid, seq, t: self.stub.Attach(pb.AttachRequest(completion_id=cid, after_seq=seq),
                                                 timeout=t, metadata=md),
            resume_grace=grace,
            reconnect=self.reconnect,
            timeout=timeout,
            restart=True,
        )

    def attach(
        self,
        completion_id: str,
        after_seq: int = 0,
        *,
        fold: Optional[Fold] = None,
        timeout: Optional[float] = None,
        metadata: Optional[Metadata] = None,
    ) -> AsyncStream:
        """Follows a running or recently ended completion from after_seq (Attach RPC), as the sync
        client's :meth:`~completiond.Client.attach`."""
        md = self._md(metadata)
        fold = fold if fold is not None else Fold()
        if not fold.completion_id:
            fold.completion_id = completion_id
        fold.last_seq = start = max(after_seq, fold.last_seq)
        return AsyncStream(
            lambda t: self.stub.Attach(pb.AttachRequest(completion_id=completion_id, after_seq=start),
                                       timeout=t, metadata=md),
            lambda cid, seq, t: self.stub.Attach(pb.AttachRequest(completion_id=cid, after_seq=seq),
                                                 timeout=t, metadata=md),
            reconnect=self.reconnect,
            timeout=timeout,
            fold=fold,
            attach_only=True,
        )

    async def complete(
        self, request: pb.CompleteRequest, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> pb.CompleteResponse:
        """Runs a Complete RPC: the aggregated result and every transition, or a CompletionError."""
        try:
            response: pb.CompleteResponse = await self.stub.Complete(with_idempotency_key(request),
                                                                     timeout=timeout,
                                                                     metadata=self._md(metadata))
        except grpc.RpcError as err:
            raise error_from_grpc(err) from None
        return response

    async def cancel(
        self, completion_id: str, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> pb.CancelResponse:
        """Ends the running completion completion_id (Cancel RPC), as the sync client's
        :meth:`~completiond.Client.cancel`."""
        try:
            response: pb.CancelResponse = await self.stub.Cancel(
                pb.CancelRequest(completion_id=completion_id), timeout=timeout, metadata=self._md(metadata))
        except grpc.RpcError as err:
            raise error_from_grpc(err, completion_id=completion_id) from None
        return response

    async def list_routes(
        self, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> List[pb.RouteInfo]:
        """The routes this client's key may use, sorted by name (ListRoutes RPC), as the sync
        client's :meth:`~completiond.Client.list_routes`."""
        try:
            response: pb.ListRoutesResponse = await self.stub.ListRoutes(
                pb.ListRoutesRequest(), timeout=timeout, metadata=self._md(metadata))
        except grpc.RpcError as err:
            raise error_from_grpc(err) from None
        return list(response.routes)

    def session(
        self,
        start: Union[pb.SessionStart, pb.CompleteRequest],
        *,
        timeout: Optional[float] = None,
        metadata: Optional[Metadata] = None,
    ) -> AsyncSession:
        """Starts a Session RPC (a bare CompleteRequest is wrapped in a SessionStart)."""
        start = keyed_start(start)  # an idempotency_key: a start sent again is not a second Session
        return AsyncSession(self.stub.Session(timeout=timeout, metadata=self._md(metadata)), start)

    async def run_session(
        self,
        start: Union[pb.SessionStart, pb.CompleteRequest],
        tools: AsyncTools,
        stop_hook: Optional[Callable[[pb.StopHookRequest], Any]] = None,
        on_event: Optional[AsyncEventCallback] = None,
        *,
        timeout: Optional[float] = None,
        metadata: Optional[Metadata] = None,
    ) -> Fold:
        """Runs a whole Session tool loop and returns the fold at its end, as the sync client's
        :meth:`~completiond.Client.run_session`; tools, stop_hook and on_event may be coroutine
        functions. It does not resume after a dropped connection."""
        session = self.session(start, timeout=timeout, metadata=metadata)
        cause: Optional[BaseException] = None
        cancelled = False
        try:
            async for event in session:
                if cancelled:
                    continue
                try:
                    if on_event is not None:
                        await _maybe_await(on_event(event))
                    kind = event.WhichOneof("event")
                    if kind == "tool_call":
                        await session.send_tool_results([await answer_tool_async(tools, event.tool_call)])
                    elif kind == "stop_hook_request":
                        try:
                            verdict = await _judge_async(stop_hook, event.stop_hook_request)
                        except CancelSession:
                            raise
                        except Exception as exc:
                            cause = exc
                            await session.send_cancel(f"stop hook failed: {exc}")
                            cancelled = True
                            continue
                        await session.send_verdict(verdict)
                except CancelSession as cancel:
                    await session.send_cancel(cancel.reason)
                    cancelled = True
        except CompletionError as err:
            if cause is not None:
                raise err from cause
            raise
        except BaseException:
            session.cancel()
            raise
        finally:
            await session.close()
        return session.fold


async def _judge_async(stop_hook: Optional[Callable[[pb.StopHookRequest], Any]],
                       request: pb.StopHookRequest) -> pb.StopHookVerdict:
    """The verdict of a stop hook that may be a coroutine function; VERDICT_ALLOW without one."""
    out = None if stop_hook is None else await _maybe_await(stop_hook(request))
    return judge(lambda _: out, request)
