package classify

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/completiond/completiond/recovery"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the fixed clock of these tests.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testClassifier() *Classifier {
	return &Classifier{Provider: "test", RequestIDHeader: "request-id", Secrets: []string{"sk-test-SECRET-123"}, Now: func() time.Time { return now }}
}

// kindOnly is a Failure reduced to what the status table decides.
type kindOnly struct {
	kind                       recovery.FailureKind
	prompt, input, max, window int
	errType, code              string
}

func reduce(f *recovery.Failure) kindOnly {
	return kindOnly{f.Kind, f.PromptTokens, f.InputTokens, f.MaxTokens, f.ContextWindow, f.Type, f.Code}
}

func TestStatusRows(t *testing.T) {
	for status, want := range map[int]recovery.FailureKind{
		400: recovery.FailInvalidRequest,
		401: recovery.FailAuth,
		402: recovery.FailQuota,
		403: recovery.FailAuth,
		404: recovery.FailNotFound,
		408: recovery.FailServer,
		409: recovery.FailServer,
		413: recovery.FailInvalidRequest,
		418: recovery.FailInvalidRequest,
		422: recovery.FailInvalidRequest,
		429: recovery.FailRateLimit,
		500: recovery.FailServer,
		502: recovery.FailServer,
		503: recovery.FailServer,
		504: recovery.FailServer,
		529: recovery.FailOverloaded,
		599: recovery.FailServer,
	} {
		f := testClassifier().HTTP(status, http.Header{}, nil)
		if f.Kind != want || f.HTTPStatus != status {
			t.Errorf("status %d: %v, want %v", status, f.Kind, want)
		}
	}
}

func TestBodyRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   kindOnly
	}{
		{"anthropic overloaded on 529", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			kindOnly{kind: recovery.FailOverloaded, errType: "overloaded_error"}},
		{"anthropic overloaded_error on a 500", 500, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			kindOnly{kind: recovery.FailOverloaded, errType: "overloaded_error"}},
		{"503 saying overloaded", 503, `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`,
			kindOnly{kind: recovery.FailOverloaded, errType: "server_error"}},
		{"anthropic rate_limit_error", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`,
			kindOnly{kind: recovery.FailRateLimit, errType: "rate_limit_error"}},
		{"openai insufficient_quota on 429", 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			kindOnly{kind: recovery.FailQuota, errType: "insufficient_quota", code: "insufficient_quota"}},
		{"anthropic billing_error", 402, `{"type":"error","error":{"type":"billing_error","message":"Billing issue"}}`,
			kindOnly{kind: recovery.FailQuota, errType: "billing_error"}},
		{"anthropic timeout_error", 504, `{"type":"error","error":{"type":"timeout_error","message":"Request timed out"}}`,
			kindOnly{kind: recovery.FailServer, errType: "timeout_error"}},
		{"anthropic prompt too long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`,
			kindOnly{kind: recovery.FailPromptTooLong, prompt: 210000, window: 200000, errType: "invalid_request_error"}},
		{"anthropic context limit", 400, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again\"}}",
			kindOnly{kind: recovery.FailContextLimit, input: 178959, max: 64000, window: 200000, errType: "invalid_request_error"}},
		{"anthropic context limit without backticks", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and max_tokens exceed context limit: 90402 + 116650 > 204648, decrease input length or max_tokens and try again"}}`,
			kindOnly{kind: recovery.FailContextLimit, input: 90402, max: 116650, window: 204648, errType: "invalid_request_error"}},
		{"anthropic image dimensions", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.7.content.2.image.source.base64.data: At least one of the image dimensions exceed max allowed size: 8000 pixels"}}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error"}},
		{"anthropic document", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.3.document.source.base64.data: The PDF specified was not valid."},"request_id":"req_011CUvdPgnreuT3DxJPFAoqt"}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error"}},
		{"anthropic document by URL", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.0.document.source.url: Unable to download the file. Please verify the URL and try again."}}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error"}},
		{"openai invalid image data", 400, `{"error":{"message":"The image data you provided does not represent a valid image. Please check your input and try again with one of the supported image formats: ['image/jpeg', 'image/png', 'image/gif', 'image/webp'].","type":"invalid_request_error","param":"input","code":"invalid_value"}}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error", code: "invalid_value"}},
		{"openai invalid image", 400, `{"error":{"message":"Invalid image.","type":"invalid_request_error","param":null,"code":"invalid_image"}}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error", code: "invalid_image"}},
		{"openai image URL timed out", 400, `{"error":{"message":"Timeout while downloading https://example.com/a.png.","type":"invalid_request_error","param":null,"code":"invalid_image_url"}}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error", code: "invalid_image_url"}},
		{"openai image URL not fetched", 400, `{"error":{"message":"Error while downloading https://example.com/a.png.","type":"invalid_request_error","param":null,"code":"invalid_image_url"}}`,
			kindOnly{kind: recovery.FailMedia, errType: "invalid_request_error", code: "invalid_image_url"}},
		{"openai invalid_prompt", 400, `{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy.","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}`,
			kindOnly{kind: recovery.FailContentFilter, errType: "invalid_request_error", code: "invalid_prompt"}},
		{"openai 401 says invalid_request_error", 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			kindOnly{kind: recovery.FailAuth, errType: "invalid_request_error", code: "invalid_api_key"}},
		{"context_length_exceeded in other words", 400, `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
			kindOnly{kind: recovery.FailPromptTooLong, errType: "invalid_request_error", code: "context_length_exceeded"}},
		{"llama.cpp, newest wording", 400, `{"error":{"code":400,"message":"request (9000 tokens) exceeds context size (8192 tokens)","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}`,
			kindOnly{kind: recovery.FailPromptTooLong, prompt: 9000, window: 8192, errType: "exceed_context_size_error", code: "400"}},
		{"llama.cpp without the type", 400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"invalid_request_error"}}`,
			kindOnly{kind: recovery.FailPromptTooLong, errType: "invalid_request_error", code: "400"}},
		{"empty body", 400, ``, kindOnly{kind: recovery.FailInvalidRequest}},
		{"plain text", 503, `upstream connect error or disconnect/reset before headers. reset reason: connection termination`,
			kindOnly{kind: recovery.FailServer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reduce(testClassifier().HTTP(tc.status, http.Header{}, []byte(tc.body))); got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestInStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want recovery.FailureKind
	}{
		{"anthropic overloaded_error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, recovery.FailOverloaded},
		{"anthropic api_error", `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, recovery.FailServer},
		{"openai server_error", `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`, recovery.FailServer},
		{"unknown error", `{"error":{"message":"something odd"}}`, recovery.FailServer},
		{"not JSON", `oops`, recovery.FailServer},
		{"vLLM error with its status", `{"error":{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}}`, recovery.FailInvalidRequest},
		{"llama.cpp 500", `{"error":{"code":500,"message":"Jinja Exception","type":"server_error"}}`, recovery.FailServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testClassifier().InStream(200, http.Header{"Request-Id": {"req_1"}}, []byte(tc.data))
			if f.Kind != tc.want || f.HTTPStatus != 200 || f.RequestID != "req_1" {
				t.Errorf("got %+v, want %v", f, tc.want)
			}
		})
	}
}

