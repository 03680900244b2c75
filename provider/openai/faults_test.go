package openai_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// failureCase is a reply and the Failure it must give: every field but
// Provider and RequestID (always the same) and Message, which must contain
// message.
type failureCase struct {
	name    string
	reply   pt.Reply
	want    recovery.Failure
	message string
	text    string // text emitted before the failure
	prefill string // the request's Prefill
}

// body is an error response with a raw body.
func body(status int, s string) pt.Reply { return pt.Reply{Status: status, Body: s} }

func failureCases() []failureCase {
	stream := pt.Text("a", "b", "c", "d")
	return []failureCase{
		{name: "429 rate_limit_exceeded with Retry-After", reply: pt.RateLimited("2"),
			want:    recovery.Failure{Kind: recovery.FailRateLimit, HTTPStatus: 429, Type: "tokens", Code: "rate_limit_exceeded", RetryAfter: 2 * time.Second},
			message: "Rate limit reached"},
		{name: "429 without Retry-After", reply: pt.RateLimited(""),
			want: recovery.Failure{Kind: recovery.FailRateLimit, HTTPStatus: 429, Type: "tokens", Code: "rate_limit_exceeded"}},
		{name: "429 with retry-after-ms", reply: pt.RateLimitedMS(250),
			want: recovery.Failure{Kind: recovery.FailRateLimit, HTTPStatus: 429, Type: "tokens", Code: "rate_limit_exceeded", RetryAfter: 250 * time.Millisecond}},
		{name: "429 insufficient_quota", reply: pt.Fail(pt.Quota),
			want: recovery.Failure{Kind: recovery.FailQuota, HTTPStatus: 429, Type: "insufficient_quota", Code: "insufficient_quota"}, message: "current quota"},
		{name: "429 insufficient_quota with code null", reply: body(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":null}}`),
			want: recovery.Failure{Kind: recovery.FailQuota, HTTPStatus: 429, Type: "insufficient_quota"}},
		{name: "500 server_error", reply: pt.Fail(pt.ServerError),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 500, Type: "server_error"}},
		{name: "x-should-retry false on a 500", reply: pt.Fail(pt.ServerError).With("x-should-retry", "false"),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 500, Type: "server_error", ShouldRetry: -1}},
		{name: "503 overloaded", reply: pt.Fail(pt.Overloaded),
			want: recovery.Failure{Kind: recovery.FailOverloaded, HTTPStatus: 503, Type: "server_error"}},
		{name: "503 llama.cpp loading model", reply: pt.Fail(pt.Unavailable),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 503, Type: "unavailable_error", Code: "503"}, message: "Loading model"},
		{name: "408", reply: body(408, `{"error":{"message":"Request timed out.","type":"timeout","param":null,"code":null}}`),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 408, Type: "timeout"}},
		{name: "409", reply: body(409, `{"error":{"message":"Conflict","type":"conflict","param":null,"code":null}}`),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 409, Type: "conflict"}},
		{name: "502 from a proxy, not JSON", reply: body(502, "<html><head><title>502 Bad Gateway</title></head></html>"),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 502}, message: "502 Bad Gateway"},
		{name: "504", reply: body(504, "upstream request timeout"),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 504}},
		{name: "context_length_exceeded", reply: pt.Fail(pt.ContextExceeded),
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "invalid_request_error", Code: "context_length_exceeded", PromptTokens: 130000, ContextWindow: 128000}},
		{name: "context_length_exceeded, messages and completion", reply: pt.Fail(pt.ContextLimit),
			want: recovery.Failure{Kind: recovery.FailContextLimit, HTTPStatus: 400, Type: "invalid_request_error", Code: "context_length_exceeded", InputTokens: 124000, MaxTokens: 8000, ContextWindow: 128000}},
		{name: "context_length_exceeded, configured limit", reply: body(400, `{"error":{"message":"Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300007 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`),
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "invalid_request_error", Code: "context_length_exceeded", PromptTokens: 300007, ContextWindow: 272000}},
		{name: "vLLM request has input tokens", reply: body(400, `{"error":{"message":"This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}`),
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "BadRequestError", Code: "400", PromptTokens: 40000, ContextWindow: 32768}},
		{name: "vLLM old form, top-level object", reply: body(400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`),
			want: recovery.Failure{Kind: recovery.FailContextLimit, HTTPStatus: 400, Type: "BadRequestError", Code: "400", InputTokens: 4000, MaxTokens: 1000, ContextWindow: 4096}},
		{name: "vLLM old form, messages alone too long", reply: body(400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 4300 tokens (4200 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`),
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "BadRequestError", Code: "400", PromptTokens: 4200, InputTokens: 4200, MaxTokens: 100, ContextWindow: 4096}},
		{name: "vLLM max_tokens too large", reply: body(400, `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None","type":"BadRequestError","param":null,"code":400}}`),
			want: recovery.Failure{Kind: recovery.FailContextLimit, HTTPStatus: 400, Type: "BadRequestError", Code: "400", InputTokens: 2778, MaxTokens: 8000, ContextWindow: 4096}},
		{name: "vLLM output tokens and prompt at least", reply: body(400, `{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 1024 output tokens and your prompt contains at least 130049 input tokens, for a total of at least 131073 tokens. Please reduce the length of the input prompt or the number of requested output tokens.","type":"BadRequestError","param":"input_tokens","code":400}}`),
			want: recovery.Failure{Kind: recovery.FailContextLimit, HTTPStatus: 400, Type: "BadRequestError", Code: "400", InputTokens: 130049, MaxTokens: 1024, ContextWindow: 131072}},
		{name: "llama.cpp exceed_context_size_error", reply: body(400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`),
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "exceed_context_size_error", Code: "400", PromptTokens: 5000, ContextWindow: 4096}},
		{name: "llama.cpp request tokens exceed context size", reply: body(400, `{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}`),
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "exceed_context_size_error", Code: "400", PromptTokens: 4476, ContextWindow: 4096}},
		{name: "Azure content_filter", reply: pt.Fail(pt.ContentFilter),
			want: recovery.Failure{Kind: recovery.FailContentFilter, HTTPStatus: 400, Code: "content_filter"}},
		{name: "content_policy_violation", reply: body(400, `{"error":{"code":"content_policy_violation","message":"Your request was rejected as a result of our safety system.","param":null,"type":"invalid_request_error"}}`),
			want: recovery.Failure{Kind: recovery.FailContentFilter, HTTPStatus: 400, Type: "invalid_request_error", Code: "content_policy_violation"}},
		{name: "prefill refused through a gateway", reply: pt.Fail(pt.PrefillRefused), prefill: "The answer is",
			want: recovery.Failure{Kind: recovery.FailPrefillRejected, HTTPStatus: 400, Type: "invalid_request_error"}},
		{name: "final assistant message refused through a gateway without a prefill", reply: pt.Fail(pt.PrefillRefused),
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 400, Type: "invalid_request_error"}},
		{name: "invalid_image_format", reply: pt.Fail(pt.ImageTooLarge),
			want: recovery.Failure{Kind: recovery.FailMedia, HTTPStatus: 400, Type: "invalid_request_error", Code: "invalid_image_format"}},
		{name: "401 invalid_api_key", reply: pt.Fail(pt.BadKey),
			want: recovery.Failure{Kind: recovery.FailAuth, HTTPStatus: 401, Type: "invalid_request_error", Code: "invalid_api_key"}},
		{name: "403", reply: body(403, `{"error":{"message":"You are not allowed to sample from this model","type":"invalid_request_error","param":null,"code":null}}`),
			want: recovery.Failure{Kind: recovery.FailAuth, HTTPStatus: 403, Type: "invalid_request_error"}},
		{name: "404 model_not_found", reply: pt.Fail(pt.ModelNotFound),
			want: recovery.Failure{Kind: recovery.FailNotFound, HTTPStatus: 404, Type: "invalid_request_error", Code: "model_not_found"}},
		{name: "Ollama 404, error as a string", reply: body(404, `{"error":"model \"llama9\" not found, try pulling it first"}`),
			want: recovery.Failure{Kind: recovery.FailNotFound, HTTPStatus: 404}, message: `model "llama9" not found`},
		{name: "400 invalid_request_error", reply: body(400, `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`),
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 400, Type: "invalid_request_error", Code: "invalid_value"}},
		{name: "413", reply: body(413, `{"error":{"message":"Request too large","type":"invalid_request_error","param":null,"code":null}}`),
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 413, Type: "invalid_request_error"}},
		{name: "422 validation", reply: body(422, `{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required"}]}`),
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 422}},
		{name: "reset before headers", reply: pt.Reset(),
			want: recovery.Failure{Kind: recovery.FailConnection}},
		{name: "server_error inside the stream", reply: pt.ErrorAfter(2, pt.ServerError, stream),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 200, Type: "server_error"}, message: "Sorry about that", text: "ab"},
		{name: "overloaded inside the stream", reply: pt.ErrorAfter(1, pt.Overloaded, stream),
			want: recovery.Failure{Kind: recovery.FailOverloaded, HTTPStatus: 200, Type: "server_error"}, text: "a"},
		{name: "vLLM error inside the stream", reply: pt.Reply{SSE: sse(`{"error":{"object":"error","message":"This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}`)},
			want: recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 200, Type: "BadRequestError", Code: "400", PromptTokens: 5000, ContextWindow: 4096}},
		{name: "stream cut", reply: pt.CutAfter(2, stream),
			want: recovery.Failure{Kind: recovery.FailStreamBroken, HTTPStatus: 200}, message: "finish_reason", text: "ab"},
		{name: "reset mid-stream", reply: pt.ResetAfter(3, stream),
			want: recovery.Failure{Kind: recovery.FailStreamBroken, HTTPStatus: 200}, text: "abc"},
		{name: "malformed chunk", reply: pt.MalformedAfter(1, stream),
			want: recovery.Failure{Kind: recovery.FailStreamBroken, HTTPStatus: 200}, message: "malformed", text: "a"},
		{name: "[DONE] without a finish_reason", reply: pt.Reply{SSE: sse(`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`, `[DONE]`)},
			want: recovery.Failure{Kind: recovery.FailStreamBroken, HTTPStatus: 200}, text: "a"},
	}
}

