"""CompletionError: built from a status and its grpc-status-details-bin trailer."""

from __future__ import annotations

import unittest

import grpc
from google.protobuf import any_pb2, duration_pb2

import completiond
from completiond import error_details, pb, rpc_status

from .support import FakeRpcError


def status_bin(code: int, message: str, *details: object) -> bytes:
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    return rpc_status.Status(code=code, message=message, details=packed).SerializeToString()


class ErrorTest(unittest.TestCase):
    def test_ok_is_no_error(self) -> None:
        self.assertIsNone(completiond.error_from_status(0, ""))
        self.assertIsNone(completiond.error_from_status(grpc.StatusCode.OK, ""))

    def test_model_error_with_retry_info(self) -> None:
        info = error_details.ErrorInfo(reason="MODEL_ERROR", domain=completiond.DOMAIN,
                                       metadata={"error_kind": "overloaded", "http_status": "529"})
        retry = error_details.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000))
        err = completiond.error_from_status(14, "completion ended MODEL_ERROR", status_bin(14, "m", info, retry))
        assert err is not None
        self.assertEqual(err.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(err.reason, "MODEL_ERROR")
        self.assertEqual(err.terminal_reason, pb.TRANSITION_REASON_MODEL_ERROR)
        self.assertEqual(err.domain, completiond.DOMAIN)
        self.assertEqual(err.metadata, {"error_kind": "overloaded", "http_status": "529"})
        self.assertTrue(err.retryable)
        self.assertEqual(err.retry_delay, 2.5)
        self.assertEqual(err.field_violations, [])
        self.assertIn("retry after 2.5s", str(err))
        self.assertEqual(len(err.details), 2)
        assert err.status is not None
        self.assertEqual(err.status.code, 14)

    def test_zero_retry_delay_is_retryable(self) -> None:
        retry = error_details.RetryInfo(retry_delay=duration_pb2.Duration())
        err = completiond.error_from_status(14, "server shutting down, retry", status_bin(14, "", retry))
        assert err is not None
        self.assertTrue(err.retryable)
        self.assertEqual(err.retry_delay, 0.0)

    def test_field_violations(self) -> None:
        bad = error_details.BadRequest(field_violations=[
            error_details.BadRequest.FieldViolation(field="messages", description="at least one message is required")])
        err = completiond.error_from_status(3, "invalid request", status_bin(3, "", bad))
        assert err is not None
        self.assertEqual(err.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.field_violations,
                         [completiond.FieldViolation("messages", "at least one message is required")])
        self.assertEqual(err.reason, "")
        self.assertEqual(err.terminal_reason, pb.TRANSITION_REASON_UNSPECIFIED)
        self.assertFalse(err.retryable)
        self.assertIsNone(err.retry_delay)

    def test_reason_naming_no_transition(self) -> None:
        info = error_details.ErrorInfo(reason="KEY_RATE", domain=completiond.DOMAIN)
        err = completiond.error_from_status(8, "slow down", status_bin(8, "", info))
        assert err is not None
        self.assertEqual(err.terminal_reason, pb.TRANSITION_REASON_UNSPECIFIED)
        self.assertEqual(err.to_dict()["terminal_reason"], "TRANSITION_REASON_UNSPECIFIED")

    def test_unknown_detail_is_kept_packed(self) -> None:
        other = any_pb2.Any(type_url="type.example.com/x.Y", value=b"\x08\x01")
        raw = rpc_status.Status(code=13, message="", details=[other]).SerializeToString()
        err = completiond.error_from_status(13, "boom", raw)
        assert err is not None
        self.assertEqual([(d.type_url, d.value) for d in err.details], [(other.type_url, other.value)])

    def test_unknown_code_number(self) -> None:
        err = completiond.error_from_status(99, "odd")
        assert err is not None
        self.assertEqual(err.code, grpc.StatusCode.UNKNOWN)

    def test_from_grpc_reads_the_trailer(self) -> None:
        info = error_details.ErrorInfo(reason="STOP_HOOK_PREVENTED", domain=completiond.DOMAIN)
        err = completiond.error_from_grpc(FakeRpcError(grpc.StatusCode.ABORTED, "ended", status_bin(10, "", info)),
                                          completion_id="cmpl_1")
        self.assertEqual(err.code, grpc.StatusCode.ABORTED)
        self.assertEqual(err.message, "ended")
        self.assertEqual(err.terminal_reason, pb.TRANSITION_REASON_STOP_HOOK_PREVENTED)
        self.assertEqual(err.completion_id, "cmpl_1")

    def test_from_grpc_without_trailer(self) -> None:
        err = completiond.error_from_grpc(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
        self.assertEqual((err.code, err.message, err.reason, err.details), (grpc.StatusCode.UNAVAILABLE, "Socket closed", "", []))

    def test_from_grpc_of_a_bare_rpc_error(self) -> None:
        err = completiond.error_from_grpc(grpc.RpcError("odd"))
        self.assertEqual(err.code, grpc.StatusCode.UNKNOWN)


if __name__ == "__main__":
    unittest.main()
