// The Fold on hand-built streams: each rule of the stream contract.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CompletionEvent, Fold, Role, StopReason, TransitionReason } from "../src/index";
import { Events } from "./build";

const R = TransitionReason;

function fold(evs: CompletionEvent[]): Fold {
  const f = new Fold();
  for (const ev of evs) f.add(ev);
  return f;
}

describe("Fold", { timeout: 10_000 }, () => {
  test("empty: nothing folded", () => {
    const f = new Fold();
    assert.equal(f.completionId, "");
    assert.equal(f.lastSeq, 0);
    assert.equal(f.reason, undefined);
    assert.deepEqual(f.turns, []);
    assert.equal(f.text, "");
    assert.deepEqual(f.toolCalls, []);
    assert.equal(f.stopReason, undefined);
    assert.equal(f.stopSequence, undefined);
    assert.equal(f.truncated, false);
    assert.equal(f.done, false);
  });

  test("a clean completion: id, text, reason, result", () => {
    const e = new Events();
    const f = fold([e.started("cmpl_1"), e.text(1, "Hello"), e.text(1, " world"), e.completed(1), e.result(1, "Hello world")]);
    assert.equal(f.completionId, "cmpl_1");
    assert.equal(f.lastSeq, 5);
    assert.equal(f.text, "Hello world");
    assert.equal(f.reason, R.TRANSITION_REASON_COMPLETED);
    assert.deepEqual(f.transitions.map((t) => t.reason), [R.TRANSITION_REASON_COMPLETED]);
    assert.equal(f.stopReason, StopReason.STOP_REASON_END_TURN);
    assert.equal(f.stopSequence, "", "a natural end names no stop sequence");
    assert.equal(f.done, true);
  });

  test("a stop sequence: the result names it beside the stop reason", () => {
    const e = new Events();
    const f = fold([e.started(), e.text(1, "one, two"), e.completed(1)]);
    assert.equal(f.stopSequence, undefined, "no result yet");
    f.add(
      e.ev(1, 1, {
        result: {
          reason: R.TRANSITION_REASON_COMPLETED,
          stopReason: StopReason.STOP_REASON_STOP_SEQUENCE,
          stopSequence: ", three",
          message: { role: Role.ROLE_ASSISTANT, content: [{ text: { text: "one, two" } }] },
        },
      }),
    );
    assert.equal(f.stopReason, StopReason.STOP_REASON_STOP_SEQUENCE);
    assert.equal(f.stopSequence, ", three");
    assert.equal(f.text, "one, two", "the sequence is not part of the answer");
  });

  test("a transition voids the deltas of the attempts it discards, received before it", () => {
    const e = new Events();
    const f = fold([
      e.started(),
      e.text(1, "broken "),
      e.transition(1, R.TRANSITION_REASON_RETRY, { discarded: [1] }),
      e.text(2, "fine"),
      e.completed(2),
      e.result(2, "fine"),
    ]);
    assert.equal(f.text, "fine");
    assert.deepEqual(f.discardedAttempts, [1]);
    assert.equal(f.isDiscarded(1), true);
    assert.equal(f.isDiscarded(2), false);
  });

  test("and after it: a late delta of a discarded attempt is void too", () => {
    const e = new Events();
    const f = fold([
      e.started(),
      e.transition(1, R.TRANSITION_REASON_RETRY, { discarded: [1] }),
      e.text(1, "late "), // settled delivery sends an attempt's deltas when it is settled
      e.text(2, "kept"),
    ]);
    assert.equal(f.text, "kept");
  });

  test("discarded_attempts may name earlier attempts", () => {
    const e = new Events();
    const f = fold([
      e.started(),
      e.text(1, "a"),
      e.transition(1, R.TRANSITION_REASON_STREAM_RESUME),
      e.text(2, "b"),
      e.transition(2, R.TRANSITION_REASON_RETRY, { discarded: [1, 2] }),
      e.text(3, "c"),
    ]);
    assert.equal(f.text, "c");
    assert.deepEqual(f.discardedAttempts, [1, 2]);
  });

  test("STREAM_RESUME keeps the output: no discard", () => {
    const e = new Events();
    const f = fold([e.started(), e.text(1, "one "), e.transition(1, R.TRANSITION_REASON_STREAM_RESUME), e.text(2, "two")]);
    assert.equal(f.text, "one two");
    assert.deepEqual(f.discardedAttempts, []);
  });

  test("an event at or below the last seq is ignored (a reconnect's repeat)", () => {
    const e = new Events();
    const evs = [e.started(), e.text(1, "a"), e.text(1, "b")];
    const f = fold(evs);
    assert.equal(f.add(evs[1]!), false);
    assert.equal(f.add(evs[2]!), false);
    assert.equal(f.text, "ab");
    assert.equal(f.lastSeq, 3);
    assert.equal(f.add(e.text(1, "c")), true);
    assert.equal(f.text, "abc");
  });

  test("thinking is kept apart from the text", () => {
    const e = new Events();
    const f = fold([e.started(), e.thinking(1, "hmm"), e.text(1, "answer")]);
    assert.equal(f.text, "answer");
    assert.equal(f.thinking, "hmm");
    assert.deepEqual(f.turns, [{ turn: 1, text: "answer", thinking: "hmm", toolCalls: [] }]);
  });

  test("thinking of a discarded attempt goes with its text", () => {
    const e = new Events();
    const f = fold([
      e.started(),
      e.thinking(1, "The user wants "),
      e.thinking(1, "a list. "),
      e.text(1, "cut"),
      e.transition(1, R.TRANSITION_REASON_RETRY, { discarded: [1] }),
      e.thinking(2, "Start over: "),
      e.thinking(2, "a list."),
      e.text(2, "One, two."),
    ]);
    assert.equal(f.thinking, "Start over: a list.");
    assert.equal(f.text, "One, two.");
    assert.deepEqual(f.turns, [{ turn: 1, text: "One, two.", thinking: "Start over: a list.", toolCalls: [] }]);
  });

  test("strippedBlocks: every transition's, in order", () => {
    const e = new Events();
    const f = fold([
      e.started(),
      e.ev(1, 1, {
        transition: {
          reason: R.TRANSITION_REASON_REACTIVE_COMPACT_RETRY,
          strippedBlocks: ["messages[0].content[1]", "messages[2].content[0]"],
        },
      }),
      e.transition(2, R.TRANSITION_REASON_RETRY),
      e.ev(3, 1, {
        transition: { reason: R.TRANSITION_REASON_IMAGE_ERROR, terminal: true, strippedBlocks: ["messages[0].content[2]"] },
      }),
    ]);
    assert.deepEqual(f.strippedBlocks, ["messages[0].content[1]", "messages[2].content[0]", "messages[0].content[2]"]);
    assert.deepEqual(f.transitions[0]!.strippedBlocks, ["messages[0].content[1]", "messages[2].content[0]"]);
    assert.deepEqual(new Fold().strippedBlocks, []);
  });

  test("turns: each turn's text and tool calls; text is every turn's, toolCalls the latest turn's", () => {
    const e = new Events();
    const f = fold([
      e.started(),
      e.text(1, "Let me look."),
      e.toolCall(1, "toolu_1"),
      e.transition(1, R.TRANSITION_REASON_NEXT_TURN, { turn: 2 }),
      e.text(2, "Sunny.", 2),
    ]);
    assert.deepEqual(
      f.turns.map((t) => [t.turn, t.text, t.toolCalls.map((c) => c.id)]),
      [
        [1, "Let me look.", ["toolu_1"]],
        [2, "Sunny.", []],
      ],
    );
    assert.equal(f.text, "Let me look.Sunny.");
    assert.deepEqual(f.toolCalls, []);
    assert.deepEqual(f.turns[0]!.toolCalls[0]!.input, { city: "Oslo" });
  });

  test("toolCalls are [] while the latest event's turn has none yet", () => {
    const e = new Events();
    const f = fold([e.started(), e.toolCall(1, "toolu_1"), e.transition(1, R.TRANSITION_REASON_NEXT_TURN, { turn: 2 })]);
    assert.equal(f.turn, 2);
    assert.deepEqual(f.toolCalls, []);
    assert.equal(f.turns.length, 1);
  });

  test("a tool call is never discarded", () => {
    const e = new Events();
    const f = fold([e.started(), e.toolCall(1, "toolu_1"), e.transition(1, R.TRANSITION_REASON_RETRY, { discarded: [1] })]);
    assert.deepEqual(f.toolCalls.map((c) => c.id), ["toolu_1"]);
  });

  test("a Fold that continues an Attach starts after afterSeq", () => {
    const f = new Fold({ completionId: "cmpl_x", afterSeq: 7 });
    assert.equal(f.completionId, "cmpl_x");
    assert.equal(f.lastSeq, 7);
    const e = new Events();
    e.seq = 6;
    assert.equal(f.add(e.text(1, "old")), false);
    assert.equal(f.add(e.text(1, "new")), true);
    assert.equal(f.text, "new");
  });

  test("seq decoded from the wire (uint64) is a number, exact past 2^32", () => {
    const big = 2 ** 40 + 3;
    const wire = CompletionEvent.encode(CompletionEvent.fromPartial({ seq: big, turn: 1 })).finish();
    const ev = CompletionEvent.decode(wire);
    assert.equal(typeof ev.seq, "number");
    assert.equal(ev.seq, big);
    const f = new Fold();
    assert.equal(f.add(ev), true);
    assert.equal(f.lastSeq, big);
    assert.equal(f.add(CompletionEvent.decode(wire)), false);
  });

  test("a seq beyond Number.MAX_SAFE_INTEGER is refused by the decoder, never rounded", () => {
    // 2^53 + 1 as a uint64 varint: the generated decoder throws rather than fold a wrong seq.
    const wire = CompletionEvent.encode(CompletionEvent.fromPartial({ seq: 2 ** 53 })).finish();
    wire[wire.length - 8] = (wire[wire.length - 8]! | 1); // set the low bit of the varint's first byte: 2^53 + 1
    assert.throws(() => CompletionEvent.decode(wire), /MAX_SAFE_INTEGER/);
  });
});
