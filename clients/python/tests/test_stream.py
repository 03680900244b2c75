"""Stream: typed events, the fold, the typed error, and reconnecting with Attach — over a fake channel."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Iterator, List

import grpc

from google.protobuf import duration_pb2

import completiond
from completiond import error_details, pb

from .support import FakeChannel, FakeRpcError, completed, event, text
from .test_errors import status_bin

# The whole backoff every time (jitter 1): the counts of reconnects within a window are then fixed.
FAST = completiond.Reconnect(backoff=0.01, max_backoff=0.02, window=0.3, jitter=lambda: 1.0)


def answer(n: int = 8) -> List[pb.CompletionEvent]:
    """A whole completion: started, n words, COMPLETED and the result (n + 3 events)."""
    words = [f"w{i} " for i in range(n)]
    return ([event(1, 0, started=pb.Started(completion_id="cmpl_r", route="sim"))]
            + [text(2 + i, w) for i, w in enumerate(words)] + completed(2 + n, "".join(words)))


def drop(evs: List[pb.CompletionEvent], code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> Iterator[Any]:
    yield from evs
    raise FakeRpcError(code, "Socket closed")


def fail(evs: List[pb.CompletionEvent], err: FakeRpcError) -> Iterator[Any]:
    yield from evs
    raise err


def grace_request(seconds: float = 60) -> pb.CompleteRequest:
    return completiond.text_request("hi", resume_grace=seconds)


class StreamTest(unittest.TestCase):
    def client(self, **handlers: Any) -> completiond.Client:
        self.channel = FakeChannel(**handlers)
        return completiond.Client.from_channel(self.channel, api_key="k", reconnect=FAST)

    def test_events_and_fold(self) -> None:
        evs = answer()
        stream = self.client(Stream=lambda req: evs).stream(completiond.text_request("hi"))
        got = list(stream)
        self.assertEqual(got, evs)
        self.assertEqual(stream.fold.text, "w0 w1 w2 w3 w4 w5 w6 w7 ")
        self.assertEqual(stream.completion_id, "cmpl_r")
        self.assertIsNotNone(stream.result)
        self.assertEqual(stream.reconnects, 0)
        self.assertEqual(self.channel.calls[0].metadata, [("authorization", "Bearer k")])

    def test_failed_status_raises_with_the_result(self) -> None:
        evs = answer()[:3] + completed(4, "", reason=pb.TRANSITION_REASON_MODEL_ERROR)
        stream = self.client(Stream=lambda req: drop(evs, grpc.StatusCode.FAILED_PRECONDITION)).stream(grace_request())
        seen: List[int] = []
        with self.assertRaises(completiond.CompletionError) as ctx:
            for ev in stream:
                seen.append(ev.seq)
        self.assertEqual(seen, [1, 2, 3, 4, 5])
        err = ctx.exception
        self.assertEqual(err.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(err.result, stream.result)
        self.assertEqual(err.completion_id, "cmpl_r")
        self.assertIs(err.fold, stream.fold)
        self.assertEqual(len(self.channel.calls), 1, "a status after the result is the completion's: no reattach")

    def test_drop_without_grace_raises(self) -> None:
        stream = self.client(Stream=lambda req: drop(answer()[:4])).stream(completiond.text_request("hi"))
        with self.assertRaises(completiond.CompletionError) as ctx:
            stream.wait()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(ctx.exception.completion_id, "cmpl_r")
        self.assertEqual(stream.fold.last_seq, 4)

    def test_reconnect_sees_every_seq_once(self) -> None:
        evs = answer()

        def attach(req: pb.AttachRequest) -> Iterator[pb.CompletionEvent]:
            self.assertEqual((req.completion_id, req.after_seq), ("cmpl_r", 5))
            return iter(evs[3:])  # the server repeats two events the client has: folded once

        stream = self.client(Stream=lambda req: drop(evs[:5]), Attach=attach).stream(grace_request())
        self.assertEqual([ev.seq for ev in stream], [ev.seq for ev in evs])
        self.assertEqual(stream.reconnects, 1)
        self.assertEqual(stream.fold.text, "w0 w1 w2 w3 w4 w5 w6 w7 ")
        self.assertEqual([c.method for c in self.channel.calls], ["Stream", "Attach"])
        self.assertEqual(self.channel.calls[1].metadata, [("authorization", "Bearer k")])

    def test_reconnect_retries_attach_and_survives_a_second_drop(self) -> None:
        evs = answer()
        attaches = iter([
            lambda: drop([]),                # server still down
            lambda: drop(evs[4:7]),          # up, then dropped again
            lambda: iter(evs[7:]),
        ])
        stream = self.client(Stream=lambda req: drop(evs[:4]), Attach=lambda req: next(attaches)()).stream(grace_request())
        self.assertEqual([ev.seq for ev in stream], [ev.seq for ev in evs])
        self.assertEqual(stream.reconnects, 3)
        self.assertEqual([c.request.after_seq for c in self.channel.calls[1:]], [4, 4, 7])

    def test_reconnect_gives_up_after_the_window(self) -> None:
        stream = self.client(Stream=lambda req: drop(answer()[:3]), Attach=lambda req: drop([])).stream(grace_request())
        with self.assertRaises(completiond.CompletionError) as ctx:
            stream.wait()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertGreater(stream.reconnects, 2)
        self.assertLess(stream.reconnects, 40)

    def test_reconnect_bounded_by_resume_grace(self) -> None:
        stream = self.client(Stream=lambda req: drop(answer()[:3]), Attach=lambda req: drop([])).stream(
            grace_request(0.001))
        with self.assertRaises(completiond.CompletionError):
            stream.wait()
        self.assertEqual(stream.reconnects, 0, "the grace is shorter than the first backoff")

    def test_attach_refused_raises_its_error(self) -> None:
        def attach(req: pb.AttachRequest) -> Any:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND, "no completion cmpl_r")

        stream = self.client(Stream=lambda req: drop(answer()[:3]), Attach=attach).stream(grace_request())
        with self.assertRaises(completiond.CompletionError) as ctx:
            stream.wait()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_no_reattach_before_started(self) -> None:
        # Nothing to attach to before started: the start itself is sent
        # again, with the same idempotency_key, until the window is over.
        stream = self.client(Stream=lambda req: drop([]), Attach=lambda req: iter(answer())).stream(grace_request())
        with self.assertRaises(completiond.CompletionError):
            stream.wait()
        methods = {c.method for c in self.channel.calls}
        keys = {c.request.idempotency_key for c in self.channel.calls}
        self.assertEqual(len(methods), 1)
        self.assertNotIn("Attach", next(iter(methods)))
        self.assertEqual(len(keys), 1)
        self.assertEqual(stream.restarts, len(self.channel.calls) - 1)
        self.assertGreater(stream.restarts, 0)

    def test_reattached_stream_raises_the_status_attach_ended_with(self) -> None:
        # Attach ends with the completion's own status, so a stream that attached raises it as it came.
        evs = answer()[:3] + completed(4, "", reason=pb.TRANSITION_REASON_ABORTED_STREAMING)
        info = error_details.ErrorInfo(reason="ABORTED_STREAMING", domain=completiond.DOMAIN)
        retry = error_details.RetryInfo(retry_delay=duration_pb2.Duration(nanos=500_000_000))
        status = FakeRpcError(grpc.StatusCode.CANCELLED, "completion ended ABORTED_STREAMING",
                              status_bin(1, "completion ended ABORTED_STREAMING", info, retry))
        stream = self.client(Stream=lambda req: drop(evs[:3]), Attach=lambda req: fail(evs[3:], status)).stream(
            grace_request())
        with self.assertRaises(completiond.CompletionError) as ctx:
            stream.wait()
        err = ctx.exception
        self.assertEqual(stream.reconnects, 1)
        self.assertEqual((err.code, err.message), (grpc.StatusCode.CANCELLED, "completion ended ABORTED_STREAMING"))
        self.assertEqual(err.terminal_reason, pb.TRANSITION_REASON_ABORTED_STREAMING)
        self.assertEqual(err.retry_delay, 0.5)
        self.assertEqual(err.result, stream.result)

    def test_ok_after_the_result_raises_nothing_after_an_attach_too(self) -> None:
        # OK after the result is COMPLETED, full stop: nothing is made up from the result.
        evs = answer()[:3] + completed(4, "", reason=pb.TRANSITION_REASON_ABORTED_STREAMING)
        stream = self.client(Stream=lambda req: drop(evs[:3]), Attach=lambda req: iter(evs[3:])).stream(grace_request())
        fold = stream.wait()
        self.assertEqual(fold.reason, pb.TRANSITION_REASON_ABORTED_STREAMING)
        self.assertEqual(stream.reconnects, 1)

    def test_attach(self) -> None:
        evs = answer()
        client = self.client(Attach=lambda req: iter(evs[req.after_seq:]))
        stream = client.attach("cmpl_r", after_seq=6)
        self.assertEqual([ev.seq for ev in stream], [ev.seq for ev in evs[6:]])
        self.assertEqual(stream.fold.completion_id, "cmpl_r")
        self.assertEqual(self.channel.calls[0].request.after_seq, 6)

    def test_attach_continues_a_fold(self) -> None:
        evs = answer()
        first = self.client(Stream=lambda req: drop(evs[:5]), Attach=lambda req: iter(evs[req.after_seq:]))
        stream = first.stream(completiond.text_request("hi"))
        with self.assertRaises(completiond.CompletionError):
            stream.wait()
        fold = first.attach(stream.completion_id, fold=stream.fold).wait()
        self.assertIs(fold, stream.fold)
        self.assertEqual(fold.text, "w0 w1 w2 w3 w4 w5 w6 w7 ")

    def test_ok_without_result_is_an_error(self) -> None:
        stream = self.client(Stream=lambda req: iter(answer()[:3])).stream(completiond.text_request("hi"))
        with self.assertRaises(completiond.CompletionError) as ctx:
            stream.wait()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INTERNAL)

    def test_cancel(self) -> None:
        release = threading.Event()

        def slow(req: pb.CompleteRequest) -> Iterator[pb.CompletionEvent]:
            yield answer()[0]
            release.wait(5)
            yield from answer()[1:]

        stream = self.client(Stream=slow).stream(grace_request())
        self.assertEqual(next(stream).seq, 1)
        stream.cancel()
        release.set()
        with self.assertRaises(completiond.CompletionError) as ctx:
            next(stream)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.CANCELLED)
        self.assertEqual(len(self.channel.calls), 1, "a cancelled stream does not reattach")

    def test_context_manager_cancels_an_unfinished_stream(self) -> None:
        client = self.client(Stream=lambda req: iter(answer()))
        with client.stream(completiond.text_request("hi")) as stream:
            next(stream)
        with self.assertRaises(completiond.CompletionError):
            next(stream)

    def test_timeout_is_passed_on(self) -> None:
        self.client(Stream=lambda req: iter(answer())).stream(completiond.text_request("hi"), timeout=30).wait()
        timeout = self.channel.calls[0].timeout
        assert timeout is not None
        self.assertTrue(29 < timeout <= 30)


class CompleteTest(unittest.TestCase):
    def test_complete(self) -> None:
        response = pb.CompleteResponse(completion_id="cmpl_c", result=pb.Result(reason=pb.TRANSITION_REASON_COMPLETED))
        client = completiond.Client.from_channel(FakeChannel(Complete=lambda req: response))
        self.assertEqual(client.complete(completiond.text_request("hi")), response)

    def test_complete_error(self) -> None:
        def refuse(req: pb.CompleteRequest) -> pb.CompleteResponse:
            raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "invalid request")

        client = completiond.Client.from_channel(FakeChannel(Complete=refuse))
        with self.assertRaises(completiond.CompletionError) as ctx:
            client.complete(pb.CompleteRequest())
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


class ControlTest(unittest.TestCase):
    """cancel and list_routes: the Cancel and ListRoutes RPCs, their errors typed."""

    ID = "cmpl_0123456789abcdef01234567"

    def test_cancel(self) -> None:
        response = pb.CancelResponse(reason=pb.TRANSITION_REASON_ABORTED_STREAMING, code=1, result_seq=9)
        channel = FakeChannel(Cancel=lambda req: response)
        client = completiond.Client.from_channel(channel, api_key="k")
        self.assertEqual(client.cancel(self.ID, timeout=5), response)
        call = channel.calls[0]
        self.assertEqual((call.method, call.request.completion_id, call.timeout), ("Cancel", self.ID, 5))
        self.assertIn(("authorization", "Bearer k"), call.metadata)

    def test_cancel_not_found(self) -> None:
        info = error_details.ErrorInfo(reason="COMPLETION_NOT_FOUND", domain=completiond.DOMAIN)

        def refuse(req: pb.CancelRequest) -> pb.CancelResponse:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND, "no completion", status_bin(5, "no completion", info))

        client = completiond.Client.from_channel(FakeChannel(Cancel=refuse))
        with self.assertRaises(completiond.CompletionError) as ctx:
            client.cancel(self.ID)
        err = ctx.exception
        self.assertEqual((err.code, err.reason, err.completion_id), (grpc.StatusCode.NOT_FOUND, "COMPLETION_NOT_FOUND", self.ID))
        self.assertFalse(err.retryable)

    def test_list_routes(self) -> None:
        routes = [pb.RouteInfo(name="sim", is_default=True, capabilities=pb.RouteCapabilities(prefill=True)),
                  pb.RouteInfo(name="sim-large", circuit_open=True)]
        channel = FakeChannel(ListRoutes=lambda req: pb.ListRoutesResponse(routes=routes))
        client = completiond.Client.from_channel(channel)
        got = client.list_routes()
        self.assertEqual(got, routes)
        self.assertIsInstance(got, list)
        self.assertEqual(channel.calls[0].method, "ListRoutes")

    def test_list_routes_error(self) -> None:
        def refuse(req: pb.ListRoutesRequest) -> pb.ListRoutesResponse:
            raise FakeRpcError(grpc.StatusCode.UNAUTHENTICATED, "unknown API key")

        client = completiond.Client.from_channel(FakeChannel(ListRoutes=refuse))
        with self.assertRaises(completiond.CompletionError) as ctx:
            client.list_routes()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED)


if __name__ == "__main__":
    unittest.main()
