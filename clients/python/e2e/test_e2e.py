"""End to end: the library against a real completiond (run under scripts/with-server, COMPLETIOND_ADDR).

These tests fail, never skip, without a server: make python-e2e runs them.
"""

from __future__ import annotations

import os
import unittest
from typing import Any, Callable, Dict, List, Optional

import grpc

import completiond
from completiond import pb

from .proxy import CutProxy

R = pb.TransitionReason


def address() -> str:
    addr = os.environ.get("COMPLETIOND_ADDR")
    if not addr:
        raise AssertionError("COMPLETIOND_ADDR is not set: run these tests under scripts/with-server (make python-e2e)")
    return addr


def ask(faults: str = "", metadata: Optional[Dict[str, str]] = None, **fields: Any) -> pb.CompleteRequest:
    """A request to the sim: short and quick, with faults as its fault script."""
    script = {"sim.words": "12", "sim.pace": "2ms"}
    if faults:
        script["sim.faults"] = faults
    script.update(metadata or {})
    return completiond.text_request("Tell me about recovery.", metadata=script, **fields)


def names(fold: completiond.Fold) -> List[str]:
    return [R.Name(r)[len("TRANSITION_REASON_"):] for r in fold.transition_reasons]


def result_text(result: pb.Result) -> str:
    return "".join(block.text.text for block in result.message.content)


