"""completiond-client: the Python client of completiond, recoverable LLM completions over gRPC.

>>> import completiond
>>> with completiond.Client() as client:                      # COMPLETIOND_ADDR or localhost:50051
...     stream = client.stream(completiond.text_request("Explain backoff."))
...     for event in stream:                                   # typed pb.CompletionEvent messages
...         if event.HasField("delta"):
...             print(event.delta.text, end="")
...     print(stream.fold.text)                                # the kept answer, per the stream contract

The generated messages are here under friendly names: :mod:`pb` (completion.v1),
:mod:`pb_grpc` (its stub), :mod:`rpc_status`, :mod:`error_details` and
:mod:`rpc_code` (google.rpc: googleapis-common-protos' modules when it is
installed, else completiond's own copy). :class:`AsyncClient` is the asyncio
client (grpc.aio).
"""

from completiond._proto.completion.v1 import completion_pb2 as pb
from completiond._proto.completion.v1 import completion_pb2_grpc as pb_grpc
from completiond._rpc import code_pb2 as rpc_code
from completiond._rpc import error_details_pb2 as error_details
from completiond._rpc import status_pb2 as rpc_status
from completiond.client import (
    DEFAULT_ADDRESS,
    Client,
    cache_breakpoint,
    default_address,
    document_block,
    document_url_block,
    image_block,
    image_url_block,
    prompt_cache_auto,
    prompt_cache_caller,
    prompt_cache_off,
    text_block,
    text_request,
    tool_choice_any,
    tool_choice_auto,
    tool_choice_none,
    tool_choice_tool,
    user_message,
)
from completiond.errors import DOMAIN, CompletionError, FieldViolation, error_from_grpc, error_from_status
from completiond.fold import Fold, Turn, tool_input
from completiond.session import CancelSession, Session, allow, block, prevent
from completiond.stream import Reconnect, Stream
from completiond.aio import AsyncClient, AsyncSession, AsyncStream

#: __version__ is the package's version (the repository's release).
__version__ = "0.2.0"

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AsyncStream",
    "CancelSession",
    "Client",
    "CompletionError",
    "DEFAULT_ADDRESS",
    "DOMAIN",
    "FieldViolation",
    "Fold",
    "Reconnect",
    "Session",
    "Stream",
    "Turn",
    "allow",
    "block",
    "cache_breakpoint",
    "default_address",
    "document_block",
    "document_url_block",
    "error_details",
    "error_from_grpc",
    "error_from_status",
    "image_block",
    "image_url_block",
    "pb",
    "pb_grpc",
    "prevent",
    "prompt_cache_auto",
    "prompt_cache_caller",
    "prompt_cache_off",
    "rpc_code",
    "rpc_status",
    "text_block",
    "text_request",
    "tool_choice_any",
    "tool_choice_auto",
    "tool_choice_none",
    "tool_choice_tool",
    "tool_input",
    "user_message",
]
