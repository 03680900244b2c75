package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/internal/driver"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/recovery"
)

// ErrorDomain is the errdetails.ErrorInfo domain of completiond's errors.
const ErrorDomain = "completiond.completion.v1"

// ending is everything a completion's status depends on: the machine's
// result, and what only the RPC knows.
type ending struct {
	// result is the machine's result.
	result *recovery.Result
	// shuttingDown: the server's drain aborted the completion.
	shuttingDown bool
	// deadlineExceeded: the caller's deadline passed and aborted the completion.
	deadlineExceeded bool
	// violation is the protocol violation of a Session caller, if any.
	violation string
	// callerTimedOut: a Session caller did not answer within --caller-wait.
	callerTimedOut bool
	// budgetEnd is the end of the budget period that refused a call
	// (BUDGET_EXCEEDED); zero when none did.
	budgetEnd time.Time
}

// endStatus is the one mapping from a completion's end to its RPC status:
// OK for COMPLETED, otherwise a code that matches the terminal reason with
// ErrorInfo{reason: <transition name>} and, when a later retry could
// succeed, RetryInfo. A Session caller's protocol violation is
// INVALID_ARGUMENT, its silence DEADLINE_EXCEEDED; a completion aborted by
// the server's drain is UNAVAILABLE with RetryInfo, whatever it was doing,
// and one aborted by the caller's own deadline is DEADLINE_EXCEEDED, as the
// caller's side reports it.
func endStatus(e ending) *status.Status {
	r := e.result
	info := &errdetails.ErrorInfo{Reason: r.Reason.String(), Domain: ErrorDomain, Metadata: failureMetadata(r.Failure)}
	switch {
	case e.violation != "":
		why := clip(e.violation, maxDescription) // it may quote the caller's ids
		info.Metadata = map[string]string{"violation": why}
		return withDetails(codes.InvalidArgument, "session protocol violation: "+why, info,
			&errdetails.BadRequest{FieldViolations: violations{{Field: "request", Description: why}}})
	case e.callerTimedOut:
		return withDetails(codes.DeadlineExceeded, "the caller did not answer in time; completion ended "+r.Reason.String(), info)
	case e.shuttingDown && (r.Reason == recovery.AbortedStreaming || r.Reason == recovery.AbortedTools):
		d := *r
		d.Retryable = true
		return statusFor(codes.Unavailable, "server shutting down, retry: completion ended "+r.Reason.String(), &d)
	case e.deadlineExceeded && (r.Reason == recovery.AbortedStreaming || r.Reason == recovery.AbortedTools):
		return statusFor(codes.DeadlineExceeded, "deadline exceeded: completion ended "+r.Reason.String(), r)
	case r.Reason == recovery.Completed:
		return status.New(codes.OK, "")
	case r.Reason == recovery.BudgetExceeded:
		msg := "completion ended " + r.Reason.String() + ": the key's budget is spent"
		info.Metadata = budgetMetadata(e.budgetEnd)
		return withDetails(codes.ResourceExhausted, msg, info, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)})
	}
	return statusFor(reasonCode(r), "completion ended "+r.Reason.String(), r)
}

// withDetails builds every status that is not OK, bounded to maxStatusBytes.
func withDetails(code codes.Code, msg string, details ...protoadapt.MessageV1) *status.Status {
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		return bounded(status.New(code, msg))
	}
	return bounded(st)
}

// statusFor builds a non-OK status for r with the given code.
func statusFor(code codes.Code, msg string, r *recovery.Result) *status.Status {
	if r.Failure != nil {
		msg += ": " + r.Failure.Error()
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: r.Reason.String(), Domain: ErrorDomain, Metadata: failureMetadata(r.Failure)}}
	if r.Retryable {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)})
	}
	return withDetails(code, msg, details...)
}

func reasonCode(r *recovery.Result) codes.Code {
	switch r.Reason {
	case recovery.AbortedStreaming, recovery.AbortedTools:
		return codes.Canceled
	case recovery.PromptTooLong, recovery.BlockingLimit, recovery.ImageError:
		return codes.FailedPrecondition
	case recovery.MaxTurns, recovery.BudgetExceeded:
		return codes.ResourceExhausted
	case recovery.StopHookPrevented, recovery.HookStopped:
		return codes.Aborted
	case recovery.ModelError:
		return failureCode(r)
	}
	return codes.Unknown
}

