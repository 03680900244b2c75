package driver

import (
	"context"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// Caller is how the driver asks the caller for what only it can give: the
// results of tool calls and stop-hook verdicts. Each method runs one action
// of the machine and reports the event it ends with. Stream and Complete
// cannot answer (Stateless); a Session asks its caller.
type Caller interface {
	// AwaitTools waits for the results of the ActAwaitTools action's
	// calls, which the driver has just delivered.
	AwaitTools(ctx context.Context, a recovery.Action) recovery.Event
	// AwaitStopHook asks for a verdict on the ActAwaitStopHook action's
	// answer. A caller that asks sends its request through ask, which
	// numbers, logs and sends it as the action's event and reports whether
	// the caller can still be reached.
	AwaitStopHook(ctx context.Context, a recovery.Action, ask func(*completionv1.CompletionEvent) bool) recovery.Event
}

// Stateless answers for the callers of Stream and Complete, which cannot
// run tools or hooks: a tool-use answer ends those completions (the
// machine never asks), and the built-in schema check, the only hook they
// have, has already passed when the driver asks.
type Stateless struct{}

// AwaitTools cancels: tool calls need a Session.
func (Stateless) AwaitTools(context.Context, recovery.Action) recovery.Event {
	return recovery.Event{Kind: recovery.EvCancelled, Reason: "tool calls need a Session"}
}

// AwaitStopHook allows the answer.
func (Stateless) AwaitStopHook(context.Context, recovery.Action, func(*completionv1.CompletionEvent) bool) recovery.Event {
	return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: recovery.VerdictAllow}
}
