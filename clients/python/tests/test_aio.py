"""AsyncClient against a grpc.aio server on loopback: events and fold, typed errors, reconnecting with
Attach, Complete, the Session tool loop and cancelling."""

from __future__ import annotations

import asyncio
import unittest
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import grpc
import grpc.aio
from google.protobuf import duration_pb2

import completiond
from completiond import error_details, pb, pb_grpc

from .support import completed, event, text
from .test_errors import status_bin

# The whole backoff every time (jitter 1): the counts of reconnects within a window are then fixed.
FAST = completiond.Reconnect(backoff=0.01, max_backoff=0.02, window=0.5, jitter=lambda: 1.0)

#: An end of a call: (code, message, details_bin).
End = Tuple[grpc.StatusCode, str, bytes]


def answer(n: int = 6) -> List[pb.CompletionEvent]:
    """A whole completion: started, n words, COMPLETED and the result (n + 3 events)."""
    words = [f"w{i} " for i in range(n)]
    return ([event(1, 0, started=pb.Started(completion_id="cmpl_a", route="sim"))]
            + [text(2 + i, w) for i, w in enumerate(words)] + completed(2 + n, "".join(words)))


class Servicer(pb_grpc.CompletionServicer):
    """Plays scripts: a Stream's events and end, each Attach's, and a Session's turns."""

    def __init__(self) -> None:
        self.stream: List[pb.CompletionEvent] = []
        self.stream_end: Optional[End] = None
        self.attaches: List[Tuple[List[pb.CompletionEvent], Optional[End]]] = []
        self.attach_requests: List[pb.AttachRequest] = []
        self.metadata: List[Dict[str, Any]] = []
        self.session_sent: List[pb.SessionRequest] = []
        self.hold = asyncio.Event()  # a Stream with no script waits on it

    async def _end(self, context: grpc.aio.ServicerContext, end: Optional[End]) -> None:
        if end is not None:
            code, message, details_bin = end
            trailers = (("grpc-status-details-bin", details_bin),) if details_bin else ()
            await context.abort(code, message, trailing_metadata=trailers)

    async def Stream(self, request: pb.CompleteRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.metadata.append(dict(context.invocation_metadata()))
        for ev in self.stream:
            yield ev
        if not self.stream and self.stream_end is None:
            await self.hold.wait()
        await self._end(context, self.stream_end)

    async def Attach(self, request: pb.AttachRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.attach_requests.append(request)
        events, end = self.attaches.pop(0)
        for ev in events:
            yield ev
        await self._end(context, end)

    async def Complete(self, request: pb.CompleteRequest, context: grpc.aio.ServicerContext) -> pb.CompleteResponse:
        if request.route == "bad":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid request: messages",
                                trailing_metadata=(("grpc-status-details-bin", status_bin(
                                    3, "invalid request: messages", error_details.BadRequest(field_violations=[
                                        error_details.BadRequest.FieldViolation(field="messages", description="empty")]))),))
        return pb.CompleteResponse(completion_id="cmpl_c")

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        self.metadata.append(dict(context.invocation_metadata()))
        if request.completion_id == "cmpl_gone":
            info = error_details.ErrorInfo(reason="COMPLETION_NOT_FOUND", domain=completiond.DOMAIN)
            await context.abort(grpc.StatusCode.NOT_FOUND, "no completion",
                                trailing_metadata=(("grpc-status-details-bin", status_bin(5, "no completion", info)),))
        return pb.CancelResponse(reason=pb.TRANSITION_REASON_ABORTED_TOOLS, code=1, result_seq=4)

    async def ListRoutes(self, request: pb.ListRoutesRequest,
                         context: grpc.aio.ServicerContext) -> pb.ListRoutesResponse:
        return pb.ListRoutesResponse(routes=[pb.RouteInfo(name="sim", is_default=True), pb.RouteInfo(name="sim-large")])

    async def Session(self, requests: AsyncIterator[pb.SessionRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        it = requests.__aiter__()
        first = await it.__anext__()
        self.session_sent.append(first)
        yield event(1, 0, started=pb.Started(completion_id="cmpl_s", route="sim"))
        yield event(2, 1, tool_call=pb.ToolCall(id="toolu_1", name="get_weather"))
        answer_ = await it.__anext__()
        self.session_sent.append(answer_)
        if answer_.HasField("cancel"):
            end = completed(3, "", reason=pb.TRANSITION_REASON_ABORTED_TOOLS)
            for ev in end:
                yield ev
            await context.abort(grpc.StatusCode.CANCELLED, "completion ended ABORTED_TOOLS")
        yield event(3, 1, transition=pb.Transition(reason=pb.TRANSITION_REASON_NEXT_TURN))
        if first.start.stop_hook:
            yield event(4, 2, stop_hook_request=pb.StopHookRequest(hook_id="hook_1"))
            self.session_sent.append(await it.__anext__())
        for ev in completed(5, "sunny", attempt=2):
            yield ev


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.servicer = Servicer()
        self.server = grpc.aio.server()
        pb_grpc.add_CompletionServicer_to_server(self.servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.client = completiond.AsyncClient(f"127.0.0.1:{port}", api_key="k", reconnect=FAST)

    async def asyncTearDown(self) -> None:
        self.servicer.hold.set()
        await self.client.close()
        await self.server.stop(None)

    async def test_cancel_rpc(self) -> None:
        response = await self.client.cancel("cmpl_s")
        self.assertEqual(response, pb.CancelResponse(reason=pb.TRANSITION_REASON_ABORTED_TOOLS, code=1, result_seq=4))
        self.assertEqual(self.servicer.metadata[0]["authorization"], "Bearer k")
        with self.assertRaises(completiond.CompletionError) as ctx:
            await self.client.cancel("cmpl_gone")
        err = ctx.exception
        self.assertEqual((err.code, err.reason, err.completion_id),
                         (grpc.StatusCode.NOT_FOUND, "COMPLETION_NOT_FOUND", "cmpl_gone"))

    async def test_list_routes(self) -> None:
        routes = await self.client.list_routes()
        self.assertEqual([r.name for r in routes], ["sim", "sim-large"])
        self.assertTrue(routes[0].is_default)

    async def test_events_and_fold(self) -> None:
        evs = answer()
        self.servicer.stream = evs
        stream = self.client.stream(completiond.text_request("hi"))
        got = [ev async for ev in stream]
        self.assertEqual(got, evs)
        self.assertEqual(stream.fold.text, "w0 w1 w2 w3 w4 w5 ")
        self.assertEqual(stream.completion_id, "cmpl_a")
        self.assertEqual(self.servicer.metadata[0]["authorization"], "Bearer k")

    async def test_failed_status_is_typed(self) -> None:
        self.servicer.stream = answer()[:3] + completed(4, "", reason=pb.TRANSITION_REASON_MODEL_ERROR)
        info = error_details.ErrorInfo(reason="MODEL_ERROR", domain=completiond.DOMAIN, metadata={"error_kind": "overloaded"})
        retry = error_details.RetryInfo(retry_delay=duration_pb2.Duration(seconds=3))
        self.servicer.stream_end = (grpc.StatusCode.UNAVAILABLE, "completion ended MODEL_ERROR",
                                    status_bin(14, "completion ended MODEL_ERROR", info, retry))
        stream = self.client.stream(completiond.text_request("hi", resume_grace=60))
        with self.assertRaises(completiond.CompletionError) as ctx:
            await stream.wait()
        err = ctx.exception
        self.assertEqual((err.code, err.reason, err.retry_delay), (grpc.StatusCode.UNAVAILABLE, "MODEL_ERROR", 3.0))
        self.assertEqual(err.terminal_reason, pb.TRANSITION_REASON_MODEL_ERROR)
        self.assertEqual(err.metadata, {"error_kind": "overloaded"})
        self.assertEqual(err.result, stream.result)
        self.assertEqual(self.servicer.attach_requests, [], "a status after the result is the completion's")

    async def test_reconnect_sees_every_seq_once(self) -> None:
        evs = answer()
        self.servicer.stream = evs[:4]
        self.servicer.stream_end = (grpc.StatusCode.UNAVAILABLE, "Socket closed", b"")
        self.servicer.attaches = [([], (grpc.StatusCode.UNAVAILABLE, "still down", b"")), (evs[2:], None)]
        stream = self.client.stream(completiond.text_request("hi", resume_grace=60))
        self.assertEqual([ev.seq async for ev in stream], [ev.seq for ev in evs])
        self.assertEqual(stream.reconnects, 2)
        self.assertEqual([(r.completion_id, r.after_seq) for r in self.servicer.attach_requests],
                         [("cmpl_a", 4), ("cmpl_a", 4)])
        self.assertEqual(stream.fold.text, "w0 w1 w2 w3 w4 w5 ")

    async def test_drop_without_grace_raises(self) -> None:
        self.servicer.stream = answer()[:3]
        self.servicer.stream_end = (grpc.StatusCode.UNAVAILABLE, "Socket closed", b"")
        with self.assertRaises(completiond.CompletionError) as ctx:
            await self.client.stream(completiond.text_request("hi")).wait()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.servicer.attach_requests, [])

    async def test_attach(self) -> None:
        evs = answer()
        self.servicer.attaches = [(evs[3:], None)]
        fold = await self.client.attach("cmpl_a", after_seq=3).wait()
        self.assertEqual(fold.last_seq, evs[-1].seq)
        self.assertEqual(self.servicer.attach_requests[0].after_seq, 3)

    async def test_complete(self) -> None:
        response = await self.client.complete(completiond.text_request("hi"))
        self.assertEqual(response.completion_id, "cmpl_c")
        with self.assertRaises(completiond.CompletionError) as ctx:
            await self.client.complete(completiond.text_request("hi", route="bad"))
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual([(v.field, v.description) for v in ctx.exception.field_violations], [("messages", "empty")])

    async def test_cancel(self) -> None:
        stream = self.client.stream(completiond.text_request("hi"))  # the server holds it open, silent
        task = asyncio.ensure_future(stream.wait())
        while not self.servicer.metadata:  # the server has the call
            await asyncio.sleep(0)
        stream.cancel()
        with self.assertRaises(completiond.CompletionError) as ctx:
            await task
        self.assertEqual(ctx.exception.code, grpc.StatusCode.CANCELLED)

    async def test_run_session_with_async_callbacks(self) -> None:
        seen: List[str] = []

        async def get_weather(args: dict) -> str:
            await asyncio.sleep(0)
            return '{"forecast": "sunny"}'

        async def hook(req: pb.StopHookRequest) -> pb.StopHookVerdict:
            return completiond.allow()

        start = pb.SessionStart(request=completiond.text_request("Weather?", tools=[pb.Tool(name="get_weather")]),
                                stop_hook=True)
        fold = await self.client.run_session(start, {"get_weather": get_weather}, hook,
                                             on_event=lambda ev: seen.append(ev.WhichOneof("event")))
        assert fold.result is not None
        self.assertEqual(fold.result.message.content[0].text.text, "sunny")
        self.assertEqual(fold.reason, pb.TRANSITION_REASON_COMPLETED)
        sent = self.servicer.session_sent
        self.assertEqual(sent[1].tool_results.results[0],
                         pb.ToolResultBlock(tool_use_id="toolu_1", text='{"forecast": "sunny"}'))
        self.assertEqual(sent[2].stop_hook_verdict, pb.StopHookVerdict(hook_id="hook_1", verdict=pb.VERDICT_ALLOW))
        self.assertEqual(seen[:2], ["started", "tool_call"])

    async def test_run_session_cancel(self) -> None:
        def refuse(call: pb.ToolCall) -> str:
            raise completiond.CancelSession("no tools today")

        with self.assertRaises(completiond.CompletionError) as ctx:
            await self.client.run_session(completiond.text_request("Weather?"), refuse)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.CANCELLED)
        self.assertEqual(self.servicer.session_sent[1].cancel.reason, "no tools today")


if __name__ == "__main__":
    unittest.main()
