"""The typed error of a completion that did not end OK.

completiond ends every failed RPC with a status whose details say what
happened: ``google.rpc.ErrorInfo`` (the terminal transition's reason),
``RetryInfo`` when the same request may succeed later, ``BadRequest`` with
field violations when the request was refused before any upstream call.
gRPC carries them in the ``grpc-status-details-bin`` trailer as a binary
``google.rpc.Status``; :func:`error_from_grpc` and :func:`error_from_status`
decode it into a :class:`CompletionError`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message as ProtoMessage

from completiond._proto.completion.v1 import completion_pb2 as pb
from completiond._rpc import error_details_pb2, status_pb2

if TYPE_CHECKING:
    from completiond.fold import Fold

#: DOMAIN is the ErrorInfo domain of the errors completiond itself raises.
DOMAIN = "completiond.completion.v1"

#: DETAILS_KEY is the trailer that carries the binary google.rpc.Status.
DETAILS_KEY = "grpc-status-details-bin"

_CODES = {c.value[0]: c for c in grpc.StatusCode}


@dataclasses.dataclass(frozen=True)
class FieldViolation:
    """One field of a refused request (google.rpc.BadRequest.FieldViolation)."""

    #: field is the path of the offending field, e.g. ``messages``.
    field: str
    #: description says what is wrong with it.
    description: str


class CompletionError(Exception):
    """A completion's RPC ended with a status other than OK.

    Attributes mirror the status and its details; the ones a caller acts on
    are :attr:`code`, :attr:`terminal_reason`, :attr:`retryable` and
    :attr:`retry_delay`, and :attr:`field_violations` for a refused request.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        details: Sequence[ProtoMessage] = (),
        result: Optional[pb.Result] = None,
        completion_id: str = "",
        status: Optional[status_pb2.Status] = None,
    ) -> None:
        super().__init__(message)
        #: code is the gRPC status code.
        self.code: grpc.StatusCode = code
        #: message is the status message.
        self.message: str = message
        #: details are the status details, unpacked when they are google.rpc
        #: error details (ErrorInfo, RetryInfo, BadRequest, ...), else the Any.
        self.details: List[ProtoMessage] = list(details)
        #: result is the completion's Result when the stream carried one
        #: (a stream that failed after its terminal transition), else None.
        self.result: Optional[pb.Result] = result
        #: completion_id is the id from the stream's started event ("" without).
        self.completion_id: str = completion_id
        #: status is the decoded google.rpc.Status, when the trailer had one.
        self.status: Optional[status_pb2.Status] = status
        #: fold is the stream's fold when a Stream or Session raised the error
        #: (the partial answer, every transition), else None.
        self.fold: Optional[Fold] = None
        info = _first(self.details, error_details_pb2.ErrorInfo)
        retry = _first(self.details, error_details_pb2.RetryInfo)
        bad = _first(self.details, error_details_pb2.BadRequest)
        #: reason is ErrorInfo.reason as sent, e.g. "MODEL_ERROR" ("" without ErrorInfo).
        self.reason: str = info.reason if info else ""
        #: domain is ErrorInfo.domain, "completiond.completion.v1" for the service's own.
        self.domain: str = info.domain if info else ""
        #: metadata is ErrorInfo.metadata ({} without), e.g. error_kind, http_status.
        self.metadata: Dict[str, str] = dict(info.metadata) if info else {}
        #: retry_delay is RetryInfo.retry_delay in seconds, None without RetryInfo.
        self.retry_delay: Optional[float] = (
            retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9 if retry else None
        )
        #: field_violations are BadRequest's ([] without).
        self.field_violations: List[FieldViolation] = (
            [FieldViolation(v.field, v.description) for v in bad.field_violations] if bad else []
        )

    @property
    def retryable(self) -> bool:
        """True exactly when the status carries RetryInfo: the same request may succeed later."""
        return self.retry_delay is not None

    @property
    def terminal_reason(self) -> pb.TransitionReason:
        """The TransitionReason ErrorInfo.reason names, TRANSITION_REASON_UNSPECIFIED when none."""
        try:
            return cast(pb.TransitionReason, pb.TransitionReason.Value("TRANSITION_REASON_" + self.reason))
        except ValueError:
            return pb.TRANSITION_REASON_UNSPECIFIED

    @property
    def terminal_reason_name(self) -> str:
        """The name of :attr:`terminal_reason`, e.g. "TRANSITION_REASON_MODEL_ERROR"."""
        return pb.TransitionReason.Name(self.terminal_reason)

    def to_dict(self) -> Dict[str, Any]:
        """The error as the golden transcripts' ``expect.error`` object (plain JSON values)."""
        return {
            "code": self.code.name,
            "message": self.message,
            "reason": self.reason,
            "terminal_reason": self.terminal_reason_name,
            "domain": self.domain,
            "metadata": dict(self.metadata),
            "retryable": self.retryable,
            "retry_delay_seconds": self.retry_delay,
            "field_violations": [dataclasses.asdict(v) for v in self.field_violations],
        }

    def __str__(self) -> str:
        parts = [f"{self.code.name}: {self.message}"]
        if self.reason:
            parts.append(f"reason {self.reason}")
        if self.retry_delay is not None:
            parts.append(f"retry after {self.retry_delay:g}s")
        for v in self.field_violations:
            parts.append(f"{v.field}: {v.description}")
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"CompletionError({self.code.name}, {self.message!r}, reason={self.reason!r})"


