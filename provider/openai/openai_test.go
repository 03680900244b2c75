package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiKey is recognisable, so that a leak of it anywhere is found.
const apiKey = "sk-test-SECRET-123"

func newProvider(t *testing.T, srv *pt.Server, cfg openai.Config) *openai.Provider {
	t.Helper()
	cfg.BaseURL, cfg.APIKey, cfg.HTTPClient = srv.URL, apiKey, srv.Client()
	p, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newRequest() *provider.Request {
	return &provider.Request{
		Attempt:   1,
		Model:     "gpt-test",
		MaxTokens: 1024,
		Messages:  []recovery.Message{recovery.UserText("Say hello.")},
	}
}

// run streams req against a server answering with script.
func run(t *testing.T, script pt.Script, req *provider.Request) (pt.Result, *pt.Server) {
	t.Helper()
	srv := pt.NewOpenAI(t, script)
	return pt.Run(t, newProvider(t, srv, openai.Config{}), req), srv
}

// sse frames chunks as data: lines.
func sse(chunks ...string) string {
	var s string
	for _, c := range chunks {
		s += "data: " + c + "\n\n"
	}
	return s
}

func TestKind(t *testing.T) {
	p, err := openai.New(openai.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Kind(); got != "openai" {
		t.Fatalf("Kind() = %q", got)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, base := range []string{"ftp://example.com", "://nope", "localhost:8080/v1"} {
		if _, err := openai.New(openai.Config{BaseURL: base}); err == nil {
			t.Errorf("New(%q) succeeded", base)
		}
	}
}

func TestStreamsTextWithUsageAndModel(t *testing.T) {
	answer := pt.Answer{
		Model: "gpt-4o-test",
		Text:  []string{"Hel", "lo", "!"},
		Usage: pt.Usage{Input: 20, CacheRead: 10, Output: 3},
	}
	r, srv := run(t, pt.Always(pt.OK(answer)), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Text() != "Hello!" || len(r.Chunks) != 3 {
		t.Errorf("chunks = %+v", r.Chunks)
	}
	want := provider.Finish{
		StopReason: recovery.StopEndTurn,
		Usage:      recovery.Usage{InputTokens: 20, OutputTokens: 3, CacheReadInputTokens: 10},
		Model:      "gpt-4o-test",
		ID:         "chatcmpl-test0001",
	}
	if r.Finish != want {
		t.Errorf("finish = %+v, want %+v", r.Finish, want)
	}
	if n := srv.Count(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestFinishReasons(t *testing.T) {
	for wire, want := range map[string]recovery.StopReason{
		"stop":             recovery.StopEndTurn,
		"length":           recovery.StopMaxTokens,
		"tool_calls":       recovery.StopToolUse,
		"function_call":    recovery.StopToolUse,
		"content_filter":   recovery.StopContentFilter,
		"a_future_reason":  recovery.StopEndTurn,
		"eos_from_a_proxy": recovery.StopEndTurn,
	} {
		t.Run(wire, func(t *testing.T) {
			r, _ := run(t, pt.Always(pt.OK(pt.Answer{Text: []string{"x"}, Stop: wire})), newRequest())
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.StopReason != want {
				t.Errorf("stop = %v, want %v", r.Finish.StopReason, want)
			}
		})
	}
}

func TestReasoningDeltasAreThinking(t *testing.T) {
	r, _ := run(t, pt.Always(pt.OK(pt.Answer{Thinking: []string{"Hmm, ", "yes."}, Text: []string{"Yes."}})), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Thinking() != "Hmm, yes." || r.Text() != "Yes." || r.Chunks[0].Kind != provider.ChunkThinking {
		t.Errorf("chunks = %+v", r.Chunks)
	}
	// vLLM and Ollama name the field reasoning.
	stream := sse(
		`{"id":"c","object":"chat.completion.chunk","model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning":"Think."},"finish_reason":null}]}`,
		`{"id":"c","object":"chat.completion.chunk","model":"qwen3","choices":[{"index":0,"delta":{"content":"Done."},"finish_reason":"stop"}]}`,
		`[DONE]`)
	r, _ = run(t, pt.Always(pt.Reply{SSE: stream}), newRequest())
	if r.Err != nil || r.Thinking() != "Think." || r.Text() != "Done." {
		t.Errorf("err %v, chunks %+v", r.Err, r.Chunks)
	}
}

func TestToolCallsAccumulateArgumentDeltas(t *testing.T) {
	answer := pt.Answer{Tools: []pt.ToolCall{
		{ID: "call_1", Name: "get_weather", Args: []string{`{"loc`, `ation":"Par`, `is"}`}},
		{ID: "call_2", Name: "get_time"},
	}}
	r, _ := run(t, pt.Always(pt.OK(answer)), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	calls := r.ToolCalls()
	if len(calls) != 2 || r.Finish.StopReason != recovery.StopToolUse {
		t.Fatalf("calls %+v, stop %v", calls, r.Finish.StopReason)
	}
	if c := calls[0]; c.ID != "call_1" || c.Name != "get_weather" || string(c.Input) != `{"location":"Paris"}` {
		t.Errorf("call 0 = %+v (%s)", c, c.Input)
	}
	if c := calls[1]; c.ID != "call_2" || c.Name != "get_time" || string(c.Input) != `{}` {
		t.Errorf("call 1 = %+v (%s)", c, c.Input)
	}
}

func TestToolCallsCutByLengthAreDropped(t *testing.T) {
	answer := pt.Answer{Text: []string{"Let me ", "check."}, Usage: pt.Usage{Input: 9, Output: 20}, Tools: []pt.ToolCall{
		{ID: "call_1", Name: "get_time", Args: []string{`{}`}},
		{ID: "call_2", Name: "get_weather", Args: []string{`{"city":`, `"Par`}},
	}}
	r, _ := run(t, pt.Always(pt.ToolCutByLimit(answer)), newRequest())
	if r.Err != nil || r.Finish.StopReason != recovery.StopMaxTokens {
		t.Fatalf("err %v, stop %v; want no error and max_tokens", r.Err, r.Finish.StopReason)
	}
	if calls := r.ToolCalls(); len(calls) != 0 {
		t.Errorf("tool calls %+v: a finish_reason length may have cut any of them", calls)
	}
	if r.Text() != "Let me check." || r.Finish.Usage.OutputTokens != 20 {
		t.Errorf("text %q, usage %+v", r.Text(), r.Finish.Usage)
	}
}

func TestAToolCallThenAResetIsABrokenStream(t *testing.T) {
	answer := pt.Answer{Text: []string{"Checking."}, Tools: []pt.ToolCall{{ID: "call_1", Name: "get_weather", Args: []string{`{"city":`, `"Paris"}`}}}}
	r, _ := run(t, pt.Always(pt.ResetBeforeFinish(answer)), newRequest())
	if f := r.Failure(t); f.Kind != recovery.FailStreamBroken || f.HTTPStatus != 200 {
		t.Errorf("failure %+v", f)
	}
	// Tool calls go out at the finish_reason, which never came.
	if calls := r.ToolCalls(); len(calls) != 0 || r.Text() != "Checking." {
		t.Errorf("tool calls %+v, text %q", calls, r.Text())
	}
}

func TestToolCallsWithFinishStopAreToolUse(t *testing.T) {
	answer := pt.Answer{Tools: []pt.ToolCall{{ID: "call_1", Name: "f", Args: []string{`{}`}}}, Stop: "stop"}
	r, _ := run(t, pt.Always(pt.OK(answer)), newRequest())
	if r.Err != nil || r.Finish.StopReason != recovery.StopToolUse {
		t.Errorf("err %v, stop %v", r.Err, r.Finish.StopReason)
	}
}

func TestRefusalIsTextAndStopRefusal(t *testing.T) {
	stream := sse(
		`{"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","refusal":"I can't help with that."},"finish_reason":null}]}`,
		`{"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`[DONE]`)
	r, _ := run(t, pt.Always(pt.Reply{SSE: stream}), newRequest())
	if r.Err != nil || r.Text() != "I can't help with that." || r.Finish.StopReason != recovery.StopRefusal {
		t.Errorf("err %v, text %q, stop %v", r.Err, r.Text(), r.Finish.StopReason)
	}
}

func TestCompletesWithoutDone(t *testing.T) {
	answer := pt.Answer{Text: []string{"a", "b"}, Usage: pt.Usage{Input: 5, Output: 2}}
	t.Run("finish and usage, then the connection held open", func(t *testing.T) {
		r, srv := run(t, pt.Always(pt.NoEndHold(answer)), newRequest())
		if r.Err != nil || r.Text() != "ab" || r.Finish.Usage.OutputTokens != 2 {
			t.Fatalf("err %v, text %q, usage %+v", r.Err, r.Text(), r.Finish.Usage)
		}
		if r.Took > time.Second {
			t.Errorf("took %v: it waited for [DONE]", r.Took)
		}
		srv.Request(t, 1).WaitGone(t, 2*time.Second)
	})
	t.Run("finish and usage, then the body ends", func(t *testing.T) {
		r, _ := run(t, pt.Always(pt.NoEnd(answer)), newRequest())
		if r.Err != nil || r.Text() != "ab" {
			t.Fatalf("err %v, text %q", r.Err, r.Text())
		}
	})
	t.Run("finish without usage, then silence", func(t *testing.T) {
		stream := sse(`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`)
		req := newRequest()
		req.Timeouts.Idle = 150 * time.Millisecond
		srv := pt.NewOpenAI(t, pt.Always(pt.Reply{SSE: stream, Fault: pt.OmitEndHold}))
		r := pt.Run(t, newProvider(t, srv, openai.Config{}), req)
		if r.Err != nil || r.Text() != "a" || r.Finish.StopReason != recovery.StopEndTurn {
			t.Fatalf("err %v, text %q", r.Err, r.Text())
		}
	})
	t.Run("usage inside the finish chunk", func(t *testing.T) {
		stream := sse(`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`)
		srv := pt.NewOpenAI(t, pt.Always(pt.Reply{SSE: stream, Fault: pt.OmitEndHold}))
		r := pt.Run(t, newProvider(t, srv, openai.Config{}), newRequest())
		if r.Err != nil || r.Finish.StopReason != recovery.StopMaxTokens || r.Finish.Usage.InputTokens != 7 || r.Took > time.Second {
			t.Fatalf("err %v, finish %+v, took %v", r.Err, r.Finish, r.Took)
		}
	})
}

func TestPrefillIsContinuedWithThePrefillBody(t *testing.T) {
	vllm := `{"continue_final_message":true,"add_generation_prompt":false}`
	for _, tc := range []struct {
		name    string
		cfg     openai.Config
		openAI  bool   // OpenAI's own API: no BaseURL
		prefill string // the request's
		fields  string // the prefill body's fields on the wire, as JSON
		text    string // prefill + what the caller receives
	}{
		{name: "compatible server: vLLM's fields by default", prefill: "The answer is ", fields: vllm, text: "The answer is 42."},
		{name: "no prefill: no fields", fields: `{}`, text: "42."},
		{name: "an explicit body", cfg: openai.Config{PrefillBody: map[string]any{"continue_final_message": true, "add_generation_prompt": false, "chat_template_kwargs": map[string]any{"enable_thinking": false}}},
			prefill: "The answer is ", fields: `{"continue_final_message":true,"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false}}`, text: "The answer is 42."},
		// Without the fields the server answers afresh and says the prefill again.
		{name: "an empty body sends nothing", cfg: openai.Config{PrefillBody: map[string]any{}}, prefill: "The answer is ", fields: `{}`,
			text: "The answer is The answer is 42."},
		{name: "OpenAI's own API: nothing by default", openAI: true, prefill: "The answer is ", fields: `{}`,
			text: "The answer is The answer is 42."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Prefill = tc.prefill
			srv := pt.NewOpenAI(t, pt.Always(pt.OK(pt.Text("4", "2."))))
			p := newProvider(t, srv, tc.cfg)
			if tc.openAI {
				p = openAIAt(t, srv, tc.cfg)
			}
			r := pt.Run(t, p, req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			body := srv.Request(t, 1).JSON(t)
			if tc.prefill != "" {
				msgs := body["messages"].([]any)
				if last := msgs[len(msgs)-1].(map[string]any); last["role"] != "assistant" || last["content"] != tc.prefill {
					t.Errorf("last message = %v", last)
				}
			}
			fields := map[string]any{}
			for _, k := range []string{"continue_final_message", "add_generation_prompt", "chat_template_kwargs"} {
				if v, ok := body[k]; ok {
					fields[k] = v
				}
			}
			got, _ := json.Marshal(fields)
			pt.AssertJSON(t, got, tc.fields)
			if got := req.Prefill + r.Text(); got != tc.text {
				t.Errorf("prefill + continuation = %q, want %q", got, tc.text)
			}
		})
	}
}

// openAIAt is a provider configured for OpenAI's own API (no BaseURL) whose
// calls go to srv.
func openAIAt(t *testing.T, srv *pt.Server, cfg openai.Config) *openai.Provider {
	t.Helper()
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := srv.Client().Transport
	cfg.APIKey = apiKey
	cfg.HTTPClient = &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		return base.RoundTrip(r)
	})}
	p, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPrefillBodyKeysArePlainFieldNames(t *testing.T) {
	for _, body := range []map[string]any{
		{"a.b": true},
		{"": true},
		{"x": func() {}},
	} {
		if _, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1", PrefillBody: body}); err == nil {
			t.Errorf("New accepted prefill body %v", body)
		}
	}
}

func TestRequestOnTheWire(t *testing.T) {
	req := newRequest()
	req.System = "Be brief."
	req.Messages = []recovery.Message{
		{Role: recovery.RoleUser, Blocks: []recovery.Block{
			recovery.TextBlock("What is in this image?"),
			{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")},
		}},
		{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
			recovery.TextBlock("Let me zoom."),
			{Kind: recovery.BlockToolUse, ToolUseID: "call_1", ToolName: "zoom", ToolInput: []byte(`{"factor":2}`)},
		}},
		{Role: recovery.RoleUser, Blocks: []recovery.Block{
			{Kind: recovery.BlockToolResult, ToolUseID: "call_1", Text: "zoomed"},
			recovery.TextBlock("Now?"),
		}},
	}
	req.Tools = []provider.Tool{{
		Name: "zoom", Description: "Zooms.",
		InputSchema: []byte(`{"type":"object","properties":{"factor":{"type":"number"}},"required":["factor"]}`),
	}}
	r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	got := srv.Request(t, 1)
	if h := got.Header.Get("Authorization"); h != "Bearer "+apiKey {
		t.Errorf("Authorization = %q", h)
	}
	want := `{"messages":[` +
		`{"content":"Be brief.","role":"system"},` +
		`{"content":[{"text":"What is in this image?","type":"text"},{"image_url":{"url":"data:image/png;base64,iVBORw=="},"type":"image_url"}],"role":"user"},` +
		`{"content":"Let me zoom.","tool_calls":[{"id":"call_1","function":{"arguments":"{\"factor\":2}","name":"zoom"},"type":"function"}],"role":"assistant"},` +
		`{"content":"zoomed","tool_call_id":"call_1","role":"tool"},` +
		`{"content":"Now?","role":"user"}],` +
		`"model":"gpt-test","max_completion_tokens":1024,"stream_options":{"include_usage":true},` +
		`"tools":[{"function":{"name":"zoom","description":"Zooms.","parameters":{"type":"object","properties":{"factor":{"type":"number"}},"required":["factor"]}},"type":"function"}],"stream":true}`
	pt.AssertJSON(t, got.Body, want)
}

func TestPlainRequestOnTheWire(t *testing.T) {
	r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	pt.AssertJSON(t, srv.Request(t, 1).Body,
		`{"messages":[{"content":"Say hello.","role":"user"}],"model":"gpt-test","max_completion_tokens":1024,"stream_options":{"include_usage":true},"stream":true}`)
}

func TestThinkingIsAnthropicOnly(t *testing.T) {
	req := newRequest()
	req.ThinkingBudget = 4096
	req.Messages = append(req.Messages, recovery.Message{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
		{Kind: recovery.BlockThinking, Text: "Greet them.", Signature: "sig_1"},
		{Kind: recovery.BlockThinking, Redacted: true, Data: []byte("EmwK")},
		recovery.TextBlock("Hello!"),
	}}, recovery.UserText("Again."))
	r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	pt.AssertJSON(t, srv.Request(t, 1).Body,
		`{"messages":[{"content":"Say hello.","role":"user"},{"content":"Hello!","role":"assistant"},{"content":"Again.","role":"user"}],`+
			`"model":"gpt-test","max_completion_tokens":1024,"stream_options":{"include_usage":true},"stream":true}`)
}

func TestInvalidToolSchemaIsRefusedBeforeAnyCall(t *testing.T) {
	req := newRequest()
	req.Tools = []provider.Tool{{Name: "f", InputSchema: []byte(`"not an object"`)}}
	r, srv := run(t, pt.Always(pt.OK(pt.Text("x"))), req)
	if f := r.Failure(t); f.Kind != recovery.FailInvalidRequest || srv.Count() != 0 {
		t.Errorf("kind %v, %d requests", f.Kind, srv.Count())
	}
}

func TestLegacyMaxTokens(t *testing.T) {
	srv := pt.NewOpenAI(t, pt.Always(pt.OK(pt.Text("ok"))))
	r := pt.Run(t, newProvider(t, srv, openai.Config{LegacyMaxTokens: true}), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	body := srv.Request(t, 1).JSON(t)
	if _, has := body["max_completion_tokens"]; has || body["max_tokens"] != float64(1024) {
		t.Errorf("body = %v", body)
	}
}

func TestNoKeyNoAuthorization(t *testing.T) {
	srv := pt.NewOpenAI(t, pt.Always(pt.OK(pt.Text("ok"))))
	p, err := openai.New(openai.Config{BaseURL: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if r := pt.Run(t, p, newRequest()); r.Err != nil {
		t.Fatal(r.Err)
	}
	if h := srv.Request(t, 1).Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization = %q", h)
	}
}

func TestEmitErrorIsReturnedAsItIsAndStopsTheCall(t *testing.T) {
	srv := pt.NewOpenAI(t, pt.Always(pt.StallAfter(1, pt.Text("a", "b"))))
	p := newProvider(t, srv, openai.Config{})
	errStop := errors.New("client gone")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Stream(ctx, newRequest(), func(provider.Chunk) error { return errStop })
	if err != errStop {
		t.Fatalf("err = %v, want the emit error itself", err)
	}
	srv.Request(t, 1).WaitGone(t, 2*time.Second)
}

func TestCallerCancellationIsReturnedAsItIsAndStopsTheCall(t *testing.T) {
	for name, reply := range map[string]pt.Reply{
		"before headers": pt.Hang(),
		"mid-stream":     pt.StallAfter(1, pt.Text("a", "b")),
	} {
		t.Run(name, func(t *testing.T) {
			srv := pt.NewOpenAI(t, pt.Always(reply))
			p := newProvider(t, srv, openai.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			_, err := p.Stream(ctx, newRequest(), func(provider.Chunk) error { return nil })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if _, ok := provider.AsFailure(err); ok {
				t.Fatal("a cancellation was classified as an upstream failure")
			}
			srv.Request(t, 1).WaitGone(t, 2*time.Second)
		})
	}
}

// TestAPanicSendingIsTheCallersPanic: a panic while the request is sent —
// here the HTTP client's — reaches the caller of Stream, where a
// recovering handler can catch it, instead of ending the process (as it
// would from a goroutine the provider started to send).
func TestAPanicSendingIsTheCallersPanic(t *testing.T) {
	p, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1", HTTPClient: &http.Client{
		Transport: roundTrip(func(*http.Request) (*http.Response, error) { panic("transport broke") }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if v := recover(); v != "transport broke" {
			t.Errorf("recovered %v, want the transport's panic", v)
		}
	}()
	_, _ = p.Stream(context.Background(), newRequest(), func(provider.Chunk) error { return nil })
	t.Error("Stream returned")
}

func TestEachAttemptIsOneRequest(t *testing.T) {
	srv := pt.NewOpenAI(t, pt.Seq(pt.Fail(pt.ServerError), pt.RateLimited("1"), pt.OK(pt.Text("ok"))))
	p := newProvider(t, srv, openai.Config{})
	var kinds []recovery.FailureKind
	for range 3 {
		r := pt.Run(t, p, newRequest())
		if f, ok := provider.AsFailure(r.Err); ok {
			kinds = append(kinds, f.Kind)
		} else if r.Err != nil || r.Text() != "ok" {
			t.Fatalf("err %v, text %q", r.Err, r.Text())
		}
	}
	if len(kinds) != 2 || kinds[0] != recovery.FailServer || kinds[1] != recovery.FailRateLimit || srv.Count() != 3 {
		t.Errorf("kinds %v, %d requests", kinds, srv.Count())
	}
}

// TestAddress is the upstream's host and port, for server.address and
// server.port: the base URL's, with the scheme's default port.
func TestAddress(t *testing.T) {
	for _, tc := range []struct {
		base string
		host string
		port int
	}{
		{"", "api.openai.com", 443},
		{"http://localhost:8000/v1", "localhost", 8000},
		{"https://[::1]/v1", "::1", 443},
	} {
		p, err := openai.New(openai.Config{BaseURL: tc.base})
		if err != nil {
			t.Fatal(err)
		}
		var a provider.Addressed = p
		if host, port := a.Address(); host != tc.host || port != tc.port {
			t.Errorf("%q: Address() = %s, %d, want %s, %d", tc.base, host, port, tc.host, tc.port)
		}
	}
}

// TestConnectionsAreReused: built without an HTTP client, the provider
// reuses its upstream connections (providertest.CheckConnectionsReused).
func TestConnectionsAreReused(t *testing.T) {
	pt.CheckConnectionsReused(t, pt.NewOpenAI, func(url string) (provider.Provider, error) {
		return openai.New(openai.Config{BaseURL: url, APIKey: apiKey})
	}, newRequest)
}

func TestFraming(t *testing.T) {
	pt.StreamFraming(t, pt.NewOpenAI, func(srv *pt.Server) (provider.Provider, error) {
		return openai.New(openai.Config{BaseURL: srv.URL, APIKey: apiKey, HTTPClient: srv.Client()})
	})
}

// TestStopSequenceFromVLLMStopReason: finish_reason "stop" is end_turn —
// OpenAI's API says it at a stop sequence and at a natural end alike —
// unless the choice's stop_reason (vLLM's) is a string equal to one of the
// request's stop sequences: then the answer ended at that stop sequence.
// A stop token's id, null, or a string the request did not ask for is
// end_turn, and the upstream's string is never reported.
func TestStopSequenceFromVLLMStopReason(t *testing.T) {
	stops := []string{"###", "</s>\n\"é😀", "<b>&"}
	text := pt.Text("4", "2")
	tool := pt.Answer{Tools: []pt.ToolCall{{ID: "call_1", Name: "f", Args: []string{`{}`}}}, Stop: "stop"}
	for _, tc := range []struct {
		name  string
		reply pt.Reply
		stops []string
		want  recovery.StopReason
		seq   string
	}{
		{"no stop_reason", pt.OK(text), stops, recovery.StopEndTurn, ""},
		{"a matching stop string", pt.VLLMStopReason(text, "###"), stops, recovery.StopSequence, "###"},
		{"a matching stop string with escapes", pt.VLLMStopReason(text, "</s>\n\"é😀"), stops, recovery.StopSequence, "</s>\n\"é😀"},
		{"a matching stop string with HTML characters", pt.VLLMStopReason(text, "<b>&"), stops, recovery.StopSequence, "<b>&"},
		{"a stop token id", pt.VLLMStopReason(text, 128009), stops, recovery.StopEndTurn, ""},
		{"null", pt.VLLMStopReason(text, nil), stops, recovery.StopEndTurn, ""},
		{"a string not asked for", pt.VLLMStopReason(text, "<|im_end|>"), stops, recovery.StopEndTurn, ""},
		{"a prefix of one asked for", pt.VLLMStopReason(text, "##"), stops, recovery.StopEndTurn, ""},
		{"an empty string", pt.VLLMStopReason(text, ""), []string{""}, recovery.StopEndTurn, ""},
		{"no stop sequences asked for", pt.VLLMStopReason(text, "###"), nil, recovery.StopEndTurn, ""},
		{"the string as a number's text", pt.VLLMStopReason(text, 42), []string{"42"}, recovery.StopEndTurn, ""},
		{"finish_reason length", pt.VLLMStopReason(pt.Answer{Text: text.Text, Limit: true}, "###"), stops, recovery.StopMaxTokens, ""},
		{"another finish_reason", pt.VLLMStopReason(pt.Answer{Text: text.Text, Stop: "abort"}, "###"), stops, recovery.StopEndTurn, ""},
		{"tool calls with finish_reason stop", pt.VLLMStopReason(tool, "###"), stops, recovery.StopToolUse, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.StopSequences = tc.stops
			r, _ := run(t, pt.Always(tc.reply), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.StopReason != tc.want || r.Finish.StopSequence != tc.seq {
				t.Errorf("stop %v, sequence %q; want %v, %q", r.Finish.StopReason, r.Finish.StopSequence, tc.want, tc.seq)
			}
		})
	}
}

// TestStopReasonWithTheLastDelta: vLLM may send the last text delta, the
// finish_reason and the stop_reason in one chunk, and the usage in the
// next; the text is kept and the stop sequence reported.
func TestStopReasonWithTheLastDelta(t *testing.T) {
	stream := sse(
		`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Done"},"logprobs":null,"finish_reason":"stop","stop_reason":"\nUser:"}]}`,
		`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}`,
		`[DONE]`)
	req := newRequest()
	req.StopSequences = []string{"\nUser:"}
	r, _ := run(t, pt.Always(pt.Reply{SSE: stream}), req)
	want := provider.Finish{StopReason: recovery.StopSequence, StopSequence: "\nUser:", Model: "qwen3", ID: "chatcmpl-v",
		Usage: recovery.Usage{InputTokens: 5, OutputTokens: 1}}
	if r.Err != nil || r.Text() != "Done" || r.Finish != want {
		t.Errorf("err %v, text %q, finish %+v; want %+v", r.Err, r.Text(), r.Finish, want)
	}
}

// TestSamplingStopAndToolChoiceOnTheWire: the request's sampling, stop
// sequences and tool choice reach the server in OpenAI's fields; top_k,
// which Chat Completions has not, does not.
func TestSamplingStopAndToolChoiceOnTheWire(t *testing.T) {
	temp, topP, seed := 0.0, 0.9, int64(-7)
	for _, tc := range []struct {
		name string
		edit func(*provider.Request)
		want string // the fields after "messages", "model" and "max_completion_tokens"
	}{
		{"nothing set", func(*provider.Request) {}, ``},
		{"sampling", func(r *provider.Request) {
			r.Sampling = provider.Sampling{Temperature: &temp, TopP: &topP, TopK: 40, Seed: &seed}
		}, `"temperature":0,"top_p":0.9,"seed":-7,`},
		{"one stop sequence", func(r *provider.Request) { r.StopSequences = []string{"\n\n"} }, `"stop":["\n\n"],`},
		{"auto", func(r *provider.Request) { r.ToolChoice.Mode = provider.ToolChoiceAuto }, `"tool_choice":"auto",`},
		{"any", func(r *provider.Request) { r.ToolChoice.Mode = provider.ToolChoiceAny }, `"tool_choice":"required",`},
		{"none", func(r *provider.Request) { r.ToolChoice.Mode = provider.ToolChoiceNone }, `"tool_choice":"none",`},
		{"a named tool, one call", func(r *provider.Request) {
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom", DisableParallel: true}
		}, `"tool_choice":{"type":"function","function":{"name":"zoom"}},"parallel_tool_calls":false,`},
		{"one call, the default choice", func(r *provider.Request) { r.ToolChoice.DisableParallel = true }, `"parallel_tool_calls":false,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			tc.edit(req)
			r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			pt.AssertJSON(t, srv.Request(t, 1).Body, `{"messages":[{"content":"Say hello.","role":"user"}],"model":"gpt-test","max_completion_tokens":1024,`+
				tc.want+`"stream_options":{"include_usage":true},"stream":true}`)
		})
	}
}

// TestNonFiniteSamplingIsRefusedBeforeAnyCall: JSON has no NaN.
func TestNonFiniteSamplingIsRefusedBeforeAnyCall(t *testing.T) {
	nan := math.NaN()
	req := newRequest()
	req.Sampling.Temperature = &nan
	r, srv := run(t, pt.Always(pt.OK(pt.Text("x"))), req)
	if f := r.Failure(t); f.Kind != recovery.FailInvalidRequest || srv.Count() != 0 {
		t.Errorf("kind %v, %d requests", f.Kind, srv.Count())
	}
}

// TestReasoningAndOutputSchemaOnTheWire: the effort goes as
// reasoning_effort beside the output limit the configuration chose; the
// output schema as a json_schema response_format, strict when strict mode
// takes it, its keys in the caller's order (which the answer's follow), and
// not at all when the stop hook alone holds the answer to it.
func TestReasoningAndOutputSchemaOnTheWire(t *testing.T) {
	const (
		closedSchema = `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"required":["b","a"],"additionalProperties":false}`
		openSchema   = `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}`
	)
	for _, tc := range []struct {
		name   string
		cfg    openai.Config
		edit   func(*provider.Request)
		want   string // the fields after "messages" and "model", before "stream"
		wantIn string // a piece of the body, byte for byte
	}{
		{"effort", openai.Config{}, func(r *provider.Request) { r.Reasoning.Effort = "low" },
			`"max_completion_tokens":1024,"reasoning_effort":"low","stream_options":{"include_usage":true},`, `"reasoning_effort":"low"`},
		{"effort, legacy max_tokens kept", openai.Config{LegacyMaxTokens: true}, func(r *provider.Request) { r.Reasoning.Effort = "high" },
			`"max_tokens":1024,"reasoning_effort":"high","stream_options":{"include_usage":true},`, `"reasoning_effort":"high"`},
		{"interleaved and a budget send nothing", openai.Config{}, func(r *provider.Request) { r.Reasoning.Interleaved, r.ThinkingBudget = true, 2048 },
			`"max_completion_tokens":1024,"stream_options":{"include_usage":true},`, `"max_completion_tokens":1024`},
		{"strict schema", openai.Config{}, func(r *provider.Request) { r.OutputSchema = []byte(closedSchema) },
			`"max_completion_tokens":1024,"stream_options":{"include_usage":true},` +
				`"response_format":{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":` + closedSchema + `}},`,
			`"schema":` + closedSchema},
		{"open schema", openai.Config{}, func(r *provider.Request) { r.OutputSchema = []byte(openSchema) },
			`"max_completion_tokens":1024,"stream_options":{"include_usage":true},` +
				`"response_format":{"type":"json_schema","json_schema":{"name":"output","strict":false,"schema":` + openSchema + `}},`,
			`"schema":` + openSchema},
		{"schema by the stop hook", openai.Config{}, func(r *provider.Request) {
			r.OutputSchema, r.StructuredOutput = []byte(closedSchema), provider.StructuredHook
		}, `"max_completion_tokens":1024,"stream_options":{"include_usage":true},`, `"stream_options"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := pt.NewOpenAI(t, pt.Always(pt.OK(pt.Text("ok"))))
			req := newRequest()
			tc.edit(req)
			if r := pt.Run(t, newProvider(t, srv, tc.cfg), req); r.Err != nil {
				t.Fatal(r.Err)
			}
			got := srv.Request(t, 1).Body
			pt.AssertJSON(t, got, `{"messages":[{"content":"Say hello.","role":"user"}],"model":"gpt-test",`+tc.want+`"stream":true}`)
			if !strings.Contains(string(got), tc.wantIn) {
				t.Errorf("body %s\nlacks %s", got, tc.wantIn)
			}
		})
	}
}

// TestInvalidOutputSchemaIsRefusedBeforeAnyCall: a schema that is not a
// JSON object cannot be sent; with the stop hook alone it is not sent.
func TestInvalidOutputSchemaIsRefusedBeforeAnyCall(t *testing.T) {
	for how, refused := range map[provider.StructuredOutput]bool{
		provider.StructuredNative: true, provider.StructuredHook: false, provider.StructuredTool: false,
	} {
		req := newRequest()
		req.OutputSchema, req.StructuredOutput = []byte(`"an object"`), how
		r, srv := run(t, pt.Always(pt.OK(pt.Text("x"))), req)
		if !refused {
			if r.Err != nil || srv.Count() != 1 {
				t.Errorf("structured output %d: err %v, %d requests", how, r.Err, srv.Count())
			}
			continue
		}
		if f := r.Failure(t); f.Kind != recovery.FailInvalidRequest || srv.Count() != 0 || !strings.Contains(f.Message, "output schema") {
			t.Errorf("kind %v (%s), %d requests", f.Kind, f.Message, srv.Count())
		}
	}
}

// TestUsage: the usage chunk that stream_options.include_usage asks for,
// in completiond's (Anthropic's) terms: prompt_tokens counts the cached
// tokens too, which are split out — InputTokens are the prompt's uncached
// tokens, CacheReadInputTokens prompt_tokens_details.cached_tokens, and a
// server's cache_write_tokens CacheCreationInputTokens — so that the three
// add up to the prompt.
func TestUsage(t *testing.T) {
	const text = `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`
	const finish = `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	for _, tc := range []struct {
		name  string
		tail  []string // after the text chunk
		usage recovery.Usage
	}{
		{"OpenAI: a usage chunk without choices after the finish", []string{finish,
			`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":256}}}`, `[DONE]`},
			recovery.Usage{InputTokens: 86, OutputTokens: 300, CacheReadInputTokens: 1920}},
		{"nothing cached", []string{finish,
			`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}}}`, `[DONE]`},
			recovery.Usage{InputTokens: 12, OutputTokens: 3}},
		{"no details (vLLM, llama.cpp)", []string{finish,
			`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`, `[DONE]`},
			recovery.Usage{InputTokens: 12, OutputTokens: 3}},
		{"cache writes reported", []string{finish,
			`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":600,"cache_write_tokens":300}}}`, `[DONE]`},
			recovery.Usage{InputTokens: 100, OutputTokens: 5, CacheReadInputTokens: 600, CacheCreationInputTokens: 300}},
		{"usage with the finish", []string{
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":40}}}`, `[DONE]`},
			recovery.Usage{InputTokens: 10, OutputTokens: 2, CacheReadInputTokens: 40}},
		{"more cached than the prompt is never negative", []string{finish,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}}`, `[DONE]`},
			recovery.Usage{OutputTokens: 1, CacheReadInputTokens: 9}},
		{"no usage chunk (a server that ignores include_usage)", []string{finish, `[DONE]`}, recovery.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srv := run(t, pt.Always(pt.Reply{SSE: sse(append([]string{text}, tc.tail...)...)}), newRequest())
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.Usage != tc.usage {
				t.Errorf("usage %+v, want %+v", r.Finish.Usage, tc.usage)
			}
			if got := srv.Request(t, 1).JSON(t)["stream_options"]; !reflect.DeepEqual(got, map[string]any{"include_usage": true}) {
				t.Errorf("stream_options %v", got)
			}
		})
	}
}
