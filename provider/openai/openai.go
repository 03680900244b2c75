package openai

import (
	"context"
	"errors"
	"net/http"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
)

// Kind is the provider kind this package serves.
const Kind = "openai"

// DefaultBaseURL is OpenAI's address, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API's address including its /v1, e.g.
	// http://localhost:8000/v1 for vLLM (DefaultBaseURL when empty).
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (a local server).
	// It never appears in a failure.
	APIKey string
	// HTTPClient makes the calls; nil means a client on http.DefaultTransport.
	// Its Timeout should be zero: a stream lasts as long as the answer, and
	// Request.Timeouts bound each attempt.
	HTTPClient *http.Client
	// LegacyMaxTokens sends max_tokens instead of max_completion_tokens, for
	// servers that predate the newer field.
	LegacyMaxTokens bool
	// ContinueFinalMessage asks, when a request has a prefill, that the
	// final assistant message be continued rather than answered (vLLM's
	// continue_final_message and add_generation_prompt=false). OpenAI
	// refuses these fields.
	ContinueFinalMessage bool
}

// Provider streams attempts to a Chat Completions server.
type Provider struct {
	completions sdk.ChatCompletionService
	classes     classify.Classifier
	legacyMax   bool
	continueMsg bool
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
		hc = &http.Client{}
	}
	// The service is built without sdk.NewClient, which would read the
	// OPENAI_* variables: the route's config is the only source.
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Provider{
		completions: sdk.NewChatCompletionService(opts...),
		classes:     classify.Classifier{Provider: Kind, RequestIDHeader: "x-request-id", Secrets: []string{cfg.APIKey}},
		legacyMax:   cfg.LegacyMaxTokens,
		continueMsg: cfg.ContinueFinalMessage,
	}, nil
}

// Kind returns "openai".
func (p *Provider) Kind() string { return Kind }

// Stream runs one attempt: a streamed chat completion under req.Timeouts.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	params, err := p.newParams(req)
	if err != nil {
		return provider.Finish{}, p.classes.Invalid(err)
	}
	a := classify.Begin(ctx, req.Timeouts)
	defer a.End()
	opts := []option.RequestOption{option.WithMiddleware(a.Middleware)}
	if req.Prefill != "" && p.continueMsg {
		opts = append(opts,
			option.WithJSONSet("continue_final_message", true),
			option.WithJSONSet("add_generation_prompt", false))
	}
	stream := p.completions.NewStreaming(a.Context(), params, opts...)
	defer stream.Close()

	r := newReader(a, a.Emitter(emit))
	for stream.Next() {
		if err := r.chunk(stream.Current()); err != nil {
			return r.finish, err
		}
		if r.complete() {
			return r.finish, nil
		}
	}
	return r.finish, p.end(a, r, stream.Err())
}

// end decides how a stream that stopped before it was complete ended.
func (p *Provider) end(a *classify.Attempt, r *reader, err error) error {
	if err := a.CallerErr(); err != nil {
		return err
	}
	if r.finished() {
		// The answer had its finish_reason; what followed ([DONE], the end
		// of the body, a silence) could add nothing but usage.
		return nil
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return a.StreamError(&p.classes, streamErr.Event.Data)
	}
	if err == nil {
		err = errNoFinish
	}
	return a.Failure(&p.classes, err)
}

// errNoFinish is why a stream that ended cleanly but without a finish_reason failed.
var errNoFinish = errors.New("stream ended before a finish_reason")
