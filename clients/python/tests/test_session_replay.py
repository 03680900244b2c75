"""Session replay: the library's tool loop, driven over each Session transcript, sends exactly its `sent`.

A fake channel plays the transcript's events to Client.run_session. The
tool callback answers from the transcript's sent results (by tool_use_id),
the stop-hook callback from its verdicts (by hook_id), and on_event raises
CancelSession where the transcript's caller cancelled. After each event the
fake reads what the loop sent, so a message sent late, early, twice or not
at all fails the test.
"""

from __future__ import annotations

import base64
import pathlib
import unittest
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import completiond
from completiond import pb

from . import support
from .test_golden import computed


class Replay:
    """The fake server side of one transcript: its events, its status, and what it received when."""

    def __init__(self, transcript: Dict[str, Any]) -> None:
        self.transcript = transcript
        self.events = support.events(transcript)
        self.expected = support.sent(transcript)
        self.start: Optional[pb.SessionRequest] = None
        self.received: List[Tuple[int, pb.SessionRequest]] = []
        self.leftover: List[pb.SessionRequest] = []
        self.requests: Any = None

    def session(self, requests: Any) -> Iterator[pb.CompletionEvent]:
        """The Session handler: reads start, then after each event the requests the caller sent after it."""
        self.requests = requests
        self.start = requests.next()
        for ev in self.events:
            yield ev
            for _ in [s for s in self.expected if s[0] == ev.seq]:
                req = requests.next()
                if req is not None:
                    self.received.append((ev.seq, req))
        st = self.transcript["status"]
        if st["code"] != 0:
            raise support.FakeRpcError(completiond.errors.status_code(st["code"]), st["message"],
                                       base64.b64decode(st["details_bin"]))

    def tool(self, call: pb.ToolCall) -> pb.ToolResultBlock:
        for _, req in self.expected:
            for result in req.tool_results.results:
                if result.tool_use_id == call.id:
                    return result
        raise AssertionError(f"the transcript sent no result for {call.id}")

    def stop_hook(self, request: pb.StopHookRequest) -> pb.StopHookVerdict:
        for _, req in self.expected:
            if req.HasField("stop_hook_verdict") and req.stop_hook_verdict.hook_id == request.hook_id:
                return req.stop_hook_verdict
        raise AssertionError(f"the transcript sent no verdict for {request.hook_id}")

    def on_event(self, ev: pb.CompletionEvent) -> None:
        for after, req in self.expected:
            if after == ev.seq and req.HasField("cancel"):
                raise completiond.CancelSession(req.cancel.reason)


class SessionReplayTest(unittest.TestCase):
    """One test per Session transcript (added below), and one that there are some."""

    maxDiff = None

    def test_there_are_session_transcripts(self) -> None:
        self.assertTrue(_session_files(), f"no Session transcripts in {support.TRANSCRIPTS}")

    def replay(self, path: pathlib.Path) -> None:
        transcript = support.load(path)
        replay = Replay(transcript)
        client = completiond.Client.from_channel(support.FakeChannel(Session=replay.session))
        start = support.session_start(transcript)
        error: Optional[completiond.CompletionError] = None
        fold: Optional[completiond.Fold] = None
        try:
            fold = client.run_session(start, replay.tool, replay.stop_hook, replay.on_event)
        except completiond.CompletionError as err:
            error = err
        leftover = replay.requests.rest()

        sent = pb.SessionRequest()
        sent.CopyFrom(replay.start)
        self.assertRegex(sent.start.request.idempotency_key, "^[0-9a-f]{32}$", "the start carries a random key")
        sent.start.request.ClearField("idempotency_key")
        self.assertEqual(sent, pb.SessionRequest(start=start), "the first message is start")
        self.assertEqual(replay.received, replay.expected, "what the loop sent, after which event")
        self.assertEqual(leftover, [], "nothing sent beyond the transcript's")
        expect = transcript["expect"]
        if expect["error"] is None:
            self.assertIsNone(error)
            assert fold is not None
        else:
            self.assertIsNotNone(error, "the session raises its error")
            assert error is not None
            self.assertEqual(error.to_dict(), expect["error"])
            self.assertEqual(error.completion_id, expect["completion_id"])
            self.assertIs(error.fold, replay_fold(error))
            fold = error.fold
        assert fold is not None
        got = fold.to_dict()
        got["error"] = expect["error"]
        self.assertEqual(got, computed(transcript))
        self.assertEqual(got, expect)


def replay_fold(error: completiond.CompletionError) -> completiond.Fold:
    """The fold a session's error carries, checked to agree with the error's result."""
    assert error.fold is not None and error.fold.result is error.result
    return error.fold


def _session_files() -> List[pathlib.Path]:
    return [p for p in support.transcript_files() if support.load(p)["rpc"] == "Session"]


def _replay(path: pathlib.Path) -> Callable[[SessionReplayTest], None]:
    def test(self: SessionReplayTest) -> None:
        self.replay(path)

    test.__doc__ = f"run_session over {path.name} sends exactly its sent messages."
    return test


for _path in _session_files():
    setattr(SessionReplayTest, "test_" + _path.stem, _replay(_path))
