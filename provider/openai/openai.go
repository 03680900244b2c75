package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/provider/sse"
)

// Kind is the provider kind this package serves.
const Kind = "openai"

// DefaultBaseURL is OpenAI's address, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// completionsPath is the Chat Completions endpoint, under the base URL.
const completionsPath = "chat/completions"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API's address including its /v1, e.g.
	// http://localhost:8000/v1 for vLLM (DefaultBaseURL when empty).
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (a local server).
	// It never appears in a failure.
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
	// LegacyMaxTokens sends max_tokens instead of max_completion_tokens, for
	// servers that know only the older field (Ollama). OpenAI's reasoning
	// models refuse max_tokens: a route to them must not set it.
	LegacyMaxTokens bool
	// PrefillBody are JSON fields set at the top level of the request body
	// when a request carries a prefill, asking the server to continue the
	// final assistant message rather than answer it. nil means
	// DefaultPrefillBody() for a compatible server (BaseURL set) and
	// nothing for OpenAI's own API, which has no such option and answers a
	// final assistant message afresh; an empty map sends nothing. Keys are
	// plain field names; values are anything encoding/json can encode.
	PrefillBody map[string]any
}

// DefaultPrefillBody is vLLM's (and transformers') way to continue a final
// assistant message: {"continue_final_message": true,
// "add_generation_prompt": false}. vLLM without it renders a generation
// prompt after the message and answers afresh, repeating what the prefill
// said. Recent llama-server accepts the same pair as an alias of its own
// prefill (on by default for a final assistant message unless started with
// --no-prefill-assistant); servers that do not know the fields ignore them.
func DefaultPrefillBody() map[string]any {
	return map[string]any{"continue_final_message": true, "add_generation_prompt": false}
}

// fieldName is what a PrefillBody key must look like: a plain top-level
// field, which sjson (behind option.WithJSONSet) takes as it is.
var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// prefillOptions turns the prefill body into request options, in key order.
func prefillOptions(cfg Config) ([]option.RequestOption, error) {
	body := cfg.PrefillBody
	if body == nil && cfg.BaseURL != "" {
		body = DefaultPrefillBody()
	}
	var opts []option.RequestOption
	for _, k := range slices.Sorted(maps.Keys(body)) {
		if !fieldName.MatchString(k) {
			return nil, fmt.Errorf("openai: prefill body key %q is not a plain field name", k)
		}
		if _, err := json.Marshal(body[k]); err != nil {
			return nil, fmt.Errorf("openai: prefill body field %q: %w", k, err)
		}
		opts = append(opts, option.WithJSONSet(k, body[k]))
	}
	return opts, nil
}

// Provider streams attempts to a Chat Completions server.
type Provider struct {
	client      sdk.Client // its Options only: see New
	classes     classify.Classifier
	legacyMax   bool
	prefillOpts []option.RequestOption // set on a request that carries a prefill
	base        string
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	base, err := classify.BaseURL(Kind, cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	prefillOpts, err := prefillOptions(cfg)
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = classify.NewClient(cfg.MaxIdleConnsPerHost)
	}
	// The client is built without sdk.NewClient, which would read the
	// OPENAI_* variables (an admin key among them): the route's config is
	// the only source. send uses its Options, through Client.Post, and
	// none of its services.
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Provider{
		client:      sdk.Client{Options: opts},
		classes:     classify.Classifier{Provider: Kind, RequestIDHeader: "x-request-id", Secrets: []string{cfg.APIKey}},
		legacyMax:   cfg.LegacyMaxTokens,
		prefillOpts: prefillOpts,
		base:        base,
	}, nil
}

// Kind returns "openai".
func (p *Provider) Kind() string { return Kind }

// Address is the host and port of the base URL (provider.Addressed).
func (p *Provider) Address() (string, int) { return provider.HostPort(p.base) }

// Stream runs one attempt: a streamed chat completion under req.Timeouts.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	body, err := p.body(req)
	if err != nil {
		return provider.Finish{}, p.classes.Invalid(err)
	}
	a := classify.Begin(ctx, req.Timeouts)
	defer a.End()
	if req.Prefill != "" {
		a.Prefilled()
	}
	res, err := p.send(a, body, req.Prefill != "")
	if res != nil && res.Body != nil {
		defer res.Body.Close()
	}

	r := newReader(a, a.Emitter(emit))
	r.classes = &p.classes
	r.stops = req.StopSequences
	if err == nil {
		events := sse.NewReader(res.Body, sse.MaxEvent)
		var c chunk
		for events.Next() {
			data := events.Event().Data
			if bytes.HasPrefix(data, done) {
				break
			}
			if err = c.decode(data); err != nil {
				break
			}
			if err := r.chunk(&c); err != nil {
				return r.finish, err
			}
			if r.complete() {
				a.Drain() // [DONE] and the body's end: the connection is kept
				return r.finish, nil
			}
		}
		if err == nil {
			err = events.Err()
		}
	}
	err = p.end(a, r, req, err)
	if err == nil {
		a.Drain()
	}
	return r.finish, err
}

// send sends the attempt's request and returns the response with its
// body unread. The SDK builds and sends the request — auth, base URL, the
// attempt's middleware, the prefill fields set in the body, an error status
// read into its error — and, with a raw response as the destination, leaves
// the 200's body unread: the stream is decoded by Stream, reading only what
// the reader uses, at a fraction of the SDK's cost per chunk (package sse).
//
// The body goes as bytes through the client's generic call (Client.Post):
// the streaming method (ChatCompletionService.NewStreaming) takes params,
// whose zero value it encodes by reflection before a body option replaces
// it, and then sets "stream": true by re-parsing the body (sjson), all of
// it on the way to the first token; BenchmarkSend compares the two calls.
// The provider's body carries "stream": true itself; the parity tests hold
// the request to the one NewStreaming sends, headers included.
//
// It runs on the goroutine that then reads the stream. Sending from a
// goroutine of its own would keep that goroutine's stack small (the send
// path grows it, and a grown stack stays so for the whole answer), but the
// hand-over to and from it delays the first token more than it saves in
// memory (make loadbench measures both). The body the provider encodes
// (Provider.body) keeps the send path's own stack small
// (BenchmarkSenderStack).
func (p *Provider) send(a *classify.Attempt, body []byte, prefill bool) (*http.Response, error) {
	var res *http.Response
	opts := []option.RequestOption{option.WithMiddleware(a.Middleware)}
	if prefill {
		opts = append(opts, p.prefillOpts...)
	}
	err := p.client.Post(a.Context(), completionsPath, body, &res, opts...)
	return res, err
}

// end decides how a stream that stopped before it was complete ended: err
// is the request's error, the stream's, or nil for its end or [DONE]. A
// rejected image is located in req (locateMedia).
func (p *Provider) end(a *classify.Attempt, r *reader, req *provider.Request, err error) error {
	if err := a.CallerErr(); err != nil {
		return err
	}
	if r.finished() {
		// The answer had its finish_reason; what followed ([DONE], the end
		// of the body, a silence) could add nothing but usage.
		return nil
	}
	var ev *sse.ErrorEvent
	if errors.As(err, &ev) {
		return locateMedia(a.StreamError(&p.classes, ev.Data), req, eventErrorFields(ev.Data))
	}
	if err == nil {
		err = errNoFinish
	}
	return locateMedia(a.Failure(&p.classes, err), req, apiErrorFields(err))
}

// errNoFinish is why a stream that ended cleanly but without a finish_reason failed.
var errNoFinish = errors.New("stream ended before a finish_reason")
