"""The reconnect rule the three client libraries share (clients/testdata/reconnect.json), and the
jitter of each pause."""

from __future__ import annotations

import json
import pathlib
import unittest
from typing import Any, Dict, List, Optional

import grpc
from google.protobuf import duration_pb2

import completiond
from completiond import pb
from completiond._rpc import error_details_pb2, status_pb2
from completiond.fold import Fold
from completiond.stream import dropped, retry_delay
from tests.support import FakeRpcError

RULE = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "reconnect.json"


def cases() -> List[Dict[str, Any]]:
    """The rows of the shared table."""
    with open(RULE, encoding="utf-8") as f:
        return list(json.load(f)["cases"])


def end(case: Dict[str, Any]) -> Optional[grpc.RpcError]:
    """The error a call of the case ended with (None: it ended OK), its details in the status trailer."""
    if case["code"] == "OK":
        return None
    code = grpc.StatusCode[case["code"]]
    st = status_pb2.Status(code=code.value[0], message=case["name"])
    if case["reason"]:
        st.details.add().Pack(error_details_pb2.ErrorInfo(reason=case["reason"], domain="completiond.completion.v1"))
    if case["retry_delay_seconds"] is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(case["retry_delay_seconds"] * 1e9))
        st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return FakeRpcError(code, case["name"], st.SerializeToString() if st.details else b"")


def fold(case: Dict[str, Any]) -> Fold:
    """What the call had received: the started event, the result."""
    f = Fold()
    if case["started"]:
        f.add(pb.CompletionEvent(seq=1, started=pb.Started(completion_id="cmpl_r")))
    if case["result"]:
        f.add(pb.CompletionEvent(seq=2, result=pb.Result()))
    return f


class ReconnectRuleTest(unittest.TestCase):
    def test_the_shared_table(self) -> None:
        zero = completiond.Reconnect(jitter=lambda: 0.0)
        rows = cases()
        self.assertTrue(rows)
        for case in rows:
            with self.subTest(case["name"]):
                err = end(case)
                self.assertEqual(dropped(err, fold(case)), case["reconnect"])
                if case["reconnect"]:
                    self.assertAlmostEqual(zero.wait(1, retry_delay(err)), case["min_wait_seconds"])

    def test_full_jitter(self) -> None:
        fraction = [0.0]
        r = completiond.Reconnect(backoff=0.05, max_backoff=1.0, jitter=lambda: fraction[0])
        for attempt, f, floor, want in [(1, 0.5, 0.0, 0.025), (2, 0.5, 0.0, 0.05), (5, 0.25, 0.0, 0.2),
                                        (6, 0.999, 0.0, 0.999), (40, 0.1, 0.0, 0.1), (1, 0.1, 1.0, 1.0),
                                        (6, 0.9, 0.5, 0.9)]:
            fraction[0] = f
            self.assertAlmostEqual(r.wait(attempt, floor), want, msg=f"attempt {attempt}, fraction {f}, floor {floor}")
        default = completiond.Reconnect()
        for _ in range(100):
            self.assertTrue(0 <= default.wait(3) < 0.2)


if __name__ == "__main__":
    unittest.main()
