"""The completiond client: Stream, Complete, Session, Attach, Cancel and ListRoutes over one gRPC channel."""

from __future__ import annotations

import datetime
import itertools
import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from completiond._proto.completion.v1 import completion_pb2 as pb
from completiond._proto.completion.v1 import completion_pb2_grpc as pb_grpc
from completiond.errors import error_from_grpc
from completiond.fold import Fold
from completiond.session import EventCallback, Session, StopHookCallback, ToolCallback, ToolFunction, drive
from completiond.stream import Reconnect, Stream, keyed_start, seconds, with_idempotency_key

#: DEFAULT_ADDRESS is where ``make run`` serves.
DEFAULT_ADDRESS = "localhost:50051"

Metadata = Sequence[Tuple[str, str]]


def default_address() -> str:
    """COMPLETIOND_ADDR when it is set, else localhost:50051."""
    return os.environ.get("COMPLETIOND_ADDR") or DEFAULT_ADDRESS


def spread_options(
    options: Optional[Sequence[Tuple[str, Any]]], connections: int
) -> Optional[Sequence[Tuple[str, Any]]]:
    """The channel options of one of ``connections`` channels to one target.

    gRPC's C core shares one connection between the channels of a process
    that have the same target and options; a channel of its own local
    subchannel pool has its own, which is the point of opening several.
    """
    if connections <= 1:
        return options
    return list(options or ()) + [("grpc.use_local_subchannel_pool", 1)]


