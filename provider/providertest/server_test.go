package providertest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// post sends body to the server's endpoint and reads the whole answer.
func post(t *testing.T, s *Server, path, body string) (*http.Response, string, error) {
	t.Helper()
	// A guard against a hang, not a timing: a body of megabytes under the
	// race detector on a loaded machine takes seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-test", "yes")
	res, err := s.Client().Do(req)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, string(b), err
}

func TestAnthropicStreamIsTheAPIWire(t *testing.T) {
	s := NewAnthropic(t, Always(OK(Answer{Model: "claude-x", Text: []string{"Hi"}, Usage: Usage{Input: 3, Output: 1}})))
	res, got, err := post(t, s, "/v1/messages", `{"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" || res.Header.Get("request-id") != "req_test_0001" {
		t.Errorf("headers %v", res.Header)
	}
	want := `event: message_start
data: {"message":{"content":[],"id":"msg_test_0001","model":"claude-x","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":3,"output_tokens":1}},"type":"message_start"}

event: ping
data: {"type": "ping"}

event: content_block_start
data: {"content_block":{"text":"","type":"text"},"index":0,"type":"content_block_start"}

event: content_block_delta
data: {"delta":{"text":"Hi","type":"text_delta"},"index":0,"type":"content_block_delta"}

event: content_block_stop
data: {"index":0,"type":"content_block_stop"}

event: message_delta
data: {"delta":{"stop_reason":"end_turn","stop_sequence":null},"type":"message_delta","usage":{"output_tokens":1}}

event: message_stop
data: {"type":"message_stop"}

`
	if got != want {
		t.Errorf("stream\n%s\nwant\n%s", got, want)
	}
}

func TestAnthropicThinkingIsTheAPIWire(t *testing.T) {
	s := NewAnthropic(t, Always(OK(Answer{Thinking: []string{"Hm", "m."}, Signature: "sig_1", Redacted: []string{"EmwK"}, Text: []string{"Hi"}})))
	_, got, err := post(t, s, "/v1/messages", `{"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, ev := range strings.Split(got, "\n\n") {
		if strings.HasPrefix(ev, "event: content_block") {
			blocks = append(blocks, strings.SplitN(ev, "\ndata: ", 2)[1])
		}
	}
	want := []string{
		`{"content_block":{"signature":"","thinking":"","type":"thinking"},"index":0,"type":"content_block_start"}`,
		`{"delta":{"thinking":"Hm","type":"thinking_delta"},"index":0,"type":"content_block_delta"}`,
		`{"delta":{"thinking":"m.","type":"thinking_delta"},"index":0,"type":"content_block_delta"}`,
		`{"delta":{"signature":"sig_1","type":"signature_delta"},"index":0,"type":"content_block_delta"}`,
		`{"index":0,"type":"content_block_stop"}`,
		`{"content_block":{"data":"EmwK","type":"redacted_thinking"},"index":1,"type":"content_block_start"}`,
		`{"index":1,"type":"content_block_stop"}`,
		`{"content_block":{"text":"","type":"text"},"index":2,"type":"content_block_start"}`,
		`{"delta":{"text":"Hi","type":"text_delta"},"index":2,"type":"content_block_delta"}`,
		`{"index":2,"type":"content_block_stop"}`,
	}
	if strings.Join(blocks, "\n") != strings.Join(want, "\n") {
		t.Errorf("content blocks\n%s\nwant\n%s", strings.Join(blocks, "\n"), strings.Join(want, "\n"))
	}
}

