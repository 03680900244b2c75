package anthropic

import (
	"context"
	"errors"
	"net/http"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/provider/sse"
	"github.com/completiond/completiond/recovery"
)

// Kind is the provider kind this package serves.
const Kind = "anthropic"

// DefaultBaseURL is the API's address, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.anthropic.com"

// messagesPath is the Messages endpoint, under the base URL: the path the
// SDK's MessageService.NewStreaming posts to.
const messagesPath = "v1/messages"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API's address, without /v1 (DefaultBaseURL when empty).
	BaseURL string
	// APIKey is sent as x-api-key. It never appears in a failure.
	APIKey string
	// HTTPClient makes the calls; nil means classify.NewClient's, a transport
	// of the provider's own keeping MaxIdleConnsPerHost idle connections.
	// Its Timeout should be zero: a stream lasts as long as the answer, and
	// Request.Timeouts bound each attempt.
	HTTPClient *http.Client
	// MaxIdleConnsPerHost is how many idle connections to the upstream the
	// provider's own client keeps for the next calls
	// (classify.DefaultIdleConnsPerHost when zero). Unused with HTTPClient.
	MaxIdleConnsPerHost int
}

// Provider streams attempts to Anthropic's Messages API.
type Provider struct {
	client  sdk.Client // its Options only: see New
	classes classify.Classifier
	base    string
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	base, err := classify.BaseURL(Kind, cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = classify.NewClient(cfg.MaxIdleConnsPerHost)
	}
	// The client is built without sdk.NewClient, which would build every
	// service, and without the environment's defaults: the route's config
	// is the only source of address and key, never ANTHROPIC_* variables or
	// profile files. The options are those NewClient would have given the
	// services (WithEnvironmentProduction first, as it puts it). send uses
	// them through Client.Post, and none of the services.
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Provider{
		client:  sdk.Client{Options: opts},
		classes: classify.Classifier{Provider: Kind, RequestIDHeader: "request-id", Secrets: []string{cfg.APIKey}},
		base:    base,
	}, nil
}

// Kind returns "anthropic".
func (p *Provider) Kind() string { return Kind }

// Address is the host and port of the base URL (provider.Addressed).
func (p *Provider) Address() (string, int) { return provider.HostPort(p.base) }

// Stream runs one attempt: a streamed Messages call under req.Timeouts.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	body, held, err := p.body(req)
	if err != nil {
		return provider.Finish{}, p.classes.Invalid(err)
	}
	if err := structuredPrefill(req); err != nil {
		return provider.Finish{}, err
	}
	a := classify.Begin(ctx, req.Timeouts)
	defer a.End()
	if req.Prefill != "" {
		a.Prefilled()
	}
	res, err := p.send(a, body, interleaved(req))
	if res != nil && res.Body != nil {
		defer res.Body.Close()
	}

	s := newReader(a, &p.classes, a.Emitter(emit), held, req)
	if err == nil {
		events := sse.NewReader(res.Body, sse.MaxEvent)
		var ev event
		for events.Next() {
			e := events.Event()
			// As the SDK's stream: an event without a name, a ping and one
			// without data are skipped, whatever their data says; an error
			// event ends the stream.
			switch string(e.Type) {
			case "", "ping":
				continue
			case "error":
				return s.finish, withMediaBlocks(req, p.failure(a, &sse.ErrorEvent{Data: e.Data}))
			}
			if len(e.Data) == 0 {
				continue
			}
			if err = ev.decode(e.Data); err != nil {
				break
			}
			if err := s.event(&ev); err != nil {
				return s.finish, err
			}
			if s.stopped {
				a.Drain() // the body's end: the connection is kept
				return s.finish, s.end()
			}
		}
		if err == nil {
			err = events.Err()
		}
	}
	if err == nil && s.finish.StopReason != recovery.StopNone {
		// message_delta carried the stop reason and the body ended cleanly:
		// the answer is whole, only the terminator is missing — as with an
		// OpenAI stream without [DONE], throwing it away would cost a retry.
		return s.finish, s.end()
	}
	return s.finish, withMediaBlocks(req, p.failure(a, err))
}

// send sends the attempt's request and returns the response with its body
// unread. The SDK builds and sends the request — auth, anthropic-version,
// base URL, the attempt's middleware, an error status read into its error —
// and, with a raw response as the destination, leaves the 200's body
// unread: the stream is decoded by Stream, reading only what the reader
// uses, at a fraction of the SDK's cost per event (package sse).
//
// The body goes as bytes through the client's generic call (Client.Post),
// as the openai provider's does: the streaming method
// (MessageService.NewStreaming) takes params, which it encodes by
// reflection on every request, growing the goroutine's stack on the way to
// the first token, and then sets "stream": true by re-parsing the body
// (sjson). The provider's body (body) carries "stream": true itself;
// BenchmarkSend compares the two calls, and the parity tests
// (body_test.go) hold the request to the one NewStreaming sends, headers
// included.
//
// beta adds the anthropic-beta header of interleaved thinking.
func (p *Provider) send(a *classify.Attempt, body []byte, beta bool) (*http.Response, error) {
	var res *http.Response
	opts := []option.RequestOption{option.WithMiddleware(a.Middleware)}
	if beta {
		opts = append(opts, option.WithHeaderAdd("anthropic-beta", interleavedBeta))
	}
	err := p.client.Post(a.Context(), messagesPath, body, &res, opts...)
	return res, err
}

// errNoStop is why a stream that ended cleanly but without message_stop failed.
var errNoStop = errors.New("stream ended before message_stop")

// failure classifies how a stream that did not reach message_stop ended:
// err is the request's error, the stream's, or nil for its end.
func (p *Provider) failure(a *classify.Attempt, err error) error {
	var ev *sse.ErrorEvent
	if errors.As(err, &ev) {
		return a.StreamError(&p.classes, ev.Data)
	}
	if err == nil {
		err = errNoStop
	}
	return a.Failure(&p.classes, err)
}
