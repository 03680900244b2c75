package relay

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/bench/mock"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/testkit"
)

// client serves a relay to the mock for model and returns a client of it.
func client(t *testing.T, model string) completionv1.CompletionClient {
	t.Helper()
	m := mock.New()
	up := httptest.NewServer(m)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	completionv1.RegisterCompletionServer(g, New(Config{BaseURL: up.URL + "/v1", Model: model, APIKey: "sk-test"}))
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); g.Stop(); m.Close(); up.Close() })
	return completionv1.NewCompletionClient(conn)
}

// events runs one Stream and returns its events and its end.
func events(t *testing.T, c completionv1.CompletionClient) ([]*completionv1.CompletionEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Stream(ctx, &completionv1.CompleteRequest{Messages: []*completionv1.Message{{
		Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{
			Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "hi"}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Drain(st)
}

// TestRelayForwardsTheAnswer: started, one delta per upstream token,
// usage, a terminal COMPLETED and the result with the whole answer, seq
// 1, 2, 3 … — what completiond sends for a clean answer.
func TestRelayForwardsTheAnswer(t *testing.T) {
	evs, err := events(t, client(t, mock.Spec{Tokens: 4}.Model()))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1+4+3 {
		t.Fatalf("%d events, want 8: %v", len(evs), evs)
	}
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			t.Errorf("event %d has seq %d", i, ev.GetSeq())
		}
	}
	var text strings.Builder
	for _, ev := range evs[1:5] {
		text.WriteString(ev.GetDelta().GetText())
	}
	tr, res := evs[6].GetTransition(), evs[7].GetResult()
	switch {
	case evs[0].GetStarted() == nil:
		t.Error("the first event is not started")
	case text.String() != strings.Repeat(mock.Token, 4):
		t.Errorf("deltas say %q", text.String())
	case evs[5].GetUsage().GetOutputTokens() != 4 || evs[5].GetUsage().GetInputTokens() != mock.InputTokens:
		t.Errorf("usage %v", evs[5].GetUsage())
	case tr.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || !tr.GetTerminal():
		t.Errorf("transition %v, want a terminal COMPLETED", tr)
	case res.GetMessage().GetContent()[0].GetText().GetText() != text.String() || res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN:
		t.Errorf("result %v", res)
	}
}

// TestRelayDoesNotRecover: an upstream failure ends the RPC UNAVAILABLE,
// after one call.
func TestRelayDoesNotRecover(t *testing.T) {
	_, err := events(t, client(t, "tokens=0"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want UNAVAILABLE", err)
	}
}
