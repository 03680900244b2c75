"""A Session with resume_grace resumes after a drop: resume after the last seq, the unconfirmed answers sent again.

A fake server plays each Session call ("leg") in turn: it reads the first
message (start, or resume) and then the messages it expects at once (what a
resumed stream sends again), plays its events, reading what the loop sends
after the events that ask for it, and ends with its status. A message a leg
does not read is lost with the connection.
"""

from __future__ import annotations

import unittest
from typing import Any, Dict, Iterator, List, Optional

import grpc

import completiond
from completiond import error_details, pb

from .support import FakeChannel, FakeRpcError, completed, event, text
from .test_errors import status_bin

# The whole backoff every time (jitter 1): the counts of reconnects within a window are then fixed.
FAST = completiond.Reconnect(backoff=0.01, max_backoff=0.02, window=0.3, jitter=lambda: 1.0)
R = pb.TransitionReason


def drop() -> FakeRpcError:
    return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed")


class Leg:
    """One Session call of the fake server."""

    def __init__(self, events: List[pb.CompletionEvent], replies: Optional[Dict[int, int]] = None,
                 resent: int = 0, end: Optional[FakeRpcError] = None) -> None:
        #: replies: after the event of this seq, read that many messages.
        self.events, self.replies, self.resent, self.end = events, replies or {}, resent, end
        self.first: Optional[pb.SessionRequest] = None
        self.received: List[pb.SessionRequest] = []  # after the first message, in order
        self.requests: Any = None


class Server:
    """Plays its legs, one per Session call."""

    def __init__(self, *legs: Leg) -> None:
        self.legs = list(legs)
        self.played: List[Leg] = []

    def __call__(self, requests: Any) -> Iterator[pb.CompletionEvent]:
        leg = self.legs[len(self.played)]
        self.played.append(leg)
        leg.requests = requests
        leg.first = requests.next()
        for _ in range(leg.resent):
            self._read(leg)
        for ev in leg.events:
            yield ev
            for _ in range(leg.replies.get(ev.seq, 0)):
                self._read(leg)
        if leg.end is not None:
            raise leg.end

    @staticmethod
    def _read(leg: Leg) -> None:
        req = leg.requests.next()
        if req is not None:
            leg.received.append(req)


def call(seq: int, call_id: str, attempt: int = 1, turn: int = 1) -> pb.CompletionEvent:
    return event(seq, attempt, turn, tool_call=pb.ToolCall(id=call_id, name="get_weather"))


def next_turn(seq: int, attempt: int = 1, turn: int = 1) -> pb.CompletionEvent:
    return event(seq, attempt, turn, transition=pb.Transition(reason=R.Value("TRANSITION_REASON_NEXT_TURN")))


def answer_turn(seq: int, attempt: int = 2, turn: int = 2, answer: str = "Sunny.") -> List[pb.CompletionEvent]:
    """Turn `turn`'s answer: a delta, COMPLETED and the result, from seq."""
    return [text(seq, answer, attempt, turn)] + [
        pb.CompletionEvent(seq=e.seq, attempt=attempt, turn=turn, **{e.WhichOneof("event"): getattr(e, e.WhichOneof("event"))})
        for e in completed(seq + 1, answer)]


STARTED = event(1, 0, started=pb.Started(completion_id="cmpl_s"))


def result(call_id: str, text_: str = "sunny") -> pb.SessionRequest:
    return pb.SessionRequest(tool_results=pb.ToolResults(results=[pb.ToolResultBlock(tool_use_id=call_id, text=text_)]))


def resume(after_seq: int) -> pb.SessionRequest:
    return pb.SessionRequest(resume=pb.SessionResume(completion_id="cmpl_s", after_seq=after_seq))