// failureCode maps the upstream failure behind a MODEL_ERROR by its class,
// whatever x-should-retry said: INTERNAL is kept for what the operator must
// fix (a bad key, an unknown model) and for failures nobody classified.
func failureCode(r *recovery.Result) codes.Code {
	f := r.Failure
	if f == nil {
		return codes.Internal
	}
	switch f.Kind {
	case recovery.FailTimeout:
		return codes.DeadlineExceeded
	case recovery.FailQuota, recovery.FailRateLimit:
		return codes.ResourceExhausted
	case recovery.FailInvalidRequest, recovery.FailContentFilter, recovery.FailPrefillRejected:
		return codes.FailedPrecondition
	case recovery.FailAuth, recovery.FailNotFound:
		return codes.Internal // the server's configuration is wrong, not the caller's request
	case recovery.FailCircuitOpen:
		return codes.Unavailable
	}
	if r.Retryable || f.Outage() || f.Transient() {
		return codes.Unavailable
	}
	return codes.Internal
}

func failureMetadata(f *recovery.Failure) map[string]string {
	if f == nil {
		return nil
	}
	md := map[string]string{"error_kind": f.Kind.String()}
	set := func(k, v string) {
		if v != "" {
			md[k] = v
		}
	}
	set("provider", f.Provider)
	set("type", f.Type)
	set("code", f.Code)
	set("request_id", f.RequestID)
	if f.HTTPStatus != 0 {
		md["http_status"] = strconv.Itoa(f.HTTPStatus)
	}
	return md
}

// invalidArgument is the status of a request refused before any call: its
// first maxViolations violations, bounded, then one that counts the others.
func invalidArgument(v violations) error {
	var shown violations
	more := 0
	for _, fv := range v {
		if fv == moreViolations || len(shown) == maxViolations {
			more++
			continue
		}
		shown = append(shown, &errdetails.BadRequest_FieldViolation{
			Field: clip(fv.GetField(), maxField), Description: clip(fv.GetDescription(), maxDescription)})
	}
	if more > 0 {
		shown = append(shown, &errdetails.BadRequest_FieldViolation{Field: "request",
			Description: fmt.Sprintf("%d more violations are not listed", more)})
	}
	if len(shown) == 0 {
		return status.Error(codes.InvalidArgument, "invalid request")
	}
	msg := "invalid request: " + shown[0].GetField() + ": " + shown[0].GetDescription()
	return withDetails(codes.InvalidArgument, msg, &errdetails.BadRequest{FieldViolations: shown}).Err()
}

// The bounds of every status the service sends. A status travels in the
// trailers, which a client refuses past its header list limit (16 MiB in
// grpc-go) by tearing down the whole connection, with every other stream
// On it; statuses are built small, and bounded checks it.
const (
	// maxStatusBytes bounds the encoded google.rpc.Status: code, message
	// and details.
	maxStatusBytes = 4 << 10
	// maxStatusMessage bounds the message of a status that was too large.
	maxStatusMessage = 1 << 10
)

// bounded is st, or st cut down to maxStatusBytes when it is larger: the
// message clipped, then details dropped from the last.
func bounded(st *status.Status) *status.Status {
	p := st.Proto()
	if proto.Size(p) <= maxStatusBytes {
		return st
	}
	p.Message = clip(p.GetMessage(), maxStatusMessage)
	for len(p.Details) > 0 && proto.Size(p) > maxStatusBytes {
		p.Details = p.Details[:len(p.Details)-1]
	}
	return status.FromProto(p)
}

// contextStatus maps a context error to its status.
func contextStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	return status.Error(codes.Canceled, "cancelled")
}

// encodeStatus is st as the event log keeps it: the bytes of its
// google.rpc.Status, empty for OK. It is bounded already (maxStatusBytes).
func encodeStatus(st *status.Status) []byte {
	if st.Code() == codes.OK {
		return nil
	}
	b, err := proto.Marshal(st.Proto())
	if err != nil {
		return nil // cannot happen: a status built here always encodes
	}
	return b
}

// conclusion is how a completion's RPC ends with st: the driver hands it
// back to the handler and keeps its encoding in the log with the result.
func conclusion(st *status.Status) driver.Conclusion {
	return driver.Conclusion{Err: st.Err(), Status: encodeStatus(st)}
}

