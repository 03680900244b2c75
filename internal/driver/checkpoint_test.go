package driver

import (
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/recovery"
)

// TestCheckpointCountsHookRequests: the outbox counts the stop-hook
// requests it numbers, from those a takeover says were sent before, and a
// checkpoint records the count (the next hook_N of the replica that takes
// the Session over) — without reading the Session's own state; a request
// the fenced outbox drops is not counted.
func TestCheckpointCountsHookRequests(t *testing.T) {
	log := fleet.NewMemLog(config.EventLogLimits{MaxCompletions: 1, MaxEvents: 100, MaxBytes: 1 << 20}, time.Now)
	if err := log.Open("c", fleet.Meta{}); err != nil {
		t.Fatal(err)
	}
	fenced := false
	c := New(Spec{ID: "c", Log: log, Hooks: 2, Fence: func() bool { return !fenced },
		Send: func(*completionv1.CompletionEvent) error { return nil }})
	hook := func() *completionv1.CompletionEvent {
		return &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_StopHookRequest{StopHookRequest: &completionv1.StopHookRequest{HookId: "hook_3"}}}
	}
	c.out.event(1, 1, &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: "c"}}})
	c.out.hookRequest(1, 1, hook())
	c.saveCheckpoint(&recovery.Snapshot{})
	_, data, err := log.Checkpoint("c")
	if err != nil || data == nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	ck, err := DecodeCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Hooks != 3 {
		t.Fatalf("checkpoint hooks %d, want 3 (2 before the takeover, 1 since)", ck.Hooks)
	}
	fenced = true
	c.out.hookRequest(1, 1, hook())
	if c.out.hooks != 3 {
		t.Fatalf("a request the fenced outbox dropped was counted: %d", c.out.hooks)
	}
}
