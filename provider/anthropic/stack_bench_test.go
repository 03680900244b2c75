package anthropic

import (
	"context"
	"net/http"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// senders is how many sending goroutines BenchmarkSenderStack holds at once.
const senders = 200

// BenchmarkSenderStack reports the stack that Provider.send grows a
// goroutine to (stack-B/sender): senders goroutines of their own each run
// send against a transport that holds every request until all have
// arrived, when the stacks in use are read — after the body's encoding,
// at the deepest of the SDK's request path, and with the collector off,
// so that no stack has been shrunk. It is the send path's share of the
// stack a stream's goroutine keeps for the whole answer.
func BenchmarkSenderStack(b *testing.B) {
	for name, req := range map[string]*provider.Request{"plain": stackPlain(), "conversation": stackConversation()} {
		b.Run(name, func(b *testing.B) {
			held := providertest.NewHeldTransport(senders)
			p, err := New(Config{BaseURL: "http://upstream.invalid", APIKey: "sk-bench", HTTPClient: &http.Client{Transport: held}})
			if err != nil {
				b.Fatal(err)
			}
			prepare := func() (func() (*http.Response, error), func()) {
				body, _, err := p.body(req)
				if err != nil {
					b.Fatal(err)
				}
				a := classify.Begin(context.Background(), provider.Timeouts{})
				return func() (*http.Response, error) { return p.send(a, body, false) }, a.End
			}
			var perSender float64
			for b.Loop() {
				perSender = providertest.SendersStack(b, held, senders, prepare)
			}
			b.ReportMetric(perSender, "stack-B/sender")
		})
	}
}

// stackPlain is the load benchmark's request: one user message.
func stackPlain() *provider.Request {
	return &provider.Request{Model: "claude-test", MaxTokens: 4096, Messages: []recovery.Message{recovery.UserText("Hold on.")}}
}

// stackConversation has a system prompt, thinking, an image, tool calls
// and results, a prefill and a tool with a nested schema.
func stackConversation() *provider.Request {
	req := stackPlain()
	req.System, req.Prefill = "Be brief.", "So"
	req.Messages = append(req.Messages,
		recovery.Message{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
			{Kind: recovery.BlockThinking, Text: "Zoom first.", Signature: "sig"}, recovery.TextBlock("Zooming."),
			{Kind: recovery.BlockToolUse, ToolUseID: "call_1", ToolName: "zoom", ToolInput: []byte(`{"factor":2}`)}}},
		recovery.Message{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: recovery.BlockToolResult, ToolUseID: "call_1", Text: "zoomed"},
			recovery.TextBlock("Now?"), {Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")}}})
	req.Tools = []provider.Tool{{Name: "zoom", Description: "Zooms.", InputSchema: []byte(schema)}}
	return req
}

// BenchmarkEncode is the cost of a request's body: Provider.body against
// the SDK's encoding of the params the provider built before (sdkParams
// and their MarshalJSON, as the SDK's request path calls it).
func BenchmarkEncode(b *testing.B) {
	p, err := New(Config{BaseURL: "http://upstream.invalid"})
	if err != nil {
		b.Fatal(err)
	}
	for name, req := range map[string]*provider.Request{"plain": stackPlain(), "conversation": stackConversation()} {
		b.Run(name+"/body", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.body(req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/sdk", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				params, _, err := sdkParams(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := params.MarshalJSON(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSend is the cost of a send up to the response. "post" hands a
// built body to the SDK as Provider.send does (Client.Post with the body
// as bytes); "streaming" as NewStreaming would take it (zero params, which
// it encodes by reflection and drops, a body option, and "stream": true set
// by re-parsing the body) — the body's encoding not counted in either.
// "request/…" counts it, from the provider.Request: "request/post" is
// Stream's path (Provider.body, then send), "request/streaming" the one
// before it (sdkParams, then NewStreaming encoding them).
func BenchmarkSend(b *testing.B) {
	p, err := New(Config{BaseURL: "http://upstream.invalid", APIKey: "sk-bench", HTTPClient: &http.Client{Transport: providertest.OKTransport{}}})
	if err != nil {
		b.Fatal(err)
	}
	req := stackPlain()
	body, _, err := p.body(req)
	if err != nil {
		b.Fatal(err)
	}
	svc := sdk.NewClient(p.client.Options...).Messages
	streaming := func(a *classify.Attempt, params sdk.MessageNewParams, opts ...option.RequestOption) (*http.Response, error) {
		var res *http.Response
		opts = append(opts, option.WithMiddleware(a.Middleware), option.WithResponseBodyInto(&res))
		err := svc.NewStreaming(a.Context(), params, opts...).Err()
		return res, err
	}
	sends := map[string]func(a *classify.Attempt) (*http.Response, error){
		"post": func(a *classify.Attempt) (*http.Response, error) { return p.send(a, body, false) },
		"streaming": func(a *classify.Attempt) (*http.Response, error) {
			return streaming(a, sdk.MessageNewParams{}, option.WithRequestBody("application/json", body))
		},
		"request/post": func(a *classify.Attempt) (*http.Response, error) {
			body, _, err := p.body(req)
			if err != nil {
				return nil, err
			}
			return p.send(a, body, false)
		},
		"request/streaming": func(a *classify.Attempt) (*http.Response, error) {
			params, _, err := sdkParams(req)
			if err != nil {
				return nil, err
			}
			return streaming(a, params)
		},
	}
	for _, name := range []string{"post", "streaming", "request/post", "request/streaming"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a := classify.Begin(context.Background(), provider.Timeouts{})
				res, err := sends[name](a)
				if err != nil {
					b.Fatal(err)
				}
				res.Body.Close()
				a.End()
			}
		})
	}
}