class Client:
    """A client of completiond's ``completion.v1.Completion`` service.

    >>> with Client("localhost:50051") as client:
    ...     for event in client.stream(text_request("Explain backoff.")):
    ...         print(event)

    target defaults to COMPLETIOND_ADDR, else localhost:50051. tls=True (or
    root_certificates, or channel_credentials) makes a TLS channel; api_key
    is sent with every call as ``authorization: Bearer <key>``. options are
    grpc channel options; reconnect says how streams attach again (and
    Sessions resume) after a drop. connections (default 1, which carries
    thousands of streams on the server's defaults) opens that many channels,
    each on its own HTTP/2 connection, and starts each call on the next: for
    a server whose --max-streams-per-conn is below the streams this client
    runs at once (past it a connection's streams wait in the client,
    silently), or to spread over replicas behind a TCP load balancer. To use
    a channel of your own, see :meth:`from_channel`.
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
            grpc.secure_channel(target, channel_credentials, options=opts) if channel_credentials is not None
            else grpc.insecure_channel(target, options=opts)
            for _ in range(max(connections, 1))
        ]
        self._init(channels, api_key, reconnect, owned=True)

    @classmethod
    def from_channel(
        cls, channel: grpc.Channel, *, api_key: Optional[str] = None, reconnect: Reconnect = Reconnect()
    ) -> "Client":
        """A client over an existing channel, which :meth:`close` leaves open."""
        client = cls.__new__(cls)
        client._init([channel], api_key, reconnect, owned=False)
        return client

    def _init(self, channels: List[grpc.Channel], api_key: Optional[str], reconnect: Reconnect, owned: bool) -> None:
        #: channels are the gRPC channels the calls go over, each call on the next.
        self.channels: List[grpc.Channel] = channels
        #: channel is the first of them (the only one by default).
        self.channel: grpc.Channel = channels[0]
        self._stubs = [pb_grpc.CompletionStub(c) for c in channels]
        self._turn = itertools.count()
        self._metadata: List[Tuple[str, str]] = [("authorization", "Bearer " + api_key)] if api_key else []
        self._owned = owned
        #: reconnect says how streams attach again, and Sessions resume, after a drop.
        self.reconnect: Reconnect = reconnect

    @property
    def stub(self) -> pb_grpc.CompletionStub:
        """The generated stub, for anything this client does not wrap: over the next channel at each use."""
        return self._stubs[next(self._turn) % len(self._stubs)]

    def close(self) -> None:
        """Closes the channels, if this client opened them."""
        if self._owned:
            for channel in self.channels:
                channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _md(self, metadata: Optional[Metadata]) -> List[Tuple[str, str]]:
        return self._metadata + list(metadata or ())

    def stream(
        self, request: pb.CompleteRequest, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> Stream:
        """Starts a Stream RPC: iterate the result for the events (see :class:`Stream`).

        With ``request.resume_grace`` set, a dropped stream re-attaches and
        goes on. timeout (seconds) bounds the whole stream, reconnects included.

        The request carries an idempotency_key (a random one unless it has
        its own; the caller's request is not changed): a start that dropped
        before its started event is sent again with it, within the reconnect
        window, and the server attaches it to the completion the first one
        began, if it did, rather than starting another.
        """
        request = with_idempotency_key(request)
        md = self._md(metadata)
        grace = seconds(request.resume_grace) if request.HasField("resume_grace") else 0.0
        return Stream(
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
    ) -> Stream:
        """Follows a running or recently ended completion from after_seq (Attach RPC).

        fold continues an earlier fold (its last_seq wins over after_seq), for
        example a failed Stream's. The stream attaches again after a drop
        within the client's reconnect window, and raises the completion's
        error when it did not end COMPLETED: Attach ends with the status the
        completion's own stream ended with.
        """
        md = self._md(metadata)
        fold = fold if fold is not None else Fold()
        if not fold.completion_id:
            fold.completion_id = completion_id
        fold.last_seq = start = max(after_seq, fold.last_seq)
        return Stream(
            lambda t: self.stub.Attach(pb.AttachRequest(completion_id=completion_id, after_seq=start),
                                       timeout=t, metadata=md),
            lambda cid, seq, t: self.stub.Attach(pb.AttachRequest(completion_id=cid, after_seq=seq),
                                                 timeout=t, metadata=md),
            reconnect=self.reconnect,
            timeout=timeout,
            fold=fold,
            attach_only=True,
        )

    def complete(
        self, request: pb.CompleteRequest, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> pb.CompleteResponse:
        """Runs a Complete RPC: the aggregated result and every transition, or a CompletionError.

        The request carries an idempotency_key (random unless it has its
        own): the same request sent again with that key waits for the first
        one's result instead of starting another completion.
        """
        try:
            response: pb.CompleteResponse = self.stub.Complete(with_idempotency_key(request), timeout=timeout,
                                                               metadata=self._md(metadata))
        except grpc.RpcError as err:
            raise error_from_grpc(err) from None
        return response

    def cancel(
        self, completion_id: str, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> pb.CancelResponse:
        """Ends the running completion completion_id (Cancel RPC), from any connection.

        It ends as its caller's own cancel would (ABORTED_STREAMING, or
        ABORTED_TOOLS while a Session awaits its caller); the response, once
        the end is in the server's log, says how it ended (``reason``,
        ``code``, ``result_seq``), with ``already_ended`` set when it had
        ended before. Raises a CompletionError: NOT_FOUND
        (COMPLETION_NOT_FOUND) for an unknown id and another key's completion
        alike, UNAVAILABLE (CANCEL_PENDING) when the end did not come within
        the server's wait (the cancel stands: call it again to wait again).
        """
        try:
            response: pb.CancelResponse = self.stub.Cancel(
                pb.CancelRequest(completion_id=completion_id), timeout=timeout, metadata=self._md(metadata))
        except grpc.RpcError as err:
            raise error_from_grpc(err, completion_id=completion_id) from None
        return response

    def list_routes(
        self, *, timeout: Optional[float] = None, metadata: Optional[Metadata] = None
    ) -> List[pb.RouteInfo]:
        """The routes this client's key may use, sorted by name (ListRoutes RPC).

        Each RouteInfo has the route's model, limits, fallbacks, capabilities
        (what the server's request validation checks against), whether it is
        the default route and whether its circuit is open now. Raises a
        CompletionError.
        """
        try:
            response: pb.ListRoutesResponse = self.stub.ListRoutes(
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
    ) -> Session:
        """Starts a Session RPC (a bare CompleteRequest is wrapped in a SessionStart).

        With ``start.request.resume_grace`` set, a dropped stream resumes the
        Session and goes on (see :class:`Session`). timeout (seconds) bounds
        the whole session, resumes included.
        """
        start = keyed_start(start)  # an idempotency_key: a start sent again is not a second Session
        md = self._md(metadata)
        return Session(lambda requests, t: self.stub.Session(requests, timeout=t, metadata=md), start,
                       reconnect=self.reconnect, timeout=timeout)

    def run_session(
        self,
        start: Union[pb.SessionStart, pb.CompleteRequest],
        tools: Union[ToolCallback, Mapping[str, ToolFunction], None],
        stop_hook: Optional[StopHookCallback] = None,
        on_event: Optional[EventCallback] = None,
        *,
        timeout: Optional[float] = None,
        metadata: Optional[Metadata] = None,
    ) -> Fold:
        """Runs a whole Session tool loop and returns the fold at its end.

        tools runs each tool call the moment it arrives (safe: a call is sent
        only once settled): one callback given the pb.ToolCall, or a mapping
        from tool name to a function given the input as a dict; it returns the
        result's text or a ToolResultBlock, and an exception becomes an
        is_error result with its message. stop_hook answers stop_hook_request
        events (only sent when ``start.stop_hook`` is set): a StopHookVerdict
        (see allow, block, prevent), a Verdict, or None; without one every
        answer is allowed. on_event sees every event first. Any of them may
        raise :class:`CancelSession` to end the session (Cancel). Raises the
        session's CompletionError when it does not end COMPLETED. With
        ``start.request.resume_grace`` set, the session survives a dropped
        connection: it resumes, sends again the answers the server may not
        have had, and the callbacks see every event once.
        """
        session = self.session(start, timeout=timeout, metadata=metadata)
        return drive(session, tools, stop_hook, on_event)


def user_message(text: str, *blocks: pb.ContentBlock) -> pb.Message:
    """A user message with one text block, followed by blocks, if any (images, documents)."""
    return pb.Message(role=pb.ROLE_USER, content=[text_block(text), *blocks])


def text_request(
    prompt: str,
    *,
    blocks: Iterable[pb.ContentBlock] = (),
    resume_grace: Union[float, datetime.timedelta, None] = None,
    metadata: Optional[Mapping[str, str]] = None,
    tools: Iterable[pb.Tool] = (),
    tool_choice: Optional[pb.ToolChoice] = None,
    disable_parallel_tool_use: bool = False,
    reasoning: Optional[pb.Reasoning] = None,
    reasoning_effort: Union[pb.ReasoningEffort, str, None] = None,
    reasoning_budget_tokens: Optional[int] = None,
    reasoning_interleaved: bool = False,
    prompt_cache: Optional[pb.PromptCache] = None,
    prompt_cache_system: bool = False,
    **fields: Any,
) -> pb.CompleteRequest:
    """A CompleteRequest whose conversation is one user message, prompt.

    blocks follow the prompt's text in its message: images and documents
    (:func:`image_url_block`, :func:`document_block` ...). resume_grace is
    seconds or a timedelta. tool_choice is one of :func:`tool_choice_auto`,
    :func:`tool_choice_any`, :func:`tool_choice_none`,
    :func:`tool_choice_tool` (or any pb.ToolChoice);
    disable_parallel_tool_use asks for at most one tool call per answer,
    whatever the tool choice (auto when there is none). reasoning_effort
    (pb.REASONING_EFFORT_LOW ..., or its name), reasoning_budget_tokens and
    reasoning_interleaved set one field of reasoning each, over the
    pb.Reasoning given as reasoning, if any. prompt_cache is one of
    :func:`prompt_cache_auto`, :func:`prompt_cache_off`,
    :func:`prompt_cache_caller` (or any pb.PromptCache); prompt_cache_system
    marks the end of the system prompt as a breakpoint of the caller's,
    whatever the mode (auto when there is none). The other fields are
    CompleteRequest's: route, system, max_output_tokens,
    max_total_output_tokens, temperature, top_p, top_k, seed,
    stop_sequences, delivery, ...
    """
    request = pb.CompleteRequest(messages=[user_message(prompt, *blocks)], tools=list(tools),
                                 metadata=dict(metadata or {}), **fields)
    if resume_grace is not None:
        if not isinstance(resume_grace, datetime.timedelta):
            resume_grace = datetime.timedelta(seconds=resume_grace)
        request.resume_grace.FromTimedelta(resume_grace)
    if tool_choice is not None:
        request.tool_choice.CopyFrom(tool_choice)
    if disable_parallel_tool_use:
        request.tool_choice.disable_parallel_tool_use = True
    if reasoning is not None:
        request.reasoning.CopyFrom(reasoning)
    if reasoning_effort is not None:
        request.reasoning.effort = (pb.ReasoningEffort.Value(reasoning_effort)
                                    if isinstance(reasoning_effort, str) else reasoning_effort)
    if reasoning_budget_tokens is not None:
        request.reasoning.budget_tokens = reasoning_budget_tokens
    if reasoning_interleaved:
        request.reasoning.interleaved = True
    if prompt_cache is not None:
        request.prompt_cache.CopyFrom(prompt_cache)
    if prompt_cache_system:
        request.prompt_cache.system = True
    return request


def text_block(text: str) -> pb.ContentBlock:
    """A content block of text."""
    return pb.ContentBlock(text=pb.TextBlock(text=text))


def image_block(media_type: str, data: bytes) -> pb.ContentBlock:
    """A content block of an inline image: media_type is image/png, image/jpeg, image/gif or image/webp."""
    return pb.ContentBlock(image=pb.ImageBlock(media_type=media_type, data=data))


def image_url_block(url: str) -> pb.ContentBlock:
    """A content block of an image by its https URL, which the provider fetches (completiond never does)."""
    return pb.ContentBlock(image=pb.ImageBlock(url=url))


def document_block(data: bytes, *, title: str = "") -> pb.ContentBlock:
    """A content block of a PDF document (Anthropic routes); title, when given, names it for the model."""
    return pb.ContentBlock(document=pb.DocumentBlock(media_type="application/pdf", data=data, title=title))


def document_url_block(url: str, *, title: str = "") -> pb.ContentBlock:
    """A content block of a PDF document by its https URL, which the provider fetches (completiond never does)."""
    return pb.ContentBlock(document=pb.DocumentBlock(url=url, title=title))


CacheMarkable = TypeVar("CacheMarkable", pb.ContentBlock, pb.Tool)


def cache_breakpoint(item: CacheMarkable) -> CacheMarkable:
    """Marks a content block or a tool as a prompt cache breakpoint of the caller's, and returns it.

    It sets the item's cache_breakpoint: the conversation up to and including
    the block, or the tools up to and including the tool, are cached. The
    server honours the caller's marks with prompt_cache_auto (the default)
    and prompt_cache_caller, and refuses them with prompt_cache_off.
    """
    item.cache_breakpoint = True
    return item


def prompt_cache_auto(*, system: bool = False) -> pb.PromptCache:
    """A PromptCache in which completiond places the breakpoints, after the caller's own marks (the default).

    system, here and in :func:`prompt_cache_caller`, marks the end of the
    system prompt (and the tools before it) as a breakpoint of the caller's.
    """
    return pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_AUTO, system=system)


def prompt_cache_off() -> pb.PromptCache:
    """A PromptCache that sends no breakpoint (the server refuses the caller's marks with it)."""
    return pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_OFF)


def prompt_cache_caller(*, system: bool = False) -> pb.PromptCache:
    """A PromptCache that sends the caller's marks only: :func:`cache_breakpoint` and system."""
    return pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_CALLER, system=system)


def tool_choice_auto(*, disable_parallel_tool_use: bool = False) -> pb.ToolChoice:
    """A ToolChoice that lets the model decide whether to call a tool (the default).

    disable_parallel_tool_use, here and in the other tool_choice_* helpers,
    asks for at most one tool call per answer.
    """
    return pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_AUTO, disable_parallel_tool_use=disable_parallel_tool_use)


def tool_choice_any(*, disable_parallel_tool_use: bool = False) -> pb.ToolChoice:
    """A ToolChoice that makes the model call at least one of the request's tools."""
    return pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_ANY, disable_parallel_tool_use=disable_parallel_tool_use)


def tool_choice_none(*, disable_parallel_tool_use: bool = False) -> pb.ToolChoice:
    """A ToolChoice that forbids tool calls."""
    return pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE, disable_parallel_tool_use=disable_parallel_tool_use)


def tool_choice_tool(name: str, *, disable_parallel_tool_use: bool = False) -> pb.ToolChoice:
    """A ToolChoice that makes the model call the tool named name, one of the request's tools."""
    return pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_TOOL, name=name, disable_parallel_tool_use=disable_parallel_tool_use)
