package anthropic_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// failureCase is a reply and the Failure it must give: every field but Message, which must
// contain message.
type failureCase struct {
	name    string
	reply   pt.Reply
	want    recovery.Failure
	message string
	text    string // text emitted before the failure
	prefill string // the request's Prefill
}

// trailingWhitespace is Anthropic's refusal of a final assistant message
// ending in whitespace, as the API sends it.
const trailingWhitespace = `{"type":"error","error":{"type":"invalid_request_error","message":"messages: final assistant content cannot end with trailing whitespace"},"request_id":"req_011CUvdPgnreuT3DxJPFAoqt"}`

// requestID is the id the fault server gives its first request.
const requestID = "req_test_0001"

func failureCases() []failureCase {
	stream := pt.Text("a", "b", "c", "d")
	return []failureCase{
		{name: "429 with Retry-After seconds", reply: pt.RateLimited("7"),
			want:    recovery.Failure{Kind: recovery.FailRateLimit, HTTPStatus: 429, Type: "rate_limit_error", RetryAfter: 7 * time.Second, ShouldRetry: 1},
			message: "exceed the rate limit"},
		{name: "429 without Retry-After", reply: pt.RateLimited(""),
			want: recovery.Failure{Kind: recovery.FailRateLimit, HTTPStatus: 429, Type: "rate_limit_error", ShouldRetry: 1}},
		{name: "429 with retry-after-ms", reply: pt.RateLimitedMS(1500).With("retry-after", "9"),
			want: recovery.Failure{Kind: recovery.FailRateLimit, HTTPStatus: 429, Type: "rate_limit_error", RetryAfter: 1500 * time.Millisecond, ShouldRetry: 1}},
		{name: "500 api_error", reply: pt.Fail(pt.ServerError),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 500, Type: "api_error", ShouldRetry: 1}, message: "Internal server error"},
		{name: "529 overloaded_error", reply: pt.Fail(pt.Overloaded),
			want: recovery.Failure{Kind: recovery.FailOverloaded, HTTPStatus: 529, Type: "overloaded_error", ShouldRetry: 1}, message: "Overloaded"},
		{name: "529 with x-should-retry false stays an overload", reply: pt.Fail(pt.Overloaded).With("x-should-retry", "false"),
			want: recovery.Failure{Kind: recovery.FailOverloaded, HTTPStatus: 529, Type: "overloaded_error", ShouldRetry: -1}},
		{name: "500 with x-should-retry false stays a server error", reply: pt.Fail(pt.ServerError).With("x-should-retry", "false"),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 500, Type: "api_error", ShouldRetry: -1}},
		{name: "503 not overloaded", reply: pt.Fail(pt.Unavailable),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 503, Type: "api_error", ShouldRetry: 1}},
		{name: "503 overloaded in body", reply: pt.Reply{Status: 503, Body: `{"type":"error","error":{"type":"api_error","message":"The service is temporarily overloaded"}}`},
			want: recovery.Failure{Kind: recovery.FailOverloaded, HTTPStatus: 503, Type: "api_error"}},
		{name: "prompt too long", reply: pt.Fail(pt.ContextExceeded),
			want:    recovery.Failure{Kind: recovery.FailPromptTooLong, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1, PromptTokens: 210000, ContextWindow: 200000},
			message: "prompt is too long"},
		{name: "input plus max_tokens over the limit", reply: pt.Fail(pt.ContextLimit),
			want: recovery.Failure{Kind: recovery.FailContextLimit, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1, InputTokens: 190000, MaxTokens: 64000, ContextWindow: 200000}},
		{name: "content filtering", reply: pt.Fail(pt.ContentFilter),
			want: recovery.Failure{Kind: recovery.FailContentFilter, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1}},
		{name: "prefill refused", reply: pt.Fail(pt.PrefillRefused), prefill: "The answer is",
			want: recovery.Failure{Kind: recovery.FailPrefillRejected, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1}},
		{name: "final assistant message refused without a prefill", reply: pt.Fail(pt.PrefillRefused),
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1}},
		{name: "prefill ending in whitespace refused", reply: pt.Reply{Status: 400, Body: trailingWhitespace}, prefill: "The answer is",
			want: recovery.Failure{Kind: recovery.FailPrefillRejected, HTTPStatus: 400, Type: "invalid_request_error"}},
		{name: "final assistant whitespace refused without a prefill", reply: pt.Reply{Status: 400, Body: trailingWhitespace},
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 400, Type: "invalid_request_error"}},
		{name: "prefill refused inside the stream", reply: pt.ErrorAfter(0, pt.PrefillRefused, stream), prefill: "The answer is",
			want: recovery.Failure{Kind: recovery.FailPrefillRejected, HTTPStatus: 200, Type: "invalid_request_error"}},
		{name: "image over 5 MB", reply: pt.Fail(pt.ImageTooLarge),
			want: recovery.Failure{Kind: recovery.FailMedia, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1}, message: "image exceeds 5 MB maximum"},
		{name: "image not processed", reply: pt.Reply{Status: 400, Body: `{"type":"error","error":{"type":"invalid_request_error","message":"Could not process image"},"request_id":"req_011CTgbfPobaTfjRizwmWNxr"}`},
			want: recovery.Failure{Kind: recovery.FailMedia, HTTPStatus: 400, Type: "invalid_request_error"}},
		{name: "credit balance too low", reply: pt.Fail(pt.Quota),
			want: recovery.Failure{Kind: recovery.FailQuota, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: -1}},
		{name: "401 authentication_error", reply: pt.Fail(pt.BadKey),
			want: recovery.Failure{Kind: recovery.FailAuth, HTTPStatus: 401, Type: "authentication_error", ShouldRetry: -1}},
		{name: "403 permission_error", reply: pt.Reply{Error: &pt.APIError{Status: 403, Type: "permission_error", Message: "Your API key does not have permission to use the specified resource."}},
			want: recovery.Failure{Kind: recovery.FailAuth, HTTPStatus: 403, Type: "permission_error"}},
		{name: "404 not_found_error", reply: pt.Fail(pt.ModelNotFound),
			want: recovery.Failure{Kind: recovery.FailNotFound, HTTPStatus: 404, Type: "not_found_error", ShouldRetry: -1}},
		{name: "400 invalid_request_error", reply: pt.Reply{Error: &pt.APIError{Status: 400, Type: "invalid_request_error", Message: "max_tokens: Field required"}},
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 400, Type: "invalid_request_error"}},
		{name: "413 request_too_large", reply: pt.Reply{Error: &pt.APIError{Status: 413, Type: "request_too_large", Message: "Request exceeds the maximum size"}},
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 413, Type: "request_too_large"}},
		{name: "x-should-retry true on a 400", reply: pt.Reply{Error: &pt.APIError{Status: 400, Type: "invalid_request_error", Message: "try me again"}}.With("x-should-retry", "true"),
			want: recovery.Failure{Kind: recovery.FailInvalidRequest, HTTPStatus: 400, Type: "invalid_request_error", ShouldRetry: 1}},
		{name: "502 from a proxy, not JSON", reply: pt.Reply{Status: 502, Body: "<html><body><h1>502 Bad Gateway</h1></body></html>"},
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 502}, message: "502 Bad Gateway"},
		{name: "reset before headers", reply: pt.Reset(),
			want: recovery.Failure{Kind: recovery.FailConnection}},
		{name: "overloaded_error inside the stream", reply: pt.ErrorAfter(2, pt.Overloaded, stream),
			want: recovery.Failure{Kind: recovery.FailOverloaded, HTTPStatus: 200, Type: "overloaded_error"}, message: "Overloaded", text: "ab"},
		{name: "api_error inside the stream", reply: pt.ErrorAfter(1, pt.ServerError, stream),
			want: recovery.Failure{Kind: recovery.FailServer, HTTPStatus: 200, Type: "api_error"}, text: "a"},
		{name: "stream cut", reply: pt.CutAfter(2, stream),
			want: recovery.Failure{Kind: recovery.FailStreamBroken, HTTPStatus: 200}, message: "message_stop", text: "ab"},
		{name: "reset mid-stream", reply: pt.ResetAfter(3, stream),
			want: recovery.Failure{Kind: recovery.FailStreamBroken, HTTPStatus: 200}, text: "abc"},
		{name: "malformed chunk", reply: pt.MalformedAfter(1, stream),
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
			want.Provider = "anthropic"
			if want.Kind != recovery.FailConnection {
				want.RequestID = requestID
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
	p, err := newRefusing(t)
	if err != nil {
		t.Fatal(err)
	}
	r := pt.Run(t, p, newRequest())
	f := r.Failure(t)
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
			if f.Kind != recovery.FailTimeout || f.Timeout != tc.phase || f.HTTPStatus != tc.status || f.Provider != "anthropic" {
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

func TestSteadyTokensAreNotIdle(t *testing.T) {
	req := newRequest()
	// The stream outlasts the idle limit, but no gap does.
	req.Timeouts = provider.Timeouts{FirstToken: time.Second, Idle: 250 * time.Millisecond, Total: 3 * time.Second}
	reply := pt.Reply{Answer: pt.Text("a", "b", "c", "d", "e", "f", "g", "h"), TokenDelay: 50 * time.Millisecond}
	r, _ := run(t, pt.Always(reply), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Text() != "abcdefgh" {
		t.Errorf("text = %q", r.Text())
	}
}

func TestTheKeyNeverLeaks(t *testing.T) {
	echo := pt.Reply{Error: &pt.APIError{Status: 401, Type: "authentication_error",
		Message: "invalid x-api-key: " + apiKey + " (Authorization: Bearer " + apiKey + ")"}}
	replies := []pt.Reply{echo, pt.ErrorAfter(0, pt.BadKey, pt.Text("a")).With("x-echo", apiKey)}
	for _, tc := range failureCases() {
		replies = append(replies, tc.reply)
	}
	for _, reply := range replies {
		r, srv := run(t, pt.Always(reply), newRequest())
		if got := srv.Request(t, 1).Header.Get("x-api-key"); got != apiKey {
			t.Fatalf("the key was not sent (x-api-key %q): the test proves nothing", got)
		}
		if r.Err == nil {
			t.Fatal("no error")
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
	srv := pt.NewAnthropic(t, pt.Always(reply))
	p := newProvider(t, srv)
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