// loggedStatus is the status a completion ended with, from the bytes its
// log ended with: what Attach and a Session resume end with, the same as
// the completion's own stream. Bytes that do not decode (a shared store's
// damage) are INTERNAL, never a false OK.
func loggedStatus(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var p spb.Status
	if err := proto.Unmarshal(b, &p); err != nil || p.GetCode() == int32(codes.OK) {
		return status.Error(codes.Internal, "the completion's end status could not be read from the event log")
	}
	return status.FromProto(&p).Err()
}

// Reasons of the ErrorInfo of a call refused, or ended, by the server's
// own state rather than by a completion's end.
const (
	// reasonDraining: the server is draining and starts no completion.
	reasonDraining = "DRAINING"
	// reasonTakenOver: a newer caller resumed the Session this stream
	// controlled, and controls it now.
	reasonTakenOver = "SESSION_TAKEN_OVER"
	// reasonTakeoverFailed: the replica serving an Attach found the
	// completion's replica dead but cannot continue it itself (its log or
	// request does not make sense with this replica's configuration).
	reasonTakeoverFailed = "TAKEOVER_FAILED"
	// reasonCompletionLost: the completion followed ran without a resume
	// grace on a replica whose process is gone: it ended with it.
	reasonCompletionLost = "COMPLETION_LOST"
	// reasonLogFull: the event log had no room for a completion that
	// asked to be resumable.
	reasonLogFull = "EVENT_LOG_FULL"
	// reasonRouteNotPermitted: the caller's key may not use a route the
	// request names.
	reasonRouteNotPermitted = "ROUTE_NOT_PERMITTED"
	// reasonHealthBusy: as many health calls of the kind run as the
	// server lets anybody run without a key.
	reasonHealthBusy = "HEALTH_BUSY"
	// reasonCompletionNotFound: no completion of the id is kept for the
	// caller (unknown, expired, or, to Cancel, another key's).
	reasonCompletionNotFound = "COMPLETION_NOT_FOUND"
	// reasonCancelPending: a Cancel asked for a completion's end, which
	// did not come within its wait; the cancel stands.
	reasonCancelPending = "CANCEL_PENDING"
)

// healthBusyStatus refuses a health call past its cap (what, limit), on
// its headers: RESOURCE_EXHAUSTED, ErrorInfo HEALTH_BUSY, RetryInfo of
// ShedRetryDelay.
func healthBusyStatus(what string, limit int) error {
	return withDetails(codes.ResourceExhausted, fmt.Sprintf("%d %s run already, the server's limit: retry later", limit, what),
		&errdetails.ErrorInfo{Reason: reasonHealthBusy, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(guard.ShedRetryDelay)}).Err()
}

// drainingStatus refuses a new completion while the server drains:
// UNAVAILABLE with RetryInfo, to be retried on another server at once.
// Attach and Session resume are still answered.
func drainingStatus() error {
	return withDetails(codes.Unavailable, "server draining: retry on another server",
		&errdetails.ErrorInfo{Reason: reasonDraining, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(0)}).Err()
}

// takenOverStatus ends the stream that controlled a Session when a newer
// caller resumes it: ABORTED (a concurrency conflict, as the code's
// definition goes) with ErrorInfo reason SESSION_TAKEN_OVER, and no
// RetryInfo: resuming again would only take control back. The completion
// goes on under the new caller.
func takenOverStatus() error {
	return withDetails(codes.Aborted, "another caller resumed this Session and controls it now",
		&errdetails.ErrorInfo{Reason: reasonTakenOver, Domain: ErrorDomain}).Err()
}

// logFullStatus refuses a completion with a resume grace that the event
// log has no room for: without a log it could not be resumed.
func logFullStatus() error {
	return withDetails(codes.Unavailable, "event log full: cannot keep a resumable completion, retry later",
		&errdetails.ErrorInfo{Reason: reasonLogFull, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(guard.ShedRetryDelay)}).Err()
}

// takeoverFailedStatus ends an Attach whose replica could not take over
// completion id, whose own replica died: FAILED_PRECONDITION, ErrorInfo
// TAKEOVER_FAILED, the reason clipped. The completion's log stays as it
// was: a replica configured differently may still continue it.
func takeoverFailedStatus(id string, why error) error {
	return withDetails(codes.FailedPrecondition,
		"the replica running completion "+quote(id)+" was lost and this replica cannot continue it: "+clip(why.Error(), maxTakeoverError),
		&errdetails.ErrorInfo{Reason: reasonTakeoverFailed, Domain: ErrorDomain}).Err()
}

