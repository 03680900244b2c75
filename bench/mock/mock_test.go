package mock

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	"github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// start serves a mock for the test.
func start(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	s := New()
	hs := httptest.NewUnstartedServer(s)
	hs.Config.ConnState = s.ConnState
	hs.Start()
	t.Cleanup(func() { s.Close(); hs.Close() })
	return s, hs
}

// post sends a streaming request for model to url and returns the response
// with its whole body.
func post(t *testing.T, url, model string) (*http.Response, string) {
	t.Helper()
	body := `{"model":` + mustJSON(model) + `,"max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestFramesAsProvidertest: an answer is the same bytes as providertest's
// fault server streams for the same answer on both wires (the ids aside,
// which providertest numbers per request).
func TestFramesAsProvidertest(t *testing.T) {
	spec := Spec{Tokens: 3}
	model := spec.Model()
	answer := providertest.Answer{Model: model, Text: slices.Repeat([]string{Token}, 3),
		Usage: providertest.Usage{Input: InputTokens, Output: 3}}
	_, m := start(t)
	openaiRef := providertest.NewOpenAI(t, providertest.Always(providertest.OK(answer)))
	anthropicRef := providertest.NewAnthropic(t, providertest.Always(providertest.OK(answer)))
	for _, tc := range []struct {
		name          string
		refURL, path  string
		refID, mockID string
	}{
		{"openai", openaiRef.URL + "/chat/completions", openaiWire.path, "chatcmpl-test0001", openaiID},
		{"anthropic", anthropicRef.URL + "/v1/messages", anthropicWire.path, "msg_test_0001", anthropicID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refResp, want := post(t, tc.refURL, model)
			gotResp, got := post(t, m.URL+tc.path, model)
			want = strings.ReplaceAll(want, tc.refID, tc.mockID)
			if strings.Count(got, `"`+Token+`"`) != 3 {
				t.Fatalf("the stream does not hold the 3 tokens: %q", got)
			}
			if got != want {
				t.Errorf("stream differs from providertest's\n got: %q\nwant: %q", got, want)
			}
			if g, w := gotResp.Header.Get("Content-Type"), refResp.Header.Get("Content-Type"); g != w {
				t.Errorf("Content-Type %q, want %q", g, w)
			}
		})
	}
}

// adapters are the repository's providers pointed at url.
func adapters(t *testing.T, url string) map[string]provider.Provider {
	t.Helper()
	o, err := openai.New(openai.Config{BaseURL: url + "/v1", APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := anthropic.New(anthropic.Config{BaseURL: url, APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]provider.Provider{"openai": o, "anthropic": a}
}

func request(spec Spec) *provider.Request {
	return &provider.Request{Attempt: 1, Model: spec.Model(), MaxTokens: 100,
		Messages: []recovery.Message{recovery.UserText("hi")}}
}

// TestAdaptersReadTheAnswer: completiond's own providers read a paced
// answer whole, with its stop reason and usage, no sooner than its pacing
// allows.
func TestAdaptersReadTheAnswer(t *testing.T) {
	_, m := start(t)
	spec := Spec{Tokens: 5, FirstToken: 20 * time.Millisecond, TokenDelay: 5 * time.Millisecond}
	for name, p := range adapters(t, m.URL) {
		t.Run(name, func(t *testing.T) {
			r := providertest.Run(t, p, request(spec))
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got, want := r.Text(), strings.Repeat(Token, 5); got != want {
				t.Errorf("text %q, want %q", got, want)
			}
			if r.Finish.StopReason != recovery.StopEndTurn || r.Finish.Usage.OutputTokens != 5 || r.Finish.Usage.InputTokens != InputTokens {
				t.Errorf("finish %+v, want end_turn with %d in and 5 out", r.Finish, InputTokens)
			}
			if least := 40 * time.Millisecond; r.Took < least {
				t.Errorf("took %v, want at least %v (20 ms to the first token, 4 × 5 ms after)", r.Took, least)
			}
		})
	}
}

// TestBadSpecIsAnInvalidRequest: a model that is not a spec is refused in
// the provider's words, which the adapters classify as a bad request.
func TestBadSpecIsAnInvalidRequest(t *testing.T) {
	_, m := start(t)
	for name, p := range adapters(t, m.URL) {
		t.Run(name, func(t *testing.T) {
			req := request(Spec{})
			req.Model = "tokens=-1"
			r := providertest.Run(t, p, req)
			if f := r.Failure(t); f.HTTPStatus != http.StatusBadRequest || f.Kind != recovery.FailInvalidRequest {
				t.Errorf("failure %+v, want a 400 invalid request", f)
			}
		})
	}
}

// TestHoldIsSilentUntilTheClientLeaves: a held stream sends its headers and
// nothing else, counts as held while its client waits, and no longer once
// the client went away.
func TestHoldIsSilentUntilTheClientLeaves(t *testing.T) {
	s, m := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"hold=1","messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.URL+openaiWire.path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	waitFor(t, func() bool { return s.Stats().Held == 1 })
	read := make(chan int, 1)
	go func() { n, _ := resp.Body.Read(make([]byte, 1)); read <- n }()
	select {
	case n := <-read:
		t.Fatalf("a held stream sent %d bytes", n)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	waitFor(t, func() bool { return s.Stats().Held == 0 })
	if st := s.Stats(); st.Requests != 1 || st.Conns != 1 {
		t.Errorf("stats %+v, want 1 request on 1 connection", st)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
	}
}

// TestSpecRoundTrip: Model and ParseSpec agree, and bad specs are refused.
func TestSpecRoundTrip(t *testing.T) {
	for _, s := range []Spec{{Tokens: 1}, {Tokens: 200, FirstToken: time.Millisecond, TokenDelay: 250 * time.Microsecond}, {Hold: true}} {
		got, err := ParseSpec(s.Model())
		if s.Hold {
			s.Tokens = 1
		}
		if err != nil || got != s {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", s.Model(), got, err, s)
		}
	}
	for _, bad := range []string{"tokens=0", "tokens=x", "ttft=-1s", "delay=soon", "%zz"} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
}
