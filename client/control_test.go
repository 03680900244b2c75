package client

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// TestCancel: Cancel ends a running stream from another call: the stream
// ends with the typed ABORTED_STREAMING error, Cancel answers how it ended,
// again AlreadyEnded; an unknown id is a typed NOT_FOUND.
func TestCancel(t *testing.T) {
	c := New(serve(t))
	ctx := ctxFor(t)
	req := ask("")
	req.Metadata[sim.MetaWords], req.Metadata[sim.MetaPace] = "10000", "20ms"
	s, err := c.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for s.Fold().Text() == "" {
		if _, err := s.Recv(); err != nil {
			t.Fatalf("before a delta: %v", err)
		}
	}
	id := s.Fold().CompletionID()
	aborted := completionv1.TransitionReason_TRANSITION_REASON_ABORTED_STREAMING
	for _, already := range []bool{false, true} {
		resp, err := c.Cancel(ctx, id)
		if err != nil || resp.GetReason() != aborted || codes.Code(resp.GetCode()) != codes.Canceled || resp.GetAlreadyEnded() != already {
			t.Fatalf("Cancel: %v, %v; want %v, CANCELLED, already ended %v", resp, err, aborted, already)
		}
	}
	if _, err := s.Wait(); AsError(err).TerminalReason != aborted || AsError(err).Code != codes.Canceled {
		t.Errorf("the stream ended %v, want %v", err, aborted)
	}
	_, err = c.Cancel(ctx, "cmpl_000000000000000000000000")
	if e, ok := errors.AsType[*Error](err); !ok || e.Code != codes.NotFound || e.Reason != "COMPLETION_NOT_FOUND" || e.CompletionID == "" {
		t.Errorf("Cancel of an unknown id: %#v", err)
	}
	if _, err := c.Cancel(ctx, "nope"); AsError(err).Code != codes.InvalidArgument || len(AsError(err).FieldViolations) != 1 {
		t.Errorf("Cancel of a malformed id: %v", err)
	}
}

// TestListRoutes: the server's routes, sorted, the default flagged, each
// with its capabilities.
func TestListRoutes(t *testing.T) {
	c := New(serve(t))
	routes, err := c.ListRoutes(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range routes {
		names = append(names, r.GetName())
		if r.GetIsDefault() != (r.GetName() == "sim") || r.GetCapabilities().GetMaxStopSequences() == 0 {
			t.Errorf("%s: %v", r.GetName(), r)
		}
	}
	if want := []string{"sim", "sim-fallback", "sim-large", "sim-noprefill", "sim-small"}; !slices.Equal(names, want) {
		t.Errorf("routes %v, want %v", names, want)
	}
}