func TestOpenAIStreamIsTheAPIWire(t *testing.T) {
	s := NewOpenAI(t, Always(OK(Answer{Model: "gpt-x", Text: []string{"Hi"}, Usage: Usage{Input: 3, Output: 1}})))
	res, got, err := post(t, s, "/v1/chat/completions", `{"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get("x-request-id") != "req_test_0001" {
		t.Errorf("headers %v", res.Header)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n\n"), "\n\n")
	want := []string{
		`data: {"choices":[{"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"gpt-x","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
		`data: {"choices":[{"delta":{"content":"Hi"},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"gpt-x","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
		`data: {"choices":[{"delta":{},"finish_reason":"stop","index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"gpt-x","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
		`data: {"choices":[],"created":1700000000,"id":"chatcmpl-test0001","model":"gpt-x","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":{"completion_tokens":1,"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,"rejected_prediction_tokens":0},"prompt_tokens":3,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"total_tokens":4}}`,
		`data: [DONE]`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("stream\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestErrorEnvelopes(t *testing.T) {
	a := NewAnthropic(t, Always(RateLimited("3")))
	res, got, err := post(t, a, "/v1/messages", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 429 || res.Header.Get("retry-after") != "3" || res.Header.Get("x-should-retry") != "true" ||
		!strings.HasPrefix(got, `{"error":{"message":"This request would exceed the rate limit`) ||
		!strings.HasSuffix(got, `"type":"rate_limit_error"},"request_id":"req_test_0001","type":"error"}`) {
		t.Errorf("anthropic %d %v %s", res.StatusCode, res.Header, got)
	}
	o := NewOpenAI(t, Always(Fail(Quota)))
	res, got, err = post(t, o, "/v1/chat/completions", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 429 || !strings.HasPrefix(got, `{"error":{"code":"insufficient_quota","message":"You exceeded your current quota`) ||
		!strings.HasSuffix(got, `"param":null,"type":"insufficient_quota"}}`) {
		t.Errorf("openai %d %s", res.StatusCode, got)
	}
}

func TestUnknownPathIsA404(t *testing.T) {
	s := NewOpenAI(t, Always(OK(Text("x"))))
	res, got, err := post(t, s, "/v1/completions", `{}`)
	if err != nil || res.StatusCode != 404 || !strings.Contains(got, "Invalid URL") {
		t.Fatalf("%v %v %s", err, res, got)
	}
}

func TestRecordsEveryRequest(t *testing.T) {
	s := NewAnthropic(t, Seq(Fail(ServerError), Fail(Overloaded), OK(Text("x"))))
	var statuses []int
	for i := range 4 {
		res, _, err := post(t, s, "/v1/messages", `{"n":`+strconv.Itoa(i+1)+`}`)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, res.StatusCode)
	}
	if want := []int{500, 529, 200, 200}; !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v: the last reply repeats", statuses, want)
	}
	reqs := s.Requests()
	if len(reqs) != 4 || s.Count() != 4 {
		t.Fatalf("recorded %d", len(reqs))
	}
	for i, r := range reqs {
		if r.N != i+1 || r.Path != "/v1/messages" || r.Header.Get("x-test") != "yes" || r.JSON(t)["n"] != float64(i+1) {
			t.Errorf("request %d: %+v", i, r)
		}
		if i > 0 && r.Time.Before(reqs[i-1].Time) {
			t.Error("times out of order")
		}
	}
}

func TestDownForThenHealthy(t *testing.T) {
	s := NewOpenAI(t, DownFor(150*time.Millisecond, Fail(Unavailable), OK(Text("x"))))
	var codes []int
	for range 2 {
		res, _, err := post(t, s, "/v1/chat/completions", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, res.StatusCode)
	}
	time.Sleep(200 * time.Millisecond)
	res, _, err := post(t, s, "/v1/chat/completions", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	codes = append(codes, res.StatusCode)
	if want := []int{503, 503, 200}; !slices.Equal(codes, want) {
		t.Errorf("codes %v, want %v", codes, want)
	}
}

func TestResetBeforeHeaders(t *testing.T) {
	s := NewAnthropic(t, Always(Reset()))
	_, _, err := post(t, s, "/v1/messages", `{}`)
	if err == nil || !strings.Contains(err.Error(), "reset") && !errors.Is(err, io.EOF) {
		t.Fatalf("err = %v, want a reset", err)
	}
}

func TestFaultsMidStream(t *testing.T) {
	a := Text("a", "b", "c")
	for _, tc := range []struct {
		name  string
		reply Reply
		check func(body string, err error) bool
	}{
		{"cut", CutAfter(1, a), func(b string, err error) bool {
			return err == nil && strings.Contains(b, `"text":"a"`) && !strings.Contains(b, `"text":"b"`) && !strings.Contains(b, "message_stop")
		}},
		{"error event", ErrorAfter(2, Overloaded, a), func(b string, err error) bool {
			return err == nil && strings.HasSuffix(b, "event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n")
		}},
		{"no message_stop", NoEnd(a), func(b string, err error) bool {
			return err == nil && strings.Contains(b, "message_delta") && !strings.Contains(b, "message_stop")
		}},
		{"reset", ResetAfter(1, a), func(b string, err error) bool { return err != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewAnthropic(t, Always(tc.reply))
			_, body, err := post(t, s, "/v1/messages", `{}`)
			if !tc.check(body, err) {
				t.Errorf("body %q, err %v", body, err)
			}
		})
	}
}

func TestHoldsEndWhenTheClientLeaves(t *testing.T) {
	for name, reply := range map[string]Reply{
		"hang":  Hang(),
		"stall": StallAfter(1, Text("a", "b")),
		"slow":  SlowFirstToken(time.Minute, Text("a")),
	} {
		t.Run(name, func(t *testing.T) {
			s := NewAnthropic(t, Always(reply))
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/messages", strings.NewReader(`{}`))
			res, err := s.Client().Do(req)
			if err == nil {
				_, err = io.ReadAll(res.Body)
				res.Body.Close()
			}
			if err == nil {
				t.Fatal("the request completed")
			}
			s.Request(t, 1).WaitGone(t, 2*time.Second)
		})
	}
}

func TestHoldsEndWithTheTest(t *testing.T) {
	// A hold nobody cancels must not keep the test from ending: the server's
	// cleanup ends it.
	done := make(chan error, 1)
	t.Run("inner", func(t *testing.T) {
		s := NewOpenAI(t, Always(Hang()))
		go func() {
			res, err := s.Client().Post(s.URL+"/chat/completions", "application/json", strings.NewReader(`{}`))
			if err == nil {
				res.Body.Close()
			}
			done <- err
		}()
		for s.Count() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	})
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("the held request outlived its test")
	}
}

// events is the data of each server-sent event of body, in order.
func events(body string) []string {
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		if _, data, ok := strings.Cut(ev, "data: "); ok {
			out = append(out, data)
		}
	}
	return out
}

func TestToolCutByLimitIsTheAPIWire(t *testing.T) {
	a := Answer{Text: []string{"Checking."}, Tools: []ToolCall{{ID: "call_1", Name: "get_weather", Args: []string{`{"city":`, `"Par`}}},
		Usage: Usage{Input: 5, Output: 8}}
	for _, tc := range []struct {
		name string
		s    func(testing.TB, Script) *Server
		path string
		want []string
	}{
		{"anthropic", NewAnthropic, "/v1/messages", []string{
			`{"message":{"content":[],"id":"msg_test_0001","model":"test-model","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":5,"output_tokens":1}},"type":"message_start"}`,
			`{"type": "ping"}`,
			`{"content_block":{"text":"","type":"text"},"index":0,"type":"content_block_start"}`,
			`{"delta":{"text":"Checking.","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
			`{"index":0,"type":"content_block_stop"}`,
			`{"content_block":{"id":"call_1","input":{},"name":"get_weather","type":"tool_use"},"index":1,"type":"content_block_start"}`,
			`{"delta":{"partial_json":"{\"city\":","type":"input_json_delta"},"index":1,"type":"content_block_delta"}`,
			`{"delta":{"partial_json":"\"Par","type":"input_json_delta"},"index":1,"type":"content_block_delta"}`,
			`{"index":1,"type":"content_block_stop"}`,
			`{"delta":{"stop_reason":"max_tokens","stop_sequence":null},"type":"message_delta","usage":{"output_tokens":8}}`,
			`{"type":"message_stop"}`,
		}},
		{"openai", NewOpenAI, "/v1/chat/completions", []string{
			`{"choices":[{"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
			`{"choices":[{"delta":{"content":"Checking."},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
			`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"","name":"get_weather"},"id":"call_1","index":0,"type":"function"}]},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
			`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"city\":"},"index":0}]},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
			`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\"Par"},"index":0}]},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
			`{"choices":[{"delta":{},"finish_reason":"length","index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`,
			`{"choices":[],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":{"completion_tokens":8,"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,"rejected_prediction_tokens":0},"prompt_tokens":5,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"total_tokens":13}}`,
			`[DONE]`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s(t, Always(ToolCutByLimit(a)))
			_, body, err := post(t, s, tc.path, `{"stream":true}`)
			if err != nil {
				t.Fatal(err)
			}
			if got := events(body); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestResetBeforeFinishSendsTheWholeToolCall(t *testing.T) {
	a := Answer{Text: []string{"Checking."}, Tools: []ToolCall{{ID: "call_1", Name: "get_weather", Args: []string{`{"city":`, `"Paris"}`}}}}
	for _, tc := range []struct {
		name string
		s    func(testing.TB, Script) *Server
		path string
		last string // the last event before the reset
		none string // what must not come
	}{
		{"anthropic", NewAnthropic, "/v1/messages", `{"index":1,"type":"content_block_stop"}`, "message_delta"},
		{"openai", NewOpenAI, "/v1/chat/completions", `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\"Paris\"}"},"index":0}]},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-test0001","model":"test-model","object":"chat.completion.chunk","system_fingerprint":"fp_test","usage":null}`, "finish_reason\":\"tool_calls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s(t, Always(ResetBeforeFinish(a)))
			_, body, err := post(t, s, tc.path, `{"stream":true}`)
			if err == nil {
				t.Fatal("the body ended cleanly, want a reset")
			}
			got := events(body)
			if len(got) == 0 || got[len(got)-1] != tc.last || strings.Contains(body, tc.none) {
				t.Errorf("events before the reset\n%s\nwant the last to be\n%s", strings.Join(got, "\n"), tc.last)
			}
		})
	}
}

func TestTheConversationAsTheServersTakeIt(t *testing.T) {
	prefilled := `"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"The answer is "}]`
	for _, tc := range []struct {
		name   string
		s      func(testing.TB, Script) *Server
		path   string
		body   string
		status int
		has    string // in the body of the answer
		hasNot string
	}{
		{"openai answers a final assistant message afresh", NewOpenAI, "/v1/chat/completions", `{` + prefilled + `}`, 200,
			`"content":"The answer is "`, ""},
		{"openai continues it when asked", NewOpenAI, "/v1/chat/completions", `{"continue_final_message":true,"add_generation_prompt":false,` + prefilled + `}`, 200,
			`"content":"42"`, `"content":"The answer is "`},
		{"anthropic refuses trailing whitespace", NewAnthropic, "/v1/messages", `{` + prefilled + `}`, 400,
			"final assistant content cannot end with trailing whitespace", ""},
		{"anthropic continues a final assistant message", NewAnthropic, "/v1/messages",
			`{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"text","text":"The answer is"}]}]}`, 200,
			`"text":"42"`, "The answer is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s(t, Always(OK(Text("42"))))
			res, body, err := post(t, s, tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.status || !strings.Contains(body, tc.has) || (tc.hasNot != "" && strings.Contains(body, tc.hasNot)) {
				t.Errorf("status %d, body\n%s", res.StatusCode, body)
			}
		})
	}
}

// TestAnthropicStopSequenceIsTheAPIWire: an Answer's StopSequence is
// message_delta's stop_sequence, with stop_reason stop_sequence unless the
// script says another; without one, stop_sequence is null.
func TestAnthropicStopSequenceIsTheAPIWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Answer
		want string
	}{
		{"stop sequence", Answer{StopSequence: "</a>\n"},
			`{"delta":{"stop_reason":"stop_sequence","stop_sequence":"\u003c/a\u003e\n"},"type":"message_delta","usage":{"output_tokens":0}}`},
		{"stop sequence named alone", Answer{Stop: "stop_sequence"},
			`{"delta":{"stop_reason":"stop_sequence","stop_sequence":null},"type":"message_delta","usage":{"output_tokens":0}}`},
		{"another stop reason", Answer{Stop: "end_turn", StopSequence: "x"},
			`{"delta":{"stop_reason":"end_turn","stop_sequence":"x"},"type":"message_delta","usage":{"output_tokens":0}}`},
		{"the limit", Answer{Limit: true, StopSequence: "x"},
			`{"delta":{"stop_reason":"max_tokens","stop_sequence":"x"},"type":"message_delta","usage":{"output_tokens":0}}`},
		{"none", Answer{},
			`{"delta":{"stop_reason":"end_turn","stop_sequence":null},"type":"message_delta","usage":{"output_tokens":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.a.Text = []string{"Hi"}
			s := NewAnthropic(t, Always(OK(tc.a)))
			_, body, err := post(t, s, "/v1/messages", `{"stream":true}`)
			if err != nil {
				t.Fatal(err)
			}
			evs := events(body)
			if len(evs) < 2 || evs[len(evs)-2] != tc.want {
				t.Errorf("events\n%s\nwant message_delta\n%s", strings.Join(evs, "\n"), tc.want)
			}
		})
	}
}