func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
		after  time.Duration
		retry  int
	}{
		{"nothing", http.Header{}, 0, 0},
		{"retry-after seconds", http.Header{"Retry-After": {"30"}}, 30 * time.Second, 0},
		{"retry-after fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, 0},
		{"retry-after HTTP date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, 0},
		{"retry-after date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, 0},
		{"retry-after garbage", http.Header{"Retry-After": {"soon"}}, 0, 0},
		{"retry-after negative", http.Header{"Retry-After": {"-3"}}, 0, 0},
		{"retry-after-ms wins", http.Header{"Retry-After": {"30"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond, 0},
		{"retry-after-ms garbage falls back", http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"x"}}, 2 * time.Second, 0},
		{"x-should-retry true", http.Header{"X-Should-Retry": {"true"}}, 0, 1},
		{"x-should-retry false", http.Header{"X-Should-Retry": {"false"}}, 0, -1},
		{"x-should-retry other", http.Header{"X-Should-Retry": {"maybe"}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testClassifier().HTTP(429, tc.header, nil)
			if f.RetryAfter != tc.after || f.ShouldRetry != tc.retry {
				t.Errorf("RetryAfter %v ShouldRetry %d, want %v %d", f.RetryAfter, f.ShouldRetry, tc.after, tc.retry)
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	c := testClassifier()
	body := []byte(`{"type":"error","error":{"type":"api_error","message":"x"},"request_id":"req_body"}`)
	if f := c.HTTP(500, http.Header{"Request-Id": {"req_header"}}, body); f.RequestID != "req_header" {
		t.Errorf("header id: %q", f.RequestID)
	}
	if f := c.HTTP(500, http.Header{}, body); f.RequestID != "req_body" {
		t.Errorf("body id: %q", f.RequestID)
	}
}

func TestConnectionAndBrokenMessagesHaveNoURL(t *testing.T) {
	c := testClassifier()
	err := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/messages?api-key=hunter2hunter2", Err: errors.New("connect: connection refused")}
	if f := c.Connection(err); f.Kind != recovery.FailConnection || f.Message != "connect: connection refused" {
		t.Errorf("connection: %+v", f)
	}
	if f := c.Broken(200, http.Header{}, nil); f.Kind != recovery.FailStreamBroken || f.Message == "" {
		t.Errorf("broken: %+v", f)
	}
}

// TestShouldRetryFalseKeepsTheKind: x-should-retry: false is reported
// (ShouldRetry -1) but does not change what the status says; an outage stays
// an outage and the recovery machine decides.
func TestShouldRetryFalseKeepsTheKind(t *testing.T) {
	noRetry := http.Header{"X-Should-Retry": {"false"}}
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   recovery.FailureKind
	}{
		{"529 overloaded_error", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, recovery.FailOverloaded},
		{"529 without a body", 529, ``, recovery.FailOverloaded},
		{"500 api_error", 500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, recovery.FailServer},
		{"500 without a body", 500, ``, recovery.FailServer},
		{"502 from a proxy", 502, `<html>502 Bad Gateway</html>`, recovery.FailServer},
		{"503 overloaded", 503, `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`, recovery.FailOverloaded},
		{"429 rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, recovery.FailRateLimit},
		{"400 invalid request", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, recovery.FailInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testClassifier().HTTP(tc.status, noRetry, []byte(tc.body))
			if f.Kind != tc.want || f.ShouldRetry != -1 || f.HTTPStatus != tc.status {
				t.Errorf("kind %v, ShouldRetry %d, status %d; want %v, -1, %d", f.Kind, f.ShouldRetry, f.HTTPStatus, tc.want, tc.status)
			}
		})
	}
	t.Run("overloaded_error inside a 200 stream", func(t *testing.T) {
		f := testClassifier().InStream(200, noRetry, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
		if f.Kind != recovery.FailOverloaded || f.ShouldRetry != -1 {
			t.Errorf("kind %v, ShouldRetry %d", f.Kind, f.ShouldRetry)
		}
	})
}
