package driver

import (
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/recovery"
)

// Spec is everything a completion needs, filled in before it runs: the
// gRPC surface builds one (a Stream's, a Session's, a resumable
// completion's or a takeover's) and New makes the completion of it.
// Nothing changes a completion after New: what the driver learns while it
// runs, it keeps to itself.
type Spec struct {
	// ID is the completion's id.
	ID string
	// Request is the caller's request, validated.
	Request *completionv1.CompleteRequest
	// Routes is the chain: the primary route, then its fallbacks.
	Routes []*config.Route
	// Machine is the recovery machine's configuration.
	Machine recovery.Config
	// Schema, when set, is the output schema every final answer must
	// satisfy (the built-in stop hook).
	Schema *jsonschema.Schema
	// Caller answers tool calls and stop hooks; Stateless for the callers
	// that cannot.
	Caller Caller
	// Key is the name of the caller's key ("" without auth), for telemetry.
	Key string
	// Budget, when set, is the caller's key's budget: every attempt is
	// charged to it as it ends, and it is checked before every call, which
	// it may refuse (EvBudgetExceeded).
	Budget Budget
	// Observer is the server's telemetry.
	Observer *telemetry.Observer
	// Breakers are the server's circuit breakers, one per route.
	Breakers *guard.Breakers
	// Now and Rand are the clock and the random numbers the machine is
	// given at every step.
	Now  func() time.Time
	Rand func() float64
	// Conclude maps the machine's result to how the RPC ends, when the
	// result is sent: the status goes into the event log with the result,
	// so that every caller attached to the completion ends the same way.
	Conclude func(*recovery.Result) Conclusion
	// Release is called once Run has returned: the server's count of
	// running completions.
	Release func()
	// Prior, when set, is what a lost replica had done: Run continues the
	// completion from there (recovery.Takeover) instead of starting it.
	Prior *recovery.Prior
	// TakenFrom is the replica the completion was taken over from.
	TakenFrom string
	// Started is the started event when a takeover read it from the log;
	// Run makes it otherwise.
	Started *completionv1.Started

	// Delivery (the outbox's).

	// Send sends an event to the caller; an error means the caller has
	// gone, and nothing more is sent.
	Send func(*completionv1.CompletionEvent) error
	// Settled holds each attempt's output until the machine settles it
	// (DELIVERY_MODE_SETTLED).
	Settled bool
	// Log keeps every numbered event, for Attach; nil keeps none.
	Log fleet.Log
	// Open, when set, opens the completion's log with its first event,
	// the started event (fleet.Opening: in Redis, under the completion's
	// lease, in one round trip): Run calls it instead of appending that
	// event to Log, on the goroutine that writes the event ahead, beside
	// the upstream call (outbox.ahead); nothing else is numbered before
	// it returns. What it returns, when not nil, runs on that goroutine
	// next, beside the completion (the request joining the shared log);
	// the result is numbered only once it is done.
	Open func(first *completionv1.CompletionEvent) (then func())
	// Observe, when set, sees every numbered event before it is logged or
	// sent: a resumable Session registers there the calls and hook
	// requests its caller may answer, before any caller can read them.
	Observe func(*completionv1.CompletionEvent)
	// Fence, when set, says whether this replica still holds the
	// completion's lease. Once it does not, nothing more is numbered,
	// logged or sent: another replica may own the completion.
	Fence func() bool
	// AfterSeq is a takeover's: the seq of the last event logged.
	AfterSeq uint64
	// Held is a takeover's: the held output of the checkpoint, by attempt.
	Held map[int][]*completionv1.CompletionEvent
	// Hooks is a takeover's: the stop-hook requests sent before it.
	Hooks int
}

// Conclusion is how a completion's RPC ends.
type Conclusion struct {
	// Err is the gRPC status error the RPC returns; nil for OK.
	Err error
	// Status is the encoded google.rpc.Status the event log keeps with
	// the result, for the callers that attach.
	Status []byte
}

// Route is the route of the chain named name, or nil. A chain holds a
// few routes: a scan costs less than a map per completion.
func (sp *Spec) Route(name string) *config.Route {
	for _, r := range sp.Routes {
		if r.Spec.Name == name {
			return r
		}
	}
	return nil
}

// Budget is the spend of a caller's key against its budget
// (config.Budget), as the driver sees it.
type Budget interface {
	// Charge adds one attempt's cost in USD and its input plus output
	// tokens to the key's spend.
	Charge(usd float64, tokens int64)
	// Spent reports whether the key's budget is spent, and if so how long
	// until it renews and why, for people.
	Spent() (retryAfter time.Duration, why string, spent bool)
}
