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
from completiond._proto.google.rpc import error_details_pb2, status_pb2

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


# What completiond answers for each terminal reason (service/grpc_status.go),
# used only to rebuild the error of a completion followed with Attach, which
# itself ends OK whatever the completion's end.
_REASON_CODES = {
    pb.TRANSITION_REASON_ABORTED_STREAMING: grpc.StatusCode.CANCELLED,
    pb.TRANSITION_REASON_ABORTED_TOOLS: grpc.StatusCode.CANCELLED,
    pb.TRANSITION_REASON_PROMPT_TOO_LONG: grpc.StatusCode.FAILED_PRECONDITION,
    pb.TRANSITION_REASON_BLOCKING_LIMIT: grpc.StatusCode.FAILED_PRECONDITION,
    pb.TRANSITION_REASON_IMAGE_ERROR: grpc.StatusCode.FAILED_PRECONDITION,
    pb.TRANSITION_REASON_MAX_TURNS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.TRANSITION_REASON_STOP_HOOK_PREVENTED: grpc.StatusCode.ABORTED,
    pb.TRANSITION_REASON_HOOK_STOPPED: grpc.StatusCode.ABORTED,
}
_KIND_CODES = {
    pb.ERROR_KIND_TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    pb.ERROR_KIND_QUOTA: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.ERROR_KIND_RATE_LIMIT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    pb.ERROR_KIND_INVALID_REQUEST: grpc.StatusCode.FAILED_PRECONDITION,
    pb.ERROR_KIND_CONTENT_FILTER: grpc.StatusCode.FAILED_PRECONDITION,
    pb.ERROR_KIND_PREFILL_REJECTED: grpc.StatusCode.FAILED_PRECONDITION,
    pb.ERROR_KIND_AUTH: grpc.StatusCode.INTERNAL,
    pb.ERROR_KIND_NOT_FOUND: grpc.StatusCode.INTERNAL,
}


def error_from_result(result: pb.Result, completion_id: str = "") -> Optional[CompletionError]:
    """The error a completion's Result stands for (None when COMPLETED).

    Attach ends OK once it has sent the result, so a stream that reconnected
    has no status of its own: this rebuilds it as the server would (the code
    it maps the terminal reason and upstream failure to, its message, and an
    ErrorInfo with the reason and the failure's metadata). Whether RetryInfo
    would have come is not known from a result, so such an error is never
    retryable.
    """
    if result.reason == pb.TRANSITION_REASON_COMPLETED:
        return None
    name = pb.TransitionReason.Name(result.reason)[len("TRANSITION_REASON_"):]
    failure = result.error if result.HasField("error") else None
    code = _REASON_CODES.get(result.reason)
    if code is None:  # MODEL_ERROR: by the upstream failure
        code = _KIND_CODES.get(failure.kind, grpc.StatusCode.UNAVAILABLE) if failure else grpc.StatusCode.INTERNAL
    text = "completion ended " + name
    metadata: Dict[str, str] = {}
    if failure is not None:
        text += ": " + _failure_text(failure)
        metadata = _failure_metadata(failure)
    info = error_details_pb2.ErrorInfo(reason=name, domain=DOMAIN, metadata=metadata)
    return CompletionError(code, text, details=[info], result=result, completion_id=completion_id)


def _kind_name(kind: int) -> str:
    """An ErrorKind as the server names it in messages and metadata, e.g. "rate_limit"."""
    return "unknown" if kind == pb.ERROR_KIND_UNSPECIFIED else pb.ErrorKind.Name(kind)[len("ERROR_KIND_"):].lower()


def _failure_text(e: pb.UpstreamError) -> str:
    text = _kind_name(e.kind)
    if e.http_status:
        text += f" (HTTP {e.http_status})"
    if e.message:
        text += ": " + e.message
    return text


def _failure_metadata(e: pb.UpstreamError) -> Dict[str, str]:
    md = {"error_kind": _kind_name(e.kind)}
    for key, value in (("provider", e.provider), ("type", e.type), ("code", e.code), ("request_id", e.request_id)):
        if value:
            md[key] = value
    if e.http_status:
        md["http_status"] = str(e.http_status)
    return md
