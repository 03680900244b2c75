"""run_session: tool results, stop-hook verdicts, cancels and failures — over a fake channel."""

from __future__ import annotations

import unittest
from typing import Any, Iterator, List, Optional

import grpc

import completiond
from completiond import pb

from .support import FakeChannel, FakeRpcError, completed, event, text


class Script:
    """A fake Session server: plays events, and after each one reads what the loop sent (if expected)."""

    def __init__(self, events: List[pb.CompletionEvent], replies_after: List[int],
                 error: Optional[FakeRpcError] = None) -> None:
        self.events, self.replies_after, self.error = events, replies_after, error
        self.received: List[pb.SessionRequest] = []
        self.start: Optional[pb.SessionRequest] = None
        self.requests: Any = None

    def __call__(self, requests: Any) -> Iterator[pb.CompletionEvent]:
        self.requests = requests
        self.start = requests.next()
        for ev in self.events:
            yield ev
            if ev.seq in self.replies_after:
                req = requests.next()
                if req is not None:
                    self.received.append(req)
        if self.error is not None:
            raise self.error


def tool_loop() -> List[pb.CompletionEvent]:
    call = pb.ToolCall(id="toolu_1", name="get_weather")
    call.input.update({"city": "Oslo"})
    return [
        event(1, 0, started=pb.Started(completion_id="cmpl_s")),
        text(2, "Let me check. "),
        event(3, 1, tool_call=call),
        event(4, 1, transition=pb.Transition(reason=pb.TRANSITION_REASON_NEXT_TURN)),
        text(5, "Sunny.", attempt=2, turn=2),
        *[pb.CompletionEvent(seq=e.seq, attempt=2, turn=2, **{e.WhichOneof("event"): getattr(e, e.WhichOneof("event"))})
          for e in completed(6, "Let me check. Sunny.")],
    ]


def hooked() -> List[pb.CompletionEvent]:
    answer = pb.Message(role=pb.ROLE_ASSISTANT, content=[pb.ContentBlock(text=pb.TextBlock(text="Hi."))])
    return [event(1, 0, started=pb.Started(completion_id="cmpl_h")), text(2, "Hi."),
            event(3, stop_hook_request=pb.StopHookRequest(hook_id="hook_1", answer=answer)),
            *completed(4, "Hi.")]