class SessionResumeTest(unittest.TestCase):
    maxDiff = None

    def run_session(self, server: Server, grace: Optional[float] = 60, tools: Any = None, stop_hook: Any = None,
                    on_event: Any = None, stop: bool = False) -> completiond.Fold:
        self.channel = FakeChannel(Session=server)
        client = completiond.Client.from_channel(self.channel, reconnect=FAST)
        request = completiond.text_request("weather?", resume_grace=grace, tools=[pb.Tool(name="get_weather")])
        self.seen: List[int] = []
        self.ran: List[str] = []

        def seen(ev: pb.CompletionEvent) -> None:
            self.seen.append(ev.seq)
            if on_event is not None:
                on_event(ev)

        def weather(c: pb.ToolCall) -> str:
            self.ran.append(c.id)
            return "sunny"

        try:
            return client.run_session(pb.SessionStart(request=request, stop_hook=stop), tools or weather,
                                      stop_hook, seen)
        finally:
            self.leftover = [leg.requests.rest() for leg in server.played]

    def test_the_answer_lost_with_the_connection_is_sent_again(self) -> None:
        # The drop comes while the server awaits the tool result, which is lost with it.
        first = Leg([STARTED, text(2, "Let me check. "), call(3, "toolu_1")], end=drop())
        second = Leg([next_turn(4), *answer_turn(5)], resent=1)
        fold = self.run_session(Server(first, second))
        self.assertTrue(first.first is not None and first.first.HasField("start"))
        self.assertEqual(first.received, [])
        self.assertEqual(second.first, resume(3))
        self.assertEqual(second.received, [result("toolu_1")])
        self.assertEqual(self.leftover, [[result("toolu_1")], []], "lost with the first connection; nothing else sent")
        self.assertEqual(self.ran, ["toolu_1"], "the tool ran once; its result was sent again")
        self.assertEqual(self.seen, [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual(fold.text, "Let me check. Sunny.")

    def test_a_transition_confirms_the_answers_before_it(self) -> None:
        # The result arrived, and NEXT_TURN says so: after a drop in turn 2 nothing is sent again.
        first = Leg([STARTED, call(2, "toolu_1"), next_turn(3), text(4, "Sun", 2, 2)], replies={2: 1}, end=drop())
        second = Leg([*answer_turn(5, answer="ny.")])
        fold = self.run_session(Server(first, second))
        self.assertEqual(first.received, [result("toolu_1")])
        self.assertEqual(second.first, resume(4))
        self.assertEqual(second.received, [])
        self.assertEqual(self.leftover, [[], []])
        self.assertEqual(fold.text, "Sunny.")

    def test_every_answer_since_the_last_transition_is_sent_again_in_order(self) -> None:
        # Two calls answered (the server had them, but no transition told the caller), then a drop;
        # the resumed stream drops again before a transition: both are sent again, twice.
        first = Leg([STARTED, call(2, "toolu_1"), call(3, "toolu_2")], replies={2: 1, 3: 1}, end=drop())
        second = Leg([], resent=2, end=drop())
        third = Leg([next_turn(4), *answer_turn(5)], resent=2)
        self.run_session(Server(first, second, third))
        self.assertEqual(first.received, [result("toolu_1"), result("toolu_2")])
        self.assertEqual([second.first, *second.received], [resume(3), result("toolu_1"), result("toolu_2")])
        self.assertEqual([third.first, *third.received], [resume(3), result("toolu_1"), result("toolu_2")])
        self.assertEqual(self.leftover, [[], [], []])
        self.assertEqual(self.ran, ["toolu_1", "toolu_2"])

    def test_events_repeated_by_the_resumed_stream_are_not_shown_again(self) -> None:
        first = Leg([STARTED, call(2, "toolu_1"), next_turn(3), text(4, "Sun", 2, 2)], replies={2: 1}, end=drop())
        second = Leg([call(2, "toolu_1"), next_turn(3), text(4, "Sun", 2, 2), *answer_turn(5, answer="ny.")])
        fold = self.run_session(Server(first, second))
        self.assertEqual(self.seen, [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual(self.ran, ["toolu_1"])
        self.assertEqual(self.leftover, [[], []], "a repeated tool call is not answered again")
        self.assertEqual(fold.text, "Sunny.")

    def test_a_stop_hook_verdict_is_sent_again(self) -> None:
        answer = pb.Message(role=pb.ROLE_ASSISTANT, content=[pb.ContentBlock(text=pb.TextBlock(text="Hi."))])
        ask = event(3, stop_hook_request=pb.StopHookRequest(hook_id="hook_1", answer=answer))
        first = Leg([STARTED, text(2, "Hi."), ask], end=drop())
        second = Leg(completed(4, "Hi."), resent=1)
        self.run_session(Server(first, second), stop_hook=lambda req: completiond.block("Cite."), stop=True)
        verdict = pb.StopHookVerdict(hook_id="hook_1", verdict=pb.VERDICT_BLOCK, message="Cite.")
        self.assertEqual([second.first, *second.received], [resume(3), pb.SessionRequest(stop_hook_verdict=verdict)])

    def test_a_cancel_is_sent_again_and_nothing_answered_after_it(self) -> None:
        def stop(ev: pb.CompletionEvent) -> None:
            if ev.HasField("tool_call"):
                raise completiond.CancelSession("stop")

        info = error_details.ErrorInfo(reason="ABORTED_TOOLS", domain=completiond.DOMAIN)
        status = FakeRpcError(grpc.StatusCode.CANCELLED, "completion ended ABORTED_TOOLS",
                              status_bin(1, "completion ended ABORTED_TOOLS", info))
        first = Leg([STARTED, call(2, "toolu_1")], end=drop())
        second = Leg([call(2, "toolu_1"), *completed(3, "", reason=R.Value("TRANSITION_REASON_ABORTED_TOOLS"))],
                     resent=1, end=status)
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(Server(first, second), on_event=stop)
        self.assertEqual([second.first, *second.received], [resume(2), pb.SessionRequest(cancel=pb.Cancel(reason="stop"))])
        self.assertEqual(self.leftover, [[pb.SessionRequest(cancel=pb.Cancel(reason="stop"))], []])
        self.assertEqual(self.ran, [])
        self.assertEqual(ctx.exception.code, grpc.StatusCode.CANCELLED)
        self.assertEqual(ctx.exception.terminal_reason, R.Value("TRANSITION_REASON_ABORTED_TOOLS"))

    def test_an_end_without_a_result_resumes_too(self) -> None:
        first = Leg([STARTED, call(2, "toolu_1")])  # OK before the result: a proxy ended it
        second = Leg([next_turn(3), *answer_turn(4)], resent=1)
        self.run_session(Server(first, second))
        self.assertEqual([second.first, *second.received], [resume(2), result("toolu_1")])

    def test_a_hand_driven_session_resumes_and_half_closes_again(self) -> None:
        first = Leg([STARTED, call(2, "toolu_1")], end=drop())
        second = Leg([next_turn(3), *answer_turn(4)], resent=1)
        server = Server(first, second)
        client = completiond.Client.from_channel(FakeChannel(Session=server), reconnect=FAST)
        session = client.session(completiond.text_request("weather?", resume_grace=60))
        for ev in session:
            if ev.HasField("tool_call"):
                session.send_tool_results([pb.ToolResultBlock(tool_use_id=ev.tool_call.id, text="sunny")])
                session.close()
        self.assertEqual(session.reconnects, 1)
        self.assertEqual([second.first, *second.received], [resume(2), result("toolu_1")])
        self.assertEqual(second.requests.rest(), [], "the resumed stream is half-closed as the first was")
        self.assertEqual(session.fold.reason, R.Value("TRANSITION_REASON_COMPLETED"))

    def test_no_resume_without_a_grace(self) -> None:
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(Server(Leg([STARTED, call(2, "toolu_1")], end=drop())), grace=None)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(self.channel.calls), 1)

    def test_a_status_after_the_result_is_the_sessions(self) -> None:
        legs = [Leg([STARTED, *completed(2, "")], end=drop()), Leg([])]
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(Server(*legs))
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(self.channel.calls), 1)

    def test_another_code_ends_the_session(self) -> None:
        taken = FakeRpcError(grpc.StatusCode.ABORTED, "another caller took control")
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(Server(Leg([STARTED, call(2, "toolu_1")], end=taken), Leg([])))
        self.assertEqual(ctx.exception.code, grpc.StatusCode.ABORTED)
        self.assertEqual(len(self.channel.calls), 1)

    def test_no_resume_before_started(self) -> None:
        # Nothing to resume before started: the start itself is sent again,
        # with its idempotency_key, and the server attaches it.
        for grace in (60, None):
            with self.subTest(grace=grace):
                server = Server(Leg([], end=drop()), Leg([STARTED] + answer_turn(2, attempt=1, turn=1)))
                fold = self.run_session(server, grace=grace)
                self.assertEqual(len(self.channel.calls), 2)
                first, again = (leg.first for leg in server.played)
                assert first is not None and again is not None
                self.assertTrue(again.HasField("start"))
                self.assertEqual(again, first)
                self.assertRegex(first.start.request.idempotency_key, "^[0-9a-f]{32}$")
                self.assertTrue(fold.ended)

    def test_a_refused_start_is_not_sent_again(self) -> None:
        overloaded = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "overloaded", status_bin(
            14, "overloaded", error_details.ErrorInfo(reason="OVERLOADED")))
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(Server(Leg([], end=overloaded), Leg([])))
        self.assertEqual((ctx.exception.reason, len(self.channel.calls)), ("OVERLOADED", 1))

    def test_a_refused_resume_ends_with_its_status(self) -> None:
        gone = FakeRpcError(grpc.StatusCode.NOT_FOUND, "no completion cmpl_s")
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(Server(Leg([STARTED, call(2, "toolu_1")], end=drop()), Leg([], resent=1, end=gone)))
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(ctx.exception.completion_id, "cmpl_s")

    def test_gives_up_after_the_window_with_the_drops_error(self) -> None:
        legs = [Leg([STARTED, call(2, "toolu_1")], end=drop())] + [Leg([], resent=1, end=drop()) for _ in range(100)]
        server = Server(*legs)
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.run_session(server)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertGreater(len(server.played), 3)
        self.assertLess(len(server.played), 40)
        self.assertEqual({leg.first.resume.after_seq for leg in server.played[1:] if leg.first is not None}, {2})


if __name__ == "__main__":
    unittest.main()
