package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStreamFoldsTheAnswer(t *testing.T) {
	for _, delivery := range []completionv1.DeliveryMode{completionv1.DeliveryMode_DELIVERY_MODE_LIVE, completionv1.DeliveryMode_DELIVERY_MODE_SETTLED} {
		t.Run(delivery.String(), func(t *testing.T) {
			c := New(serve(t))
			req := on("sim-noprefill", ask("cut=4"))
			req.Delivery = delivery
			s, err := c.Stream(ctxFor(t), req)
			if err != nil {
				t.Fatal(err)
			}
			var seqs []uint64
			for ev, err := range s.Events() {
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, ev.GetSeq())
			}
			f := s.Fold()
			if !f.Done() || f.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED {
				t.Fatalf("done %v reason %v", f.Done(), f.Reason())
			}
			if got, want := f.Text(), f.Result().GetMessage().GetContent()[0].GetText().GetText(); got != want {
				t.Errorf("folded %q, result %q", got, want)
			}
			if got := f.DiscardedAttempts(); !slices.Equal(got, []int32{1}) {
				t.Errorf("discarded %v, want [1]", got)
			}
			if n := uint64(len(seqs)); seqs[0] != 1 || seqs[n-1] != n || f.LastSeq() != n {
				t.Errorf("seqs %v, last %d", seqs, f.LastSeq())
			}
		})
	}
}

func TestStreamTypedErrors(t *testing.T) {
	tests := []struct {
		name      string
		req       *completionv1.CompleteRequest
		code      codes.Code
		reason    completionv1.TransitionReason
		retryable bool
		fields    int
	}{
		{"outage with RetryInfo", on("sim-large", ask("overload*20")), codes.Unavailable, completionv1.TransitionReason_TRANSITION_REASON_MODEL_ERROR, true, 0},
		{"refused by the model", ask("invalid"), codes.FailedPrecondition, completionv1.TransitionReason_TRANSITION_REASON_MODEL_ERROR, false, 0},
		{"invalid request", &completionv1.CompleteRequest{}, codes.InvalidArgument, 0, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(serve(t))
			s, err := c.Stream(ctxFor(t), tt.req)
			if err == nil {
				_, err = s.Wait()
			}
			e, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %T %v, want *Error", err, err)
			}
			if e.Code != tt.code || e.TerminalReason != tt.reason || e.Retryable != tt.retryable || len(e.FieldViolations) != tt.fields {
				t.Errorf("got %+v", e)
			}
			if tt.retryable && e.RetryDelay <= 0 {
				t.Errorf("retryable without a delay: %+v", e)
			}
			if tt.reason != 0 && (e.Result == nil || e.CompletionID == "") {
				t.Errorf("no result or id with the error: %+v", e)
			}
			if status.Code(err) != tt.code {
				t.Errorf("status.Code = %v", status.Code(err))
			}
			if st, _ := status.FromError(err); !reflect.DeepEqual(FromStatus(st).FieldViolations, e.FieldViolations) || FromStatus(st).Retryable != e.Retryable {
				t.Errorf("status.FromError lost the details: %v", st.Details())
			}
		})
	}
}

func TestCompleteTypesItsError(t *testing.T) {
	c := New(serve(t))
	resp, err := c.Complete(ctxFor(t), ask(""))
	if err != nil || resp.GetResult().GetReason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED {
		t.Fatalf("Complete: %v %v", resp, err)
	}
	_, err = c.Complete(ctxFor(t), on("sim-large", ask("prompt_too_long*3")))
	if e := AsError(err); e == nil || e.Code != codes.FailedPrecondition || e.TerminalReason != completionv1.TransitionReason_TRANSITION_REASON_PROMPT_TOO_LONG {
		t.Errorf("Complete error %v", err)
	}
}

func TestRunSessionToolLoop(t *testing.T) {
	c := New(serve(t))
	var calls []string
	var reasons []completionv1.TransitionReason
	h := SessionHandler{
		Tool: TextTool(func(_ context.Context, call *completionv1.ToolCall) (string, error) {
			calls = append(calls, call.GetId())
			if len(calls) == 2 {
				return "", errors.New("the search index is down")
			}
			return fmt.Sprintf("result %d", len(calls)), nil
		}),
		Event: func(ev *completionv1.CompletionEvent) error {
			if tr := ev.GetTransition(); tr != nil {
				reasons = append(reasons, tr.GetReason())
			}
			return nil
		},
	}
	fold, err := c.RunSession(ctxFor(t), start(tools(ask("tool_use=search,tool_use=search")), 0, false), h)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || len(fold.Turns()) != 3 {
		t.Errorf("calls %v, turns %+v", calls, fold.Turns())
	}
	want := []completionv1.TransitionReason{completionv1.TransitionReason_TRANSITION_REASON_NEXT_TURN,
		completionv1.TransitionReason_TRANSITION_REASON_NEXT_TURN, completionv1.TransitionReason_TRANSITION_REASON_COMPLETED}
	if !slices.Equal(reasons, want) {
		t.Errorf("transitions %v, want %v", reasons, want)
	}
	transcript := fold.Result().GetTranscript()
	var errorResults int
	for _, m := range transcript {
		for _, b := range m.GetContent() {
			if b.GetToolResult().GetIsError() {
				errorResults++
			}
		}
	}
	if errorResults != 1 {
		t.Errorf("%d error results in the transcript, want the failed tool's 1", errorResults)
	}
}

func TestRunSessionCancel(t *testing.T) {
	c := New(serve(t))
	h := SessionHandler{Tool: func(context.Context, *completionv1.ToolCall) (*completionv1.ToolResultBlock, error) {
		return nil, Cancel("the user pressed stop")
	}}
	fold, err := c.RunSession(ctxFor(t), start(tools(ask("tool_use=search")), 0, false), h)
	e := AsError(err)
	if e == nil || e.Code != codes.Canceled || e.TerminalReason != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_TOOLS {
		t.Fatalf("RunSession: %v", err)
	}
	if fold.Reason() != completionv1.TransitionReason_TRANSITION_REASON_ABORTED_TOOLS || e.Result == nil {
		t.Errorf("fold reason %v, error result %v", fold.Reason(), e.Result)
	}
}

func TestErrorText(t *testing.T) {
	e := FromStatus(status.New(codes.Unavailable, "down"))
	e.Reason, e.Retryable, e.RetryDelay = "MODEL_ERROR", true, 2*time.Second
	if got, want := e.Error(), "completiond: Unavailable (MODEL_ERROR): down; retry in 2s"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if FromStatus(status.New(codes.OK, "")) != nil || AsError(nil) != nil {
		t.Error("OK is not an error")
	}
}
