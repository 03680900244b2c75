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
from completiond.stream import Stream, dropped, keyed_start, restartable, retry_delay, with_idempotency_key
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

    def test_the_restart_column(self) -> None:
        for case in cases():
            with self.subTest(case["name"]):
                self.assertEqual(restartable(end(case), fold(case)), case.get("restart", False))

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


class RestartTest(unittest.TestCase):
    """A start that drops before its started event is sent again, with its idempotency_key."""

    def run_stream(self, ends: List[Optional[grpc.RpcError]]) -> Stream:
        remaining = list(ends)

        def open_call(_: Optional[float]) -> Any:
            end_with = remaining.pop(0)

            def events() -> Any:
                if end_with is not None:
                    raise end_with
                yield pb.CompletionEvent(seq=1, started=pb.Started(completion_id="cmpl_1"))
                yield pb.CompletionEvent(seq=2, result=pb.Result())

            return events()

        s = Stream(open_call, lambda *_: None, reconnect=completiond.Reconnect(jitter=lambda: 0.0), restart=True,
                   sleep=lambda _: None)
        return s

    def test_a_transport_drop_is_restarted(self) -> None:
        s = self.run_stream([FakeRpcError(grpc.StatusCode.UNAVAILABLE, "drop"), None])
        s.wait()
        self.assertEqual((s.restarts, s.completion_id), (1, "cmpl_1"))

    def test_a_refusal_is_not(self) -> None:
        refused = end({"name": "overloaded", "code": "UNAVAILABLE", "reason": "OVERLOADED", "retry_delay_seconds": 1.0})
        s = self.run_stream([refused, None])
        with self.assertRaises(completiond.CompletionError) as caught:
            s.wait()
        self.assertEqual((caught.exception.reason, s.restarts), ("OVERLOADED", 0))

    def test_keys(self) -> None:
        request = pb.CompleteRequest(system="s")
        a, b = with_idempotency_key(request), with_idempotency_key(request)
        self.assertRegex(a.idempotency_key, "^[0-9a-f]{32}$")
        self.assertNotEqual(a.idempotency_key, b.idempotency_key)
        self.assertEqual((request.idempotency_key, a.system), ("", "s"))
        mine = pb.CompleteRequest(idempotency_key="mine")
        self.assertIs(with_idempotency_key(mine), mine)
        start = keyed_start(pb.SessionStart(request=request, max_turns=3))
        self.assertEqual((len(start.request.idempotency_key), start.max_turns, request.idempotency_key), (32, 3, ""))


if __name__ == "__main__":
    unittest.main()
