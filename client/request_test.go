package client

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

func TestTextBuildsTheRequest(t *testing.T) {
	user := func(text string) *completionv1.Message {
		return &completionv1.Message{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{
			{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: text}}}}}
	}
	assistant := user("earlier answer")
	assistant.Role = completionv1.Role_ROLE_ASSISTANT
	n := int32(100)
	policy := &completionv1.Policy{DisableFallback: true}
	for _, tc := range []struct {
		name string
		got  *completionv1.CompleteRequest
		want *completionv1.CompleteRequest
	}{
		{"prompt only", Text("hi"), &completionv1.CompleteRequest{Messages: []*completionv1.Message{user("hi")}}},
		{"every option", Text("hi",
			WithRoute("claude"), WithSystem("be brief"), WithHistory(user("before"), AssistantText("earlier answer")),
			WithTools(&completionv1.Tool{Name: "search"}), WithMaxOutputTokens(100), WithResumeGrace(time.Minute),
			WithMetadata(map[string]string{"a": "1"}), WithMetadata(map[string]string{"b": "2"}), WithPolicy(policy),
			WithDelivery(completionv1.DeliveryMode_DELIVERY_MODE_SETTLED)),
			&completionv1.CompleteRequest{
				Route: "claude", System: "be brief",
				Messages:        []*completionv1.Message{user("before"), assistant, user("hi")},
				Tools:           []*completionv1.Tool{{Name: "search"}},
				MaxOutputTokens: &n, ResumeGrace: durationpb.New(time.Minute),
				Metadata: map[string]string{"a": "1", "b": "2"}, Policy: policy,
				Delivery: completionv1.DeliveryMode_DELIVERY_MODE_SETTLED,
			}},
		{"options apply in order", Text("hi", WithRoute("a"), WithRoute("b")),
			&completionv1.CompleteRequest{Route: "b", Messages: []*completionv1.Message{user("hi")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !proto.Equal(tc.got, tc.want) {
				t.Errorf("got  %v\nwant %v", tc.got, tc.want)
			}
		})
	}
}

// TestTextIsAValidRequest: the server takes what Text builds and answers.
func TestTextIsAValidRequest(t *testing.T) {
	c := New(serve(t))
	s, err := c.Stream(ctxFor(t), Text("Tell me about recovery.", WithRoute("sim"),
		WithMetadata(map[string]string{"sim.faults": "rate_limit", "sim.words": "5", "sim.pace": "1ms"}), WithResumeGrace(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if f.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || !strings.Contains(f.Text(), "recovery") {
		t.Errorf("reason %v, text %q", f.Reason(), f.Text())
	}
	if got := f.Transitions()[0].GetReason(); got != completionv1.TransitionReason_TRANSITION_REASON_RETRY {
		t.Errorf("first transition %v, want RETRY", got)
	}
}