func TestFailuresFromTheWire(t *testing.T) {
	for _, tc := range failureCases() {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Prefill = tc.prefill
			r, srv := run(t, pt.Always(tc.reply), req)
			f := r.Failure(t)
			want := tc.want
			want.Provider = "openai"
			if want.Kind != recovery.FailConnection {
				want.RequestID = "req_test_0001"
			}
			got := *f
			got.Message = ""
			if got.DeadRoute() {
				t.Errorf("a failure after %v of silence marks a dead route", got.Silence)
			}
			got.Silence = 0 // measured: a quick reset's is short, and only that matters
			if !reflect.DeepEqual(got, want) {
				t.Errorf("failure\n got %+v\nwant %+v", got, want)
			}
			if !strings.Contains(f.Message, tc.message) {
				t.Errorf("message %q does not contain %q", f.Message, tc.message)
			}
			if got := r.Text(); got != tc.text {
				t.Errorf("text before the failure = %q, want %q", got, tc.text)
			}
			if n := srv.Count(); n != 1 {
				t.Errorf("server saw %d requests: the SDK retried", n)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	p, err := openai.New(openai.Config{BaseURL: pt.RefusedURL(t) + "/v1", APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	f := pt.Run(t, p, newRequest()).Failure(t)
	if f.Kind != recovery.FailConnection || f.HTTPStatus != 0 || !strings.Contains(f.Message, "refused") {
		t.Errorf("failure = %+v", f)
	}
}

func TestTimeouts(t *testing.T) {
	slow := pt.Text("a", "b", "c", "d", "e", "f")
	for _, tc := range []struct {
		name   string
		reply  pt.Reply
		limits provider.Timeouts
		phase  recovery.TimeoutPhase
		status int
		text   string
	}{
		{name: "no headers", reply: pt.Hang(), limits: provider.Timeouts{Headers: 100 * time.Millisecond, FirstToken: 2 * time.Second},
			phase: recovery.TimeoutHeaders},
		{name: "no first token", reply: pt.SlowFirstToken(2*time.Second, slow), limits: provider.Timeouts{Headers: time.Second, FirstToken: 150 * time.Millisecond},
			phase: recovery.TimeoutFirstToken, status: 200},
		{name: "stream idle", reply: pt.StallAfter(2, slow), limits: provider.Timeouts{FirstToken: time.Second, Idle: 150 * time.Millisecond},
			phase: recovery.TimeoutIdle, status: 200, text: "ab"},
		{name: "total", reply: pt.Reply{Answer: slow, TokenDelay: 60 * time.Millisecond}, limits: provider.Timeouts{Idle: time.Second, Total: 200 * time.Millisecond},
			phase: recovery.TimeoutTotal, status: 200, text: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Timeouts = tc.limits
			r, srv := run(t, pt.Always(tc.reply), req)
			f := r.Failure(t)
			if f.Kind != recovery.FailTimeout || f.Timeout != tc.phase || f.HTTPStatus != tc.status || f.Provider != "openai" {
				t.Errorf("failure = %+v, want a %v timeout with status %d", f, tc.phase, tc.status)
			}
			// What came before the limit, and never the whole answer.
			if got := r.Text(); !strings.HasPrefix(got, tc.text) || !strings.HasPrefix("abcdef", got) || got == "abcdef" {
				t.Errorf("text = %q, want %q and maybe more, not all", got, tc.text)
			}
			if r.Took > 1500*time.Millisecond {
				t.Errorf("took %v", r.Took)
			}
			srv.Request(t, 1).WaitGone(t, 2*time.Second)
		})
	}
}

func TestTheKeyNeverLeaks(t *testing.T) {
	echo := pt.Reply{Error: &pt.APIError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key",
		Message: "Incorrect API key provided: " + apiKey + ". Authorization: Bearer " + apiKey}}
	replies := []pt.Reply{echo, pt.ErrorAfter(1, pt.BadKey, pt.Text("a", "b"))}
	for _, tc := range failureCases() {
		replies = append(replies, tc.reply)
	}
	for _, reply := range replies {
		r, srv := run(t, pt.Always(reply), newRequest())
		if got := srv.Request(t, 1).Header.Get("Authorization"); got != "Bearer "+apiKey {
			t.Fatalf("the key was not sent (Authorization %q): the test proves nothing", got)
		}
		f := r.Failure(t)
		for _, s := range []string{r.Err.Error(), f.Error(), f.Message, f.Type, f.Code, f.RequestID} {
			if strings.Contains(s, apiKey) || strings.Contains(s, "SECRET") {
				t.Errorf("the key leaked: %q", s)
			}
		}
	}
}

func TestASlowReaderIsNotAnIdleUpstream(t *testing.T) {
	const idle = 100 * time.Millisecond
	// The upstream keeps sending; the caller blocks on the first chunk for
	// 3× the idle limit (gRPC back-pressure), then reads at full speed.
	reply := pt.Reply{Answer: pt.Text("a", "b", "c", "d", "e", "f"), TokenDelay: 10 * time.Millisecond}
	srv := pt.NewOpenAI(t, pt.Always(reply))
	p := newProvider(t, srv, openai.Config{})
	req := newRequest()
	req.Timeouts = provider.Timeouts{FirstToken: time.Second, Idle: idle, Total: 3 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var text strings.Builder
	slow := true
	_, err := p.Stream(ctx, req, func(c provider.Chunk) error {
		if slow {
			slow = false
			t := time.NewTimer(3 * idle)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		text.WriteString(c.Text)
		return nil
	})
	if err != nil {
		t.Fatalf("err = %v: a slow reader was taken for a silent upstream", err)
	}
	if text.String() != "abcdef" {
		t.Errorf("text = %q", text.String())
	}
}

// TestRejectedImagesAreLocated: an image the upstream rejects, with the
// error's exact body, is found in the request — by the path in its param
// or message, counted in the body's messages (here a system prompt first,
// and a tool result that is a message of its own), or by its URL in the
// message — and named in Failure.MediaBlocks; an error that names none
// leaves them empty (every image is stripped then).
func TestRejectedImagesAreLocated(t *testing.T) {
	ref := func(m, b int) recovery.BlockRef { return recovery.BlockRef{Message: m, Block: b} }
	img := func(u string) recovery.Block { return recovery.Block{Kind: recovery.BlockImage, URL: u} }
	req := newRequest()
	req.System = "Be brief."
	req.Messages = []recovery.Message{
		{Role: recovery.RoleUser, Blocks: []recovery.Block{recovery.TextBlock("Compare."),
			img("https://example.com/a.png"), img("https://example.com/photos/20250503_162129.jpg?ex=1")}},
		{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
			{Kind: recovery.BlockToolUse, ToolUseID: "call_1", ToolName: "look", ToolInput: []byte(`{}`)}}},
		{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: recovery.BlockToolResult, ToolUseID: "call_1", Text: "seen"},
			{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")}}},
	}
	for _, tc := range []struct {
		name  string
		reply pt.Reply
		want  []recovery.BlockRef
	}{
		{"invalid_image, a param path", body(400, `{"error":{"message":"Invalid image.","type":"invalid_request_error","param":"messages.[1].content.[2].image_url","code":"invalid_image"}}`),
			[]recovery.BlockRef{ref(0, 2)}},
		{"a bracket path past a tool message", body(400, `{"error":{"message":"Invalid image.","type":"invalid_request_error","param":"messages[4].content[0]","code":"invalid_image"}}`),
			[]recovery.BlockRef{ref(2, 1)}},
		{"timeout downloading a URL", body(400, `{"error":{"message":"Timeout while downloading https://example.com/a.png.","type":"invalid_request_error","param":null,"code":"invalid_image_url"}}`),
			[]recovery.BlockRef{ref(0, 1)}},
		{"error downloading a URL", body(400, `{"error":{"message":"Error while downloading https://example.com/a.png.","type":"invalid_request_error","param":null,"code":"invalid_image_url"}}`),
			[]recovery.BlockRef{ref(0, 1)}},
		{"timeout naming a file", body(400, `{"error":{"message":"Timeout while downloading 20250503_162129.jpg.","type":"invalid_request_error","param":null,"code":"invalid_image_url"}}`),
			[]recovery.BlockRef{ref(0, 2)}},
		{"vLLM's older top-level error", body(400, `{"object":"error","message":"Could not process image https://example.com/a.png.","type":"BadRequestError","param":null,"code":400}`),
			[]recovery.BlockRef{ref(0, 1)}},
		{"invalid_image naming nothing", body(400, `{"error":{"message":"Invalid image.","type":"invalid_request_error","param":null,"code":"invalid_image"}}`),
			nil},
		{"a path to a text part", body(400, `{"error":{"message":"Invalid image.","type":"invalid_request_error","param":"messages[1].content[0]","code":"invalid_image"}}`),
			nil},
		{"inside the stream", pt.Reply{SSE: sse(`{"error":{"message":"Invalid image.","type":"invalid_request_error","param":"messages[1].content[1]","code":"invalid_image"}}`)},
			[]recovery.BlockRef{ref(0, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srv := run(t, pt.Always(tc.reply), req)
			f := r.Failure(t)
			if f.Kind != recovery.FailMedia || !reflect.DeepEqual(f.MediaBlocks, tc.want) {
				t.Errorf("failure %v, media blocks %v; want FailMedia, %v", f.Kind, f.MediaBlocks, tc.want)
			}
			if n := srv.Count(); n != 1 {
				t.Errorf("server saw %d requests", n)
			}
		})
	}
}

// TestOnlyMediaFailuresNameBlocks: a failure of another kind names no
// block, whatever its error says.
func TestOnlyMediaFailuresNameBlocks(t *testing.T) {
	req := newRequest()
	req.Messages = []recovery.Message{{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: recovery.BlockImage, URL: "https://example.com/a.png"}}}}
	r, _ := run(t, pt.Always(body(400, `{"error":{"message":"Invalid 'messages[0].content[0]': https://example.com/a.png.","type":"invalid_request_error","param":"messages[0].content[0]","code":"invalid_value"}}`)), req)
	if f := r.Failure(t); f.Kind != recovery.FailInvalidRequest || f.MediaBlocks != nil {
		t.Errorf("failure %v, media blocks %v", f.Kind, f.MediaBlocks)
	}
}
