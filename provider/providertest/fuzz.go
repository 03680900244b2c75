package providertest

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// StreamFuzz is one provider's wire, as FuzzStream needs it.
type StreamFuzz struct {
	// NewServer starts this wire's server (NewAnthropic, NewOpenAI): its
	// renderings are the seeds.
	NewServer func(testing.TB, Script) *Server
	// Path is the streaming endpoint the server renders on.
	Path string
	// RequestIDHeader is the header that carries the request id.
	RequestIDHeader string
	// HandSeeds are bodies the renderer never produces.
	HandSeeds []string
	// Malformed is a chunk that is not JSON, in this wire's framing.
	Malformed string
	// Provider builds the provider under test on client.
	Provider func(client *http.Client) (provider.Provider, error)
}

// FuzzStream streams arbitrary bodies, answered as a 200 event stream,
// through the provider. Whatever the upstream sends, the attempt must not
// panic, must end with either a nil error and a stop reason or a
// *recovery.Failure, must close the body, and must leave no goroutine
// behind. The body is handed over by the HTTP client's transport, with no
// network in between, so that every run of an input takes the same path.
// The seeds are the server's renderings of answers and faults, and w's
// hand seeds.
func FuzzStream(f *testing.F, w StreamFuzz) {
	for _, s := range seedStreams(f, w) {
		f.Add(s)
	}
	for _, s := range w.HandSeeds {
		f.Add(s)
	}
	var ignore goleak.Option
	f.Fuzz(func(t *testing.T, sse string) {
		if ignore == nil { // the fuzzing engine's own goroutines run by now
			ignore = goleak.IgnoreCurrent()
		}
		body := &trackedBody{Reader: strings.NewReader(sse)}
		p, err := w.Provider(&http.Client{Transport: sseTransport{body: body, requestID: w.RequestIDHeader}})
		if err != nil {
			t.Fatal(err)
		}
		req := &provider.Request{Attempt: 1, Model: "fuzz-model", MaxTokens: 1024,
			Messages: []recovery.Message{recovery.UserText("Say hello.")}, Timeouts: provider.Timeouts{Total: 10 * time.Second}}
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
type sseTransport struct {
	body      *trackedBody
	requestID string
}

func (rt sseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	h.Set(rt.requestID, "req_fuzz")
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: rt.body, ContentLength: -1, Request: r}, nil
}

// seedStreams are the event streams w's server renders for answers of
// every shape and for the faults that end a body on their own (Cut,
// ErrorEvent, OmitEnd), and a cut one followed by malformed data.
func seedStreams(f *testing.F, w StreamFuzz) []string {
	f.Helper()
	full := Answer{Model: "m", Thinking: []string{"Let me ", "think."}, Signature: "sig", Redacted: []string{"opaque"},
		Text: []string{"Hel", "lo"}, Tools: []ToolCall{{ID: "call_1", Name: "search", Args: []string{`{"q":`, `"x"}`}}},
		Usage: Usage{Input: 10, Output: 5, CacheRead: 2, CacheWrite: 1}}
	tools := Answer{Text: []string{"Checking."}, Tools: []ToolCall{{ID: "call_2", Name: "lookup", Args: []string{`{}`}}}}
	limit := Answer{Text: []string{"cut", " short"}, Tools: []ToolCall{{ID: "call_3", Name: "t", Args: []string{`{"a":`}}}, Limit: true}
	replies := []Reply{
		OK(Text("Hel", "lo", "!")),
		OK(full),
		OK(tools),
		OK(limit),
		{Answer: full, Fault: Cut, After: 1},
		{Answer: full, Fault: ErrorEvent, Cond: Overloaded, After: 1},
		{Answer: tools, Fault: OmitEnd},
	}
	srv := w.NewServer(f, Seq(replies...))
	out := make([]string, 0, len(replies)+1)
	for range replies {
		out = append(out, srv.Body(f))
	}
	// The server's malformed chunk holds the body open until the client
	// stops on its own; a cut stream and a chunk that is not JSON stand in.
	return append(out, out[4]+w.Malformed)
}
