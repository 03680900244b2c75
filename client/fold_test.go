package client

import (
	"slices"
	"testing"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// deltaEvent is a delta of turn 1.
func deltaEvent(seq uint64, attempt int32, kind completionv1.DeltaKind, text string) *completionv1.CompletionEvent {
	return &completionv1.CompletionEvent{Seq: seq, Attempt: attempt, Turn: 1,
		Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{Kind: kind, Text: text}}}
}

// transitionEvent is a transition of turn 1.
func transitionEvent(seq uint64, attempt int32, tr *completionv1.Transition) *completionv1.CompletionEvent {
	return &completionv1.CompletionEvent{Seq: seq, Attempt: attempt, Turn: 1, Event: &completionv1.CompletionEvent_Transition{Transition: tr}}
}

// TestFoldThinking: thinking deltas are the fold's Thinking, never its
// Text, and a discarded attempt's thinking goes with its text.
func TestFoldThinking(t *testing.T) {
	const thinking, text = completionv1.DeltaKind_DELTA_KIND_THINKING, completionv1.DeltaKind_DELTA_KIND_TEXT
	var f Fold
	for _, ev := range []*completionv1.CompletionEvent{
		deltaEvent(1, 1, thinking, "The user wants "),
		deltaEvent(2, 1, thinking, "a list. "),
		deltaEvent(3, 1, text, "cut"),
		transitionEvent(4, 1, &completionv1.Transition{Reason: completionv1.TransitionReason_TRANSITION_REASON_RETRY,
			DiscardOutput: true, DiscardedAttempts: []int32{1}}),
		deltaEvent(5, 2, thinking, "Start over: "),
		deltaEvent(6, 2, thinking, "a list."),
		deltaEvent(7, 2, text, "One, two."),
	} {
		f.Add(ev)
	}
	if got, want := f.Thinking(), "Start over: a list."; got != want {
		t.Errorf("Thinking %q, want %q", got, want)
	}
	if got, want := f.Text(), "One, two."; got != want {
		t.Errorf("Text %q, want %q", got, want)
	}
	if turns := f.Turns(); len(turns) != 1 || turns[0].Thinking != f.Thinking() || turns[0].Text != f.Text() {
		t.Errorf("turns %+v", turns)
	}
	var empty Fold
	if empty.Thinking() != "" || empty.StrippedBlocks() != nil {
		t.Errorf("an empty fold: thinking %q, stripped %v", empty.Thinking(), empty.StrippedBlocks())
	}
}

// TestFoldStrippedBlocks: every transition's stripped_blocks, in order.
func TestFoldStrippedBlocks(t *testing.T) {
	var f Fold
	f.Add(transitionEvent(1, 1, &completionv1.Transition{Reason: completionv1.TransitionReason_TRANSITION_REASON_REACTIVE_COMPACT_RETRY,
		StrippedBlocks: []string{"messages[0].content[1]", "messages[2].content[0]"}}))
	f.Add(transitionEvent(2, 2, &completionv1.Transition{Reason: completionv1.TransitionReason_TRANSITION_REASON_RETRY}))
	f.Add(transitionEvent(3, 3, &completionv1.Transition{Reason: completionv1.TransitionReason_TRANSITION_REASON_IMAGE_ERROR,
		Terminal: true, StrippedBlocks: []string{"messages[0].content[2]"}}))
	want := []string{"messages[0].content[1]", "messages[2].content[0]", "messages[0].content[2]"}
	if got := f.StrippedBlocks(); !slices.Equal(got, want) {
		t.Errorf("StrippedBlocks %q, want %q", got, want)
	}
	if got := f.Transitions()[0].GetStrippedBlocks(); len(got) != 2 {
		t.Errorf("the first transition's stripped_blocks %q", got)
	}
}