// completionLostStatus ends the follower of completion id, whose log
// holds no request to continue it from (it ran without a resume grace, or
// its replica died before its request joined the log), on replica, whose
// process is gone: FAILED_PRECONDITION, ErrorInfo COMPLETION_LOST.
// Attaching again cannot help; starting it again can, under its
// idempotency key too (claimKey finds the completion lost and starts it
// anew).
func completionLostStatus(id, replica string) error {
	return withDetails(codes.FailedPrecondition,
		"completion "+quote(id)+" ended with its replica "+quote(clip(replica, maxTakeoverError))+
			", which is gone: its log holds no request to continue it from (it ran without a resume grace, or the replica died before the request joined the log); start it again (under its idempotency key too: a start finds it lost and starts it anew)",
		&errdetails.ErrorInfo{Reason: reasonCompletionLost, Domain: ErrorDomain}).Err()
}

// maxTakeoverError bounds the reason a takeover failure quotes.
const maxTakeoverError = 256

// refusalStatus is the status of a call a limit refused: UNAVAILABLE when
// the server is overloaded, RESOURCE_EXHAUSTED when the caller's key is
// over its limits; ErrorInfo{reason, key} and RetryInfo{when}. A key over
// its budget is told BUDGET_EXCEEDED with period_end instead of the key's
// name. err is a *Refusal.
func refusalStatus(err error) error {
	var r *guard.Refusal
	if !errors.As(err, &r) {
		return internalStatus().Err()
	}
	code := codes.ResourceExhausted
	if r.Reason == guard.ReasonOverloaded {
		code = codes.Unavailable
	}
	info := &errdetails.ErrorInfo{Reason: r.Reason, Domain: ErrorDomain}
	switch {
	case r.Reason == guard.ReasonBudgetExceeded:
		info.Metadata = budgetMetadata(r.Until) // never the key
	case r.Key != "":
		info.Metadata = map[string]string{"key": r.Key}
	}
	return withDetails(code, r.Message, info, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}).Err()
}

// budgetMetadata is the ErrorInfo metadata of BUDGET_EXCEEDED: period_end,
// when the key's budget renews (RFC 3339, UTC); nil when unknown.
func budgetMetadata(end time.Time) map[string]string {
	if end.IsZero() {
		return nil
	}
	return map[string]string{"period_end": end.UTC().Format(time.RFC3339)}
}

// internalStatus is the status of a failure the server does not explain to
// its caller (a handler's panic): INTERNAL, "internal error".
func internalStatus() *status.Status {
	return status.New(codes.Internal, "internal error")
}

// The refusals of a caller that did not authenticate (auth.go):
// UNAUTHENTICATED, without details.

// malformedAuthStatus refuses authorization metadata that is not a bearer
// token.
func malformedAuthStatus() error {
	return status.Error(codes.Unauthenticated, `malformed authorization metadata: want "Bearer <key>"`)
}

// duplicateAuthStatus refuses a call with more than one authorization
// header: a proxy that adds its own must not be overridden by the caller's.
func duplicateAuthStatus() error {
	return status.Error(codes.Unauthenticated, "more than one authorization metadata: send one")
}

// unknownKeyStatus refuses a bearer key that no configured key matches.
func unknownKeyStatus() error {
	return status.Error(codes.Unauthenticated, "unknown API key")
}

// missingCredentialsStatus refuses a call without credentials; it names a
// client certificate too when the server accepts them (certificates).
func missingCredentialsStatus(certificates bool) error {
	if certificates {
		return status.Error(codes.Unauthenticated, `missing credentials: send the metadata "authorization: Bearer <key>" or a client certificate`)
	}
	return status.Error(codes.Unauthenticated, `missing credentials: send the metadata "authorization: Bearer <key>"`)
}

// unidentifiedStatus refuses a call that authentication did not look at
// (the interceptor that identifies callers did not run before the one that
// enforces).
func unidentifiedStatus() error {
	return status.Error(codes.Unauthenticated, "missing credentials")
}

