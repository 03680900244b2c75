package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Domain is the errdetails.ErrorInfo domain of completiond's statuses.
const Domain = "completiond.completion.v1"

// Error is a failed completiond call, typed: the status with its details
// decoded. Every stream that does not end COMPLETED ends with one.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// Reason is errdetails.ErrorInfo's reason as sent, e.g. "MODEL_ERROR"
	// ("" without ErrorInfo).
	Reason string
	// TerminalReason is the transition reason Reason names; UNSPECIFIED when
	// it names none (a refused request, a protocol violation).
	TerminalReason completionv1.TransitionReason
	// Domain is ErrorInfo's domain ([Domain] for completiond's own).
	Domain string
	// Metadata is ErrorInfo's metadata, e.g. the upstream's error kind.
	Metadata map[string]string
	// Retryable is true when the status carries RetryInfo: the same request
	// may succeed after RetryDelay.
	Retryable bool
	// RetryDelay is RetryInfo's delay.
	RetryDelay time.Duration
	// FieldViolations are a refused request's errdetails.BadRequest fields.
	FieldViolations []FieldViolation
	// CompletionID is the completion's id, when the stream had started.
	CompletionID string
	// Result is the completion's result, when the stream carried one.
	Result *completionv1.Result

	st *status.Status // the status typed, details included
}

// FieldViolation is one field of a refused request and what is wrong with it.
type FieldViolation struct {
	// Field is the field's path, e.g. "messages[0].content".
	Field string
	// Description says what is wrong.
	Description string
}

// FromStatus types st; nil for an OK status.
func FromStatus(st *status.Status) *Error {
	if st == nil || st.Code() == codes.OK {
		return nil
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}, st: st}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			e.Reason, e.Domain = d.GetReason(), d.GetDomain()
			for k, v := range d.GetMetadata() {
				e.Metadata[k] = v
			}
			e.TerminalReason = completionv1.TransitionReason(completionv1.TransitionReason_value["TRANSITION_REASON_"+d.GetReason()])
		case *errdetails.RetryInfo:
			e.Retryable, e.RetryDelay = true, d.GetRetryDelay().AsDuration()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{v.GetField(), v.GetDescription()})
			}
		}
	}
	return e
}

// AsError returns err typed: err itself when it is (or wraps) an *Error, the
// *Error of its gRPC status otherwise, and nil for nil.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return FromStatus(status.Convert(err))
}

// Error says the code, the reason and the message.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "completiond: %s", e.Code)
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Retryable {
		fmt.Fprintf(&b, "; retry in %s", e.RetryDelay)
	}
	return b.String()
}

// GRPCStatus is the status the error stands for, with its details, so that
// status.Code and status.FromError work on it.
func (e *Error) GRPCStatus() *status.Status {
	if e.st != nil {
		return e.st
	}
	return status.New(e.Code, e.Message)
}
