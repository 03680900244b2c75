package anthropic_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// FuzzStreamReader streams arbitrary bodies, answered as a 200 event
// stream, through the provider. Whatever the upstream sends, the attempt
// must not panic, must end with either a nil error and a stop reason or a
// *recovery.Failure, must close the body, and must leave no goroutine
// behind. The body is handed over by the HTTP client's transport, with no
// network in between, so that every run of an input takes the same path.
// The seeds are the providertest server's renderings of answers and faults.
func FuzzStreamReader(f *testing.F) {
	for _, s := range seedStreams(f) {
		f.Add(s)
	}
	for _, s := range handSeeds {
		f.Add(s)
	}
	var ignore goleak.Option
	f.Fuzz(func(t *testing.T, sse string) {
		if ignore == nil { // the fuzzing engine's own goroutines run by now
			ignore = goleak.IgnoreCurrent()
		}
		body := &trackedBody{Reader: strings.NewReader(sse)}
		p := fuzzProvider(t, &http.Client{Transport: sseTransport{body}})
		req := newRequest()
		req.Timeouts = provider.Timeouts{Total: 10 * time.Second}
		fin, err := p.Stream(t.Context(), req, func(provider.Chunk) error { return nil })
		if err != nil {
			if _, ok := provider.AsFailure(err); !ok {
				t.Fatalf("error %v (%T) is not a *recovery.Failure", err, err)
			}
		} else if fin.StopReason == recovery.StopNone {
			t.Fatalf("nil error without a stop reason: %+v", fin)
		}
		if !body.closed.Load() {
			t.Error("the response body was left open")
		}
		goleak.VerifyNone(t, ignore)
	})
}

// trackedBody is a response body that records its closing.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return nil
}

// sseTransport answers every request with body as a 200 event stream.
type sseTransport struct{ body *trackedBody }

func (rt sseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	h.Set("request-id", "req_fuzz")
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: rt.body, ContentLength: -1, Request: r}, nil
}

// seedStreams are the event streams the providertest server renders for
// answers of every shape and for the faults that end a body on their own
// (Cut, ErrorEvent, OmitEnd), and a cut one followed by malformed data.
func seedStreams(f *testing.F) []string {
	f.Helper()
	full := pt.Answer{Model: "m", Thinking: []string{"Let me ", "think."}, Signature: "sig", Redacted: []string{"opaque"},
		Text: []string{"Hel", "lo"}, Tools: []pt.ToolCall{{ID: "call_1", Name: "search", Args: []string{`{"q":`, `"x"}`}}},
		Usage: pt.Usage{Input: 10, Output: 5, CacheRead: 2, CacheWrite: 1}}
	tools := pt.Answer{Text: []string{"Checking."}, Tools: []pt.ToolCall{{ID: "call_2", Name: "lookup", Args: []string{`{}`}}}}
	limit := pt.Answer{Text: []string{"cut", " short"}, Tools: []pt.ToolCall{{ID: "call_3", Name: "t", Args: []string{`{"a":`}}}, Limit: true}
	replies := []pt.Reply{
		pt.OK(pt.Text("Hel", "lo", "!")),
		pt.OK(full),
		pt.OK(tools),
		pt.OK(limit),
		{Answer: full, Fault: pt.Cut, After: 1},
		{Answer: full, Fault: pt.ErrorEvent, Cond: pt.Overloaded, After: 1},
		{Answer: tools, Fault: pt.OmitEnd},
	}
	srv := pt.NewAnthropic(f, pt.Seq(replies...))
	out := make([]string, 0, len(replies)+1)
	for range replies {
		resp, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			f.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, string(b))
	}
	// The server's malformed chunk holds the body open until the client
	// stops on its own; a cut stream and a chunk that is not JSON stand in.
	return append(out, out[4]+malformed)
}

// handSeeds are bodies the renderer never produces.
var handSeeds = []string{
	"",
	"\n\n",
	": comment\n\n",
	"event: ping\ndata: {\"type\": \"ping\"}\n\n",
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":-1}}\n\n",
	"data: not json\n\n",
}

// malformed is a chunk that is not JSON, in Anthropic's framing.
const malformed = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\n\n"

func fuzzProvider(t *testing.T, client *http.Client) provider.Provider {
	p, err := anthropic.New(anthropic.Config{BaseURL: "http://upstream.invalid", APIKey: apiKey, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