class SessionTest(unittest.TestCase):
    def run_script(self, script: Script, tools: Any = None, stop_hook: Any = None, on_event: Any = None,
                   stop: bool = False) -> completiond.Fold:
        client = completiond.Client.from_channel(FakeChannel(Session=script))
        start = pb.SessionStart(request=completiond.text_request("weather?"), stop_hook=stop)
        try:
            return client.run_session(start, tools, stop_hook, on_event)
        finally:
            self.leftover = script.requests.rest() if script.requests is not None else []

    def result_of(self, script: Script) -> pb.ToolResultBlock:
        self.assertEqual(len(script.received), 1)
        self.assertEqual(self.leftover, [])
        return script.received[0].tool_results.results[0]

    def test_tool_mapping_gets_the_input(self) -> None:
        script = Script(tool_loop(), [3])
        seen: List[pb.CompletionEvent] = []
        fold = self.run_script(script, {"get_weather": lambda args: f"sunny in {args['city']}"}, on_event=seen.append)
        self.assertEqual(self.result_of(script), pb.ToolResultBlock(tool_use_id="toolu_1", text="sunny in Oslo"))
        self.assertEqual(fold.text, "Let me check. Sunny.")
        self.assertEqual([e.seq for e in seen], [1, 2, 3, 4, 5, 6, 7])
        assert script.start is not None
        self.assertTrue(script.start.HasField("start"))

    def test_tool_callback_result_block(self) -> None:
        script = Script(tool_loop(), [3])
        self.run_script(script, lambda call: pb.ToolResultBlock(text="{}", halt=True))
        self.assertEqual(self.result_of(script), pb.ToolResultBlock(tool_use_id="toolu_1", text="{}", halt=True))

    def test_tool_exception_is_an_error_result(self) -> None:
        def broken(call: pb.ToolCall) -> str:
            raise ValueError("the weather service is down")

        script = Script(tool_loop(), [3])
        self.run_script(script, broken)
        self.assertEqual(self.result_of(script), pb.ToolResultBlock(
            tool_use_id="toolu_1", text="the weather service is down", is_error=True))

    def test_unknown_tool_and_no_tools(self) -> None:
        script = Script(tool_loop(), [3])
        self.run_script(script, {"search": lambda args: "x"})
        self.assertEqual(self.result_of(script).text, "unknown tool get_weather")
        self.assertTrue(self.result_of(script).is_error)
        script = Script(tool_loop(), [3])
        self.run_script(script, None)
        self.assertTrue(self.result_of(script).is_error)

    def test_tool_returning_something_else_is_a_programming_error(self) -> None:
        script = Script(tool_loop(), [])
        with self.assertRaises(TypeError):
            self.run_script(script, lambda call: 42)

    def test_no_stop_hook_allows(self) -> None:
        script = Script(hooked(), [3])
        self.run_script(script, stop=True)
        self.assertEqual(script.received, [pb.SessionRequest(stop_hook_verdict=pb.StopHookVerdict(
            hook_id="hook_1", verdict=pb.VERDICT_ALLOW))])

    def test_stop_hook_verdicts(self) -> None:
        for out, want in [
            (completiond.block("Cite a source."), pb.StopHookVerdict(verdict=pb.VERDICT_BLOCK, message="Cite a source.")),
            (completiond.prevent("no"), pb.StopHookVerdict(verdict=pb.VERDICT_PREVENT, message="no")),
            (completiond.allow(), pb.StopHookVerdict(verdict=pb.VERDICT_ALLOW)),
            (pb.VERDICT_BLOCK, pb.StopHookVerdict(verdict=pb.VERDICT_BLOCK)),
            (None, pb.StopHookVerdict(verdict=pb.VERDICT_ALLOW)),
        ]:
            with self.subTest(out=out):
                script = Script(hooked(), [3])
                self.run_script(script, stop_hook=lambda req, out=out: out, stop=True)
                want.hook_id = "hook_1"
                self.assertEqual(script.received, [pb.SessionRequest(stop_hook_verdict=want)])

    def test_failing_stop_hook_cancels(self) -> None:
        def hook(req: pb.StopHookRequest) -> None:
            raise RuntimeError("judge unavailable")

        evs = hooked()[:3] + completed(4, "", reason=pb.TRANSITION_REASON_ABORTED_TOOLS)
        script = Script(evs, [3], FakeRpcError(grpc.StatusCode.CANCELLED, "completion ended ABORTED_TOOLS"))
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_script(script, stop_hook=hook, stop=True)
        self.assertEqual(script.received, [pb.SessionRequest(cancel=pb.Cancel(reason="stop hook failed: judge unavailable"))])
        self.assertIsInstance(ctx.exception.__cause__, RuntimeError)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.CANCELLED)
        assert ctx.exception.fold is not None
        self.assertEqual(ctx.exception.fold.reason, pb.TRANSITION_REASON_ABORTED_TOOLS)

    def test_cancel_session_from_a_callback(self) -> None:
        def stop(call: pb.ToolCall) -> str:
            raise completiond.CancelSession("the user pressed stop")

        evs = tool_loop()[:3] + completed(4, "", reason=pb.TRANSITION_REASON_ABORTED_TOOLS)
        script = Script(evs, [3], FakeRpcError(grpc.StatusCode.CANCELLED, "completion ended ABORTED_TOOLS"))
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_script(script, stop)
        self.assertEqual(script.received, [pb.SessionRequest(cancel=pb.Cancel(reason="the user pressed stop"))])
        self.assertEqual(ctx.exception.completion_id, "cmpl_s")

    def test_on_event_exception_cancels_the_rpc(self) -> None:
        def boom(ev: pb.CompletionEvent) -> None:
            if ev.seq == 2:
                raise KeyError("mine")

        script = Script(tool_loop(), [])
        with self.assertRaises(KeyError):
            self.run_script(script, {}, on_event=boom)

    def test_session_object(self) -> None:
        script = Script(tool_loop(), [3])
        client = completiond.Client.from_channel(FakeChannel(Session=script))
        with client.session(completiond.text_request("weather?")) as session:
            for ev in session:
                if ev.HasField("tool_call"):
                    session.send_tool_results([pb.ToolResultBlock(tool_use_id=ev.tool_call.id, text="21")])
        self.assertEqual(session.fold.reason, pb.TRANSITION_REASON_COMPLETED)
        self.assertEqual(script.received[0].tool_results.results[0].text, "21")
        with self.assertRaises(RuntimeError):
            session.send_cancel()


if __name__ == "__main__":
    unittest.main()
