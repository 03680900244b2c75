package recovery

import "testing"

// TestTakeoverCheckpointAwaitingWithLaterAttempts: a machine makes
// checkpoints only when Config.Checkpoints asks; a log that shows
// attempts after a checkpoint at which the caller was awaited contradicts
// it (the caller's answer would have made a checkpoint of its own): the
// takeover ends typed, MODEL_ERROR, rather than guess the conversation.
func TestTakeoverCheckpointAwaitingWithLaterAttempts(t *testing.T) {
	cfg := Config{Policy: DefaultPolicy(), Routes: []Route{{Name: "a"}}, Messages: []Message{UserText("hi")}, Session: true, Checkpoints: true}
	m := New(cfg)
	m.Start(epoch)
	st := m.Step(Event{Kind: EvAttemptDone, StopReason: StopToolUse, ToolCalls: []ToolCall{{ID: "c1", Name: "f", Input: []byte("{}")}}})
	if st.Action.Kind != ActAwaitTools || st.Checkpoint == nil || st.Checkpoint.Phase != SnapshotAwaitTools {
		t.Fatalf("no checkpoint awaiting the tools: %+v", st)
	}
	got := Takeover(cfg, Prior{Base: st.Checkpoint, Attempt: 2, InFlight: true}).Start(epoch)
	if got.Action.Kind != ActFinish || got.Action.Result.Reason != ModelError {
		t.Fatalf("got %+v, want a MODEL_ERROR finish", got.Action)
	}
	cfg.Checkpoints = false
	n := New(cfg)
	n.Start(epoch)
	if st := n.Step(Event{Kind: EvAttemptDone, StopReason: StopToolUse, ToolCalls: []ToolCall{{ID: "c1"}}}); st.Checkpoint != nil {
		t.Fatalf("a checkpoint without Config.Checkpoints: %+v", st.Checkpoint)
	}
}
