"""Fold: the stream contract's arithmetic, on hand-made events."""

from __future__ import annotations

import unittest

from google.protobuf import struct_pb2

import completiond
from completiond import pb

from .support import completed, event, text


def fold_of(*events: pb.CompletionEvent) -> completiond.Fold:
    fold = completiond.Fold()
    for ev in events:
        fold.add(ev)
    return fold


def started(seq: int = 1) -> pb.CompletionEvent:
    return event(seq, 0, started=pb.Started(completion_id="cmpl_1", route="sim", model="sim-1"))


def discard(seq: int, attempt: int, *attempts: int, output: bool = True) -> pb.CompletionEvent:
    return event(seq, attempt, transition=pb.Transition(
        reason=pb.TRANSITION_REASON_RETRY, discard_output=output, discarded_attempts=list(attempts)))


class FoldTest(unittest.TestCase):
    def test_empty(self) -> None:
        fold = completiond.Fold()
        self.assertEqual(fold.to_dict(), {
            "completion_id": "", "last_seq": 0, "reason": "", "transitions": [], "discarded_attempts": [],
            "stripped_blocks": [], "turns": [], "text": "", "thinking": "", "tool_calls": [], "stop_reason": "",
            "stop_sequence": "", "truncated": False})
        self.assertFalse(fold.ended)

    def test_discard_voids_deltas_received_and_to_come(self) -> None:
        fold = fold_of(started(), text(2, "bad ", attempt=1))
        self.assertEqual(fold.text, "bad ")
        fold.add(discard(3, 1, 1))
        self.assertEqual(fold.text, "", "a discard voids what was received")
        fold.add(text(4, "late", attempt=1))  # live delivery: a delta of the voided attempt after the fact
        fold.add(text(5, "good", attempt=2))
        for ev in completed(6, "good", attempt=2):
            fold.add(ev)
        self.assertEqual(fold.text, "good")
        self.assertEqual(fold.discarded_attempts, [1])
        self.assertEqual(fold.reason, pb.TRANSITION_REASON_COMPLETED)
        self.assertEqual(fold.transition_reasons, [pb.TRANSITION_REASON_RETRY, pb.TRANSITION_REASON_COMPLETED])
        self.assertEqual(fold.stop_reason, pb.STOP_REASON_END_TURN)
        self.assertTrue(fold.ended)
        self.assertEqual(fold.completion_id, "cmpl_1")
        self.assertEqual(fold.last_seq, 7)

    def test_discarded_attempts_may_name_earlier_attempts(self) -> None:
        fold = fold_of(started(), text(2, "a", attempt=1), text(3, "b", attempt=2), discard(4, 3, 1, 2, 3))
        self.assertEqual(fold.text, "")
        self.assertEqual(fold.discarded_attempts, [1, 2, 3])

    def test_discard_output_alone_voids_its_attempt(self) -> None:
        fold = fold_of(started(), text(2, "a", attempt=4), discard(3, 4))
        self.assertEqual(fold.text, "")
        self.assertEqual(fold.discarded_attempts, [4])

    def test_repeated_seqs_fold_once(self) -> None:
        fold = completiond.Fold()
        self.assertTrue(fold.add(started()))
        self.assertTrue(fold.add(text(2, "a")))
        self.assertFalse(fold.add(text(2, "a")))
        self.assertFalse(fold.add(text(1, "x")))
        self.assertTrue(fold.add(text(3, "b")))
        self.assertEqual(fold.text, "ab")
        self.assertEqual(fold.last_seq, 3)

    def test_turns_thinking_and_tool_calls(self) -> None:
        args = struct_pb2.Struct()
        args.update({"city": "Lisbon", "days": 2})
        call = pb.ToolCall(id="toolu_1", name="get_weather", input=args)
        fold = fold_of(
            started(),
            text(2, "hmm", thinking=True),
            text(3, "Let me check. "),
            event(4, tool_call=call),
            event(5, 1, transition=pb.Transition(reason=pb.TRANSITION_REASON_NEXT_TURN)),
            text(6, "Sunny.", attempt=2, turn=2),
        )
        self.assertEqual([t.turn for t in fold.turns], [1, 2])
        self.assertEqual(fold.turns[0].thinking, "hmm")
        self.assertEqual(fold.turns[0].text, "Let me check. ")
        self.assertEqual(list(fold.turns[0].tool_calls), [call])
        self.assertEqual(fold.text, "Let me check. Sunny.", "text is every turn's")
        self.assertEqual(fold.thinking, "hmm")
        self.assertEqual(fold.tool_calls, [], "tool_calls are the latest turn's")
        self.assertEqual(fold.turn, 2)
        self.assertEqual(fold.to_dict()["turns"][0]["tool_calls"],
                         [{"id": "toolu_1", "name": "get_weather", "input": {"city": "Lisbon", "days": 2}}])
        self.assertEqual(completiond.tool_input(call), {"city": "Lisbon", "days": 2})

    def test_turn_with_only_discarded_output_is_not_listed(self) -> None:
        fold = fold_of(started(), text(2, "gone", attempt=1), discard(3, 1, 1))
        self.assertEqual(fold.turns, [])

    def test_latest_turn_tool_calls(self) -> None:
        call = pb.ToolCall(id="toolu_2", name="search")
        fold = fold_of(started(), event(2, 1, 1, tool_call=pb.ToolCall(id="toolu_1")),
                       event(3, 2, 2, tool_call=call))
        self.assertEqual(fold.tool_calls, [call])

    def test_truncated_result(self) -> None:
        fold = fold_of(started(), *completed(2, "cut", truncated=True))
        self.assertTrue(fold.truncated)
        self.assertEqual(fold.to_dict()["truncated"], True)

    def test_stop_sequence(self) -> None:
        fold = fold_of(started(), text(2, "one, two"))
        self.assertEqual(fold.stop_sequence, "", "no result yet")
        answer = pb.Message(role=pb.ROLE_ASSISTANT, content=[pb.ContentBlock(text=pb.TextBlock(text="one, two"))])
        fold.add(event(3, 1, transition=pb.Transition(reason=pb.TRANSITION_REASON_COMPLETED, terminal=True)))
        fold.add(event(4, 1, result=pb.Result(reason=pb.TRANSITION_REASON_COMPLETED, message=answer,
                                              stop_reason=pb.STOP_REASON_STOP_SEQUENCE, stop_sequence=", three")))
        self.assertEqual(fold.stop_reason, pb.STOP_REASON_STOP_SEQUENCE)
        self.assertEqual(fold.stop_sequence, ", three")
        self.assertEqual(fold.text, "one, two", "the sequence is not part of the answer")
        self.assertEqual(fold_of(started(), *completed(2, "done")).stop_sequence, "", "a natural end names none")

    def test_thinking_of_a_discarded_attempt(self) -> None:
        fold = fold_of(started(), text(2, "The user wants ", thinking=True), text(3, "a list. ", thinking=True),
                       text(4, "cut"), discard(5, 1, 1),
                       text(6, "Start over: ", attempt=2, thinking=True), text(7, "a list.", attempt=2, thinking=True),
                       text(8, "One, two.", attempt=2))
        self.assertEqual(fold.thinking, "Start over: a list.", "a discarded attempt's thinking goes with its text")
        self.assertEqual(fold.text, "One, two.")
        self.assertEqual(fold.turns[0].thinking, fold.thinking)
        self.assertEqual(fold.to_dict()["thinking"], "Start over: a list.")
        self.assertEqual(fold.to_dict()["turns"][0]["thinking"], "Start over: a list.")

    def test_stripped_blocks(self) -> None:
        fold = fold_of(
            started(),
            event(2, 1, transition=pb.Transition(reason=pb.TRANSITION_REASON_REACTIVE_COMPACT_RETRY,
                                                 stripped_blocks=["messages[0].content[1]", "messages[2].content[0]"])),
            event(3, 2, transition=pb.Transition(reason=pb.TRANSITION_REASON_RETRY)),
            event(4, 3, transition=pb.Transition(reason=pb.TRANSITION_REASON_IMAGE_ERROR, terminal=True,
                                                 stripped_blocks=["messages[0].content[2]"])),
        )
        want = ["messages[0].content[1]", "messages[2].content[0]", "messages[0].content[2]"]
        self.assertEqual(fold.stripped_blocks, want, "every transition's, in order")
        self.assertEqual(list(fold.transitions[0].stripped_blocks), want[:2])
        self.assertEqual(fold.to_dict()["stripped_blocks"], want)
        self.assertEqual(completiond.Fold().stripped_blocks, [])


if __name__ == "__main__":
    unittest.main()