// routeDeniedStatus is the status of a request for a route its key may not
// use: PERMISSION_DENIED, ErrorInfo ROUTE_NOT_PERMITTED with the route and
// the key.
func routeDeniedStatus(c Caller, route string) error {
	return withDetails(codes.PermissionDenied, fmt.Sprintf("key %q may not use route %q", c.Name, route),
		&errdetails.ErrorInfo{Reason: reasonRouteNotPermitted, Domain: ErrorDomain,
			Metadata: map[string]string{"route": route, "key": c.Name}}).Err()
}

// notOwnerStatus refuses an Attach or a Session resume of completion id,
// which another caller started: PERMISSION_DENIED.
func notOwnerStatus(id string) error {
	return status.Error(codes.PermissionDenied, "completion "+quote(id)+" was started by another caller")
}

// logStatus is the status of an event log read that failed: NOT_FOUND
// with ErrorInfo COMPLETION_NOT_FOUND, OUT_OF_RANGE, INTERNAL, or
// UNAVAILABLE without ErrorInfo when the shared log does not answer — a
// dropped connection to the caller, who attaches (or resumes) again.
// Cancel also answers another key's completion with its NOT_FOUND, the
// same bytes as an unknown id's.
func logStatus(err error, id string, after uint64) error {
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return withDetails(codes.NotFound, "no completion "+quote(id)+" (unknown, or its log expired)",
			&errdetails.ErrorInfo{Reason: reasonCompletionNotFound, Domain: ErrorDomain}).Err()
	case errors.Is(err, fleet.ErrOutOfRange):
		return status.Errorf(codes.OutOfRange, "after_seq %d is not within the events kept of completion %s", after, quote(id))
	case errors.Is(err, fleet.ErrUnavailable):
		return status.Error(codes.Unavailable, "the shared event log (Redis) does not answer: retry")
	}
	return status.Error(codes.Internal, err.Error())
}

// cancelPendingStatus ends a Cancel of completion id whose end did not
// come within wait: UNAVAILABLE, ErrorInfo CANCEL_PENDING, RetryInfo 0.
// The cancel stands (the completion's context is cancelled, or its fleet
// mark set): a Cancel again waits for the end again.
func cancelPendingStatus(id string, wait time.Duration) error {
	return withDetails(codes.Unavailable, "completion "+quote(id)+" was asked to end but had not ended after "+wait.String()+": the cancel stands, call Cancel again to wait for its end",
		&errdetails.ErrorInfo{Reason: reasonCancelPending, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(0)}).Err()
}

// notRunningHereStatus ends a Session resume of completion id, a live
// Session this replica does not run and cannot take over: UNAVAILABLE
// without ErrorInfo, so that the caller resumes again (through the load
// balancer, it reaches the replica that runs it).
func notRunningHereStatus(id string) error {
	return status.Error(codes.Unavailable, "completion "+quote(id)+" does not run on this server")
}

// startTimeoutStatus ends a Session whose first message did not come
// within wait: DEADLINE_EXCEEDED.
func startTimeoutStatus(wait time.Duration) error {
	return status.Errorf(codes.DeadlineExceeded, "no start message within %s: a Session must begin with start", wait)
}

// abortedBeforeStartStatus ends a Session whose first message had not come
// when the server aborted its completions (a drain that timed out):
// UNAVAILABLE with RetryInfo, without ErrorInfo — no completion was
// started, and the caller may send it again to another server.
func abortedBeforeStartStatus() error {
	return withDetails(codes.Unavailable, "server shutting down, retry", &errdetails.RetryInfo{RetryDelay: durationpb.New(0)}).Err()
}

// lostLeaseStatus is the status of a Stream whose replica lost the lease:
// UNAVAILABLE, so that the caller attaches again (another replica runs it).
func lostLeaseStatus(id string) error {
	return status.Error(codes.Unavailable, "this replica lost completion "+quote(id)+" to another one: attach to follow it")
}

// idemReusedStatus refuses a start whose idempotency key its caller used
// for another request: ALREADY_EXISTS, ErrorInfo IDEMPOTENCY_KEY_REUSED.
// Neither the key nor the other completion's id is told.
func idemReusedStatus() error {
	return withDetails(codes.AlreadyExists, "idempotency_key was used for a different request",
		&errdetails.ErrorInfo{Reason: reasonIdempotencyKeyReused, Domain: ErrorDomain}).Err()
}