class E2ETest(unittest.TestCase):
    maxDiff = None

    def setUp(self) -> None:
        self.client = completiond.Client(address())
        self.addCleanup(self.client.close)

    def check_answer(self, fold: completiond.Fold) -> None:
        """The stream contract: one terminal transition, the result, and kept text = the answer."""
        assert fold.result is not None
        self.assertTrue(fold.transitions[-1].terminal)
        self.assertEqual(sum(t.terminal for t in fold.transitions), 1)
        self.assertEqual(fold.text, result_text(fold.result))
        self.assertTrue(fold.text)

    def test_retry_then_completed(self) -> None:
        stream = self.client.stream(ask("server_error"), timeout=30)
        events = list(stream)
        self.assertEqual([ev.seq for ev in events], list(range(1, len(events) + 1)))
        self.assertEqual(names(stream.fold), ["RETRY", "COMPLETED"])
        self.assertEqual(stream.fold.reason, R.Value("TRANSITION_REASON_COMPLETED"))
        self.check_answer(stream.fold)

    def test_clean_restart_discards_the_attempt(self) -> None:
        fold = self.client.stream(ask("cut=4", route="sim-noprefill"), timeout=30).wait()
        self.assertEqual(names(fold), ["RETRY", "COMPLETED"])
        self.assertEqual(fold.discarded_attempts, [1])
        self.assertTrue(fold.transitions[0].discard_output)
        self.check_answer(fold)

    def test_outage_decodes_retry_info(self) -> None:
        self.addCleanup(self.restore_sim_large)
        stream = self.client.stream(ask("overload*20", route="sim-large", policy=pb.Policy(max_retries=2)), timeout=60)
        with self.assertRaises(completiond.CompletionError) as ctx:
            stream.wait()
        err = ctx.exception
        self.assertEqual(err.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(err.reason, "MODEL_ERROR")
        self.assertEqual(err.terminal_reason, R.Value("TRANSITION_REASON_MODEL_ERROR"))
        self.assertEqual(err.domain, completiond.DOMAIN)
        self.assertTrue(err.retryable)
        assert err.retry_delay is not None
        self.assertGreaterEqual(err.retry_delay, 0)
        self.assertIn(err.metadata["error_kind"], ("overloaded", "circuit_open"))  # a circuit another test opened
        assert err.result is not None
        self.assertEqual(err.result.reason, R.Value("TRANSITION_REASON_MODEL_ERROR"))
        self.assertEqual(err.completion_id, stream.completion_id)
        self.assertTrue(err.completion_id.startswith("cmpl_"))

    def restore_sim_large(self) -> None:
        """Leaves sim-large as the test found it: one clean answer resets the
        failures the outage counted against its circuit breaker (five in a row
        open it), which the examples' own outage would otherwise complete."""
        self.client.stream(ask(route="sim-large"), timeout=60).wait()

    def test_invalid_argument_field_violations(self) -> None:
        for call in (lambda r: self.client.stream(r, timeout=10).wait(), lambda r: self.client.complete(r, timeout=10)):
            with self.assertRaises(completiond.CompletionError) as ctx:
                call(pb.CompleteRequest(max_output_tokens=-1))
            err = ctx.exception
            self.assertEqual(err.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual([v.field for v in err.field_violations], ["messages", "max_output_tokens"])
            self.assertFalse(err.retryable)
            self.assertEqual(err.terminal_reason, R.Value("TRANSITION_REASON_UNSPECIFIED"))

    def test_complete(self) -> None:
        response = self.client.complete(ask("rate_limit"), timeout=30)
        self.assertTrue(response.completion_id.startswith("cmpl_"))
        self.assertEqual([R.Name(t.reason) for t in response.transitions],
                         ["TRANSITION_REASON_RETRY", "TRANSITION_REASON_COMPLETED"])
        self.assertTrue(result_text(response.result))

    def test_session_tool_loop(self) -> None:
        calls: List[pb.ToolCall] = []

        def weather(call: pb.ToolCall) -> str:
            calls.append(call)
            return '{"forecast": "sunny"}'

        start = pb.SessionStart(request=ask("tool_use=get_weather,tool_use=get_weather",
                                            tools=[pb.Tool(name="get_weather")]), max_turns=5)
        fold = self.client.run_session(start, weather, timeout=30)
        self.assertEqual(names(fold), ["NEXT_TURN", "NEXT_TURN", "COMPLETED"])
        self.assertEqual([c.name for c in calls], ["get_weather", "get_weather"])
        self.assertEqual([[c.id for c in t.tool_calls] for t in fold.turns], [[calls[0].id], [calls[1].id], []])
        self.assertEqual(fold.tool_calls, [])
        self.check_answer(fold)
        assert fold.result is not None
        results = [b.tool_result for m in fold.result.transcript for b in m.content if b.HasField("tool_result")]
        self.assertEqual([(r.tool_use_id, r.text) for r in results], [(c.id, '{"forecast": "sunny"}') for c in calls])

    def test_session_stop_hook_blocks_then_allows(self) -> None:
        verdicts = iter([completiond.block("Cite a source."), None])
        start = pb.SessionStart(request=ask(), stop_hook=True)
        fold = self.client.run_session(start, None, lambda req: next(verdicts), timeout=30)
        self.assertEqual(names(fold), ["STOP_HOOK_BLOCKING", "COMPLETED"])

    def test_session_cancel(self) -> None:
        def stop(call: pb.ToolCall) -> str:
            raise completiond.CancelSession("the user pressed stop")

        start = pb.SessionStart(request=ask("tool_use=search", tools=[pb.Tool(name="search")]))
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.client.run_session(start, stop, timeout=30)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.CANCELLED)
        self.assertEqual(ctx.exception.terminal_reason, R.Value("TRANSITION_REASON_ABORTED_TOOLS"))

    def test_attach_replays_a_completion(self) -> None:
        first = self.client.stream(ask(), timeout=30)
        fold = first.wait()
        again = self.client.attach(first.completion_id, 0, timeout=30).wait()
        self.assertEqual(again.to_dict(), fold.to_dict())
        with self.assertRaises(completiond.CompletionError) as ctx:
            self.client.attach("cmpl_nonexistent", timeout=10).wait()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_reconnect_through_a_dropped_connection(self) -> None:
        host, port = address().rsplit(":", 1)
        with CutProxy((host, int(port))) as proxy:
            client = completiond.Client(proxy.address)
            self.addCleanup(client.close)
            request = completiond.text_request("Tell me about recovery.", resume_grace=60,
                                               metadata={"sim.words": "80", "sim.pace": "15ms"})
            stream = client.stream(request, timeout=60)
            seqs = []
            for ev in stream:
                seqs.append(ev.seq)
                if ev.seq == 10:  # mid-stream, by event rather than by bytes: no race with the end
                    proxy.drop()
            self.assertEqual(proxy.cut, 1, "the proxy cut the first connection")
            self.assertGreaterEqual(stream.reconnects, 1)
            self.assertEqual(seqs, list(range(1, len(seqs) + 1)), "every seq exactly once, in order")
            self.assertEqual(names(stream.fold), ["COMPLETED"])
            self.check_answer(stream.fold)
            assert stream.fold.result is not None
            self.assertEqual(stream.fold.result.usage.output_tokens, 80, "the whole answer, nothing cut")

    def test_reconnected_stream_raises_the_completions_error(self) -> None:
        # Attach ends with the completion's own status: the stream that attached raises it as it came.
        host, port = address().rsplit(":", 1)
        with CutProxy((host, int(port))) as proxy:
            client = completiond.Client(proxy.address)
            self.addCleanup(client.close)
            request = completiond.text_request(
                "Tell me about recovery.", route="sim-noprefill", resume_grace=60,
                policy=pb.Policy(max_retries=0, disable_fallback=True),
                metadata={"sim.faults": "cut=60", "sim.words": "80", "sim.pace": "15ms"})
            stream = client.stream(request, timeout=60)
            with self.assertRaises(completiond.CompletionError) as ctx:
                for ev in stream:
                    if ev.seq == 10:  # well before the upstream's cut at word 60
                        proxy.drop()
            self.assertEqual(proxy.cut, 1)
            self.assertGreaterEqual(stream.reconnects, 1)
            err = ctx.exception
            self.assertEqual(err.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(err.reason, "MODEL_ERROR")
            self.assertEqual(err.terminal_reason, R.Value("TRANSITION_REASON_MODEL_ERROR"))
            self.assertEqual(err.domain, completiond.DOMAIN)
            self.assertEqual(err.metadata["error_kind"], "stream_broken")
            self.assertEqual(err.metadata["provider"], "sim")
            self.assertTrue(err.metadata["request_id"].startswith("req_sim_"), "the upstream's request id, as sent")
            self.assertIn("completion ended MODEL_ERROR: stream_broken (HTTP 200)", err.message)
            self.assertTrue(err.retryable, "the server's RetryInfo comes through the Attach")
            assert err.retry_delay is not None and err.status is not None
            self.assertGreater(err.retry_delay, 0)
            assert err.result is not None
            self.assertEqual(err.result.reason, R.Value("TRANSITION_REASON_MODEL_ERROR"))

    def resume_session(self, cut: Callable[[pb.CompletionEvent], bool]) -> None:
        """A Session with resume_grace through a proxy that drops it once, on the first event cut matches
        (in the event callback, before the loop answers that event)."""
        host, port = address().rsplit(":", 1)

        def request(grace: Optional[float]) -> pb.SessionStart:
            return pb.SessionStart(request=completiond.text_request(
                "Tell me about recovery.", resume_grace=grace, tools=[pb.Tool(name="search")],
                metadata={"sim.faults": "tool_use=search", "sim.pace": "20ms", "sim.words": "40"}))

        calls: Dict[str, int] = {}

        def search(call: pb.ToolCall) -> str:
            calls[call.id] = calls.get(call.id, 0) + 1
            return "42"

        with CutProxy((host, int(port))) as proxy:
            client = completiond.Client(proxy.address)
            self.addCleanup(client.close)
            seqs: List[int] = []
            cuts = 0

            def on_event(ev: pb.CompletionEvent) -> None:
                nonlocal cuts
                seqs.append(ev.seq)
                if cuts == 0 and cut(ev):
                    cuts = proxy.drop()

            fold = client.run_session(request(60), search, on_event=on_event, timeout=60)
            self.assertEqual(cuts, 1, "the proxy cut the session's connection")
            self.assertGreaterEqual(proxy.connections, 2, "the session connected again")
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)), "every seq once, in order")
        self.assertEqual(len(calls), 1)
        self.assertEqual(set(calls.values()), {1}, "each tool call run once")
        plain = self.client.run_session(request(None), lambda call: "42", timeout=60)
        assert fold.result is not None and plain.result is not None
        self.assertEqual(fold.text, plain.text)
        self.assertEqual(len(fold.result.attempts), len(plain.result.attempts))
        self.assertEqual(names(fold), ["NEXT_TURN", "COMPLETED"])
        self.check_answer(fold)
        results = [b.tool_result for m in fold.result.transcript for b in m.content if b.HasField("tool_result")]
        self.assertEqual([(r.tool_use_id, r.text) for r in results], [(i, "42") for i in calls])

    def test_session_resumes_after_a_drop_awaiting_a_tool_result(self) -> None:
        # Cut on the tool_call event, before its result is sent: the result is lost and sent again.
        self.resume_session(lambda ev: ev.HasField("tool_call"))

    def test_session_resumes_after_a_drop_while_turn_2_streams(self) -> None:
        self.resume_session(lambda ev: ev.turn == 2 and ev.HasField("delta"))

    def test_drop_without_grace_is_an_error(self) -> None:
        host, port = address().rsplit(":", 1)
        with CutProxy((host, int(port))) as proxy:
            client = completiond.Client(proxy.address)
            self.addCleanup(client.close)
            stream = client.stream(ask(metadata={"sim.words": "80", "sim.pace": "15ms"}), timeout=60)
            with self.assertRaises(completiond.CompletionError) as ctx:
                for ev in stream:
                    if ev.seq == 10:
                        proxy.drop()
            self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(stream.reconnects, 0)
            self.assertIsNone(ctx.exception.result)


if __name__ == "__main__":
    unittest.main()