def status_code(code: Union[int, grpc.StatusCode]) -> grpc.StatusCode:
    """The grpc.StatusCode of a numeric code (UNKNOWN for a number gRPC does not define)."""
    if isinstance(code, grpc.StatusCode):
        return code
    return _CODES.get(int(code), grpc.StatusCode.UNKNOWN)


def error_from_status(
    code: Union[int, grpc.StatusCode],
    message: str,
    details_bin: bytes = b"",
    *,
    result: Optional[pb.Result] = None,
    completion_id: str = "",
) -> Optional[CompletionError]:
    """Builds the error of an RPC that ended with code and message.

    details_bin is the ``grpc-status-details-bin`` trailer: a serialized
    google.rpc.Status (b"" when there was none). Returns None for OK.
    """
    code = status_code(code)
    if code == grpc.StatusCode.OK:
        return None
    status = None
    details: List[ProtoMessage] = []
    if details_bin:
        status = status_pb2.Status.FromString(details_bin)
        details = [_unpack(d) for d in status.details]
    return CompletionError(
        code, message, details=details, result=result, completion_id=completion_id, status=status
    )


def error_from_grpc(
    err: grpc.RpcError, *, result: Optional[pb.Result] = None, completion_id: str = ""
) -> CompletionError:
    """Builds the error from grpc's own: its code, details and status trailer.

    err is what a failed call raises (a grpc.Call as well as a grpc.RpcError).
    An error that is not a call (no code) becomes UNKNOWN with its text.
    """
    if not callable(getattr(err, "code", None)):
        return CompletionError(grpc.StatusCode.UNKNOWN, str(err), result=result, completion_id=completion_id)
    code = err.code()
    text = err.details() or ""
    details_bin = b""
    for key, value in err.trailing_metadata() or ():
        if key == DETAILS_KEY:
            details_bin = value if isinstance(value, bytes) else value.encode()
    built = error_from_status(code, text, details_bin, result=result, completion_id=completion_id)
    if built is None:  # a call that failed with OK: not one gRPC produces
        return CompletionError(grpc.StatusCode.UNKNOWN, text, result=result, completion_id=completion_id)
    return built


_DETAIL_TYPES: Tuple[Any, ...] = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.RetryInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.DebugInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.RequestInfo,
    error_details_pb2.ResourceInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)


def _unpack(detail: any_pb2.Any) -> ProtoMessage:
    """The google.rpc error detail in an Any, or the Any itself for another type."""
    for kind in _DETAIL_TYPES:
        if detail.Is(kind.DESCRIPTOR):
            out = kind()
            detail.Unpack(out)
            return out
    return detail


def _first(details: Sequence[ProtoMessage], kind: Any) -> Any:
    for d in details:
        if isinstance(d, kind):
            return d
    return None
