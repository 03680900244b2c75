package service

import (
	"context"

	"github.com/completiond/completiond/recovery"
)

// caller is how the driver asks the caller for what only it can give: the
// results of tool calls and stop-hook verdicts. Each method runs one action
// of the machine and reports the event it ends with; events it sends (a
// stop-hook request) are numbered by the action. Stream and Complete cannot
// answer (statelessCaller); Session asks its caller (grpc_session.go).
type caller interface {
	// awaitTools waits for the results of the ActAwaitTools action's calls,
	// which the outbox has just delivered.
	awaitTools(ctx context.Context, a recovery.Action) recovery.Event
	// awaitStopHook asks for a verdict on the ActAwaitStopHook action's answer.
	awaitStopHook(ctx context.Context, a recovery.Action) recovery.Event
}

// statelessCaller answers for the callers of Stream and Complete, which
// cannot run tools or hooks: a tool-use answer ends those completions
// (the machine never asks), and the built-in schema check, the only hook
// they have, has already passed when the driver asks.
type statelessCaller struct{}

func (statelessCaller) awaitTools(context.Context, recovery.Action) recovery.Event {
	return recovery.Event{Kind: recovery.EvCancelled, Reason: "tool calls need a Session"}
}

func (statelessCaller) awaitStopHook(context.Context, recovery.Action) recovery.Event {
	return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: recovery.VerdictAllow}
}
