package service

import (
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
)

func TestBadRequestsAreRefusedBeforeAnyUpstreamCall(t *testing.T) {
	env := newTestEnv(t)
	user := func(blocks ...*completionv1.ContentBlock) *completionv1.Message {
		return &completionv1.Message{Role: completionv1.Role_ROLE_USER, Content: blocks}
	}
	ok := func(mut func(r *completionv1.CompleteRequest)) *completionv1.CompleteRequest {
		r := prompt("hello", nil)
		mut(r)
		return r
	}
	tests := []struct {
		name  string
		req   *completionv1.CompleteRequest
		field string
	}{
		{"no messages", &completionv1.CompleteRequest{}, "messages"},
		{"unknown role", ok(func(r *completionv1.CompleteRequest) { r.Messages[0].Role = 7 }), "messages[0].role"},
		{"unspecified role", ok(func(r *completionv1.CompleteRequest) { r.Messages[0].Role = 0 }), "messages[0].role"},
		{"empty content", ok(func(r *completionv1.CompleteRequest) { r.Messages = append(r.Messages, user()) }), "messages[1].content"},
		{"empty text", ok(func(r *completionv1.CompleteRequest) { r.Messages[0].Content[0] = convert.TextBlock("  ") }), "messages[0].content[0].text.text"},
		{"unset block", ok(func(r *completionv1.CompleteRequest) {
			r.Messages[0].Content = append(r.Messages[0].Content, &completionv1.ContentBlock{})
		}), "messages[0].content[1]"},
		{"max tokens zero", ok(func(r *completionv1.CompleteRequest) { r.MaxOutputTokens = proto.Int32(0) }), "max_output_tokens"},
		{"max tokens negative", ok(func(r *completionv1.CompleteRequest) { r.MaxOutputTokens = proto.Int32(-5) }), "max_output_tokens"},
		{"max tokens over limit", ok(func(r *completionv1.CompleteRequest) { r.MaxOutputTokens = proto.Int32(64001) }), "max_output_tokens"},
		{"unknown route", ok(func(r *completionv1.CompleteRequest) { r.Route = "gpt-17" }), "route"},
		{"unknown fallback", ok(func(r *completionv1.CompleteRequest) { r.FallbackRoutes = []string{"sim", "nope"} }), "fallback_routes[1]"},
		{"payload over limit", ok(func(r *completionv1.CompleteRequest) {
			r.Messages[0].Content[0] = convert.TextBlock(strings.Repeat("x", 8<<20+1<<19))
		}), "messages"},
		{"invalid JSON schema", ok(func(r *completionv1.CompleteRequest) { r.OutputJsonSchema = `{"type": 12}` }), "output_json_schema"},
		{"schema not JSON", ok(func(r *completionv1.CompleteRequest) { r.OutputJsonSchema = `{type` }), "output_json_schema"},
		{"bad image type", ok(func(r *completionv1.CompleteRequest) {
			r.Messages[0].Content = append(r.Messages[0].Content, &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
				Image: &completionv1.ImageBlock{MediaType: "image/bmp", Data: []byte{1}}}})
		}), "messages[0].content[1].image.media_type"},
		{"image too large", ok(func(r *completionv1.CompleteRequest) {
			r.Messages[0].Content = append(r.Messages[0].Content, &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
				Image: &completionv1.ImageBlock{MediaType: "image/png", Data: make([]byte, 6<<20)}}})
		}), "messages[0].content[1].image.data"},
		{"first message from assistant", ok(func(r *completionv1.CompleteRequest) {
			r.Messages[0].Role = completionv1.Role_ROLE_ASSISTANT
		}), "messages[0].role"},
		{"bad fault script", ok(func(r *completionv1.CompleteRequest) { r.Metadata = map[string]string{"sim.faults": "explode"} }), "metadata[sim.faults]"},
		{"looser policy", ok(func(r *completionv1.CompleteRequest) { r.Policy = &completionv1.Policy{MaxRetries: proto.Int32(50)} }), "policy.max_retries"},
		{"backoff over limit", ok(func(r *completionv1.CompleteRequest) {
			r.Policy = &completionv1.Policy{BackoffMax: durationpb.New(1 << 40)}
		}), "policy.backoff_max"},
		{"bad tool name", ok(func(r *completionv1.CompleteRequest) { r.Tools = []*completionv1.Tool{{Name: "no spaces"}} }), "tools[0].name"},
		{"unknown delivery", ok(func(r *completionv1.CompleteRequest) { r.Delivery = 9 }), "delivery"},
		{"negative budget", ok(func(r *completionv1.CompleteRequest) { r.TokenBudget = -1 }), "token_budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, rpc := range []string{"Stream", "Complete"} {
				var st interface {
					Code() codes.Code
					Details() []any
				}
				if rpc == "Stream" {
					_, st = env.streamAll(t, tt.req)
				} else {
					_, err := env.client.Complete(t.Context(), tt.req)
					st = statusOf(err)
				}
				if st.Code() != codes.InvalidArgument {
					t.Fatalf("%s: status %v, want InvalidArgument", rpc, st.Code())
				}
				if !hasViolation(st.Details(), tt.field) {
					t.Errorf("%s: details %v lack a violation of %q", rpc, st.Details(), tt.field)
				}
			}
		})
	}
	if n := env.upstream.calls.Load(); n != 0 {
		t.Errorf("upstream was called %d times for bad requests, want 0", n)
	}
}

// hasViolation reports whether details hold a violation of field that
// says why.
func hasViolation(details []any, field string) bool { return hasViolationSaying(details, field, "") }

// hasViolationSaying reports whether details hold a violation of field
// whose description is not empty and contains says.
func hasViolationSaying(details []any, field, says string) bool {
	for _, d := range details {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field && v.GetDescription() != "" && strings.Contains(v.GetDescription(), says) {
					return true
				}
			}
		}
	}
	return false
}
