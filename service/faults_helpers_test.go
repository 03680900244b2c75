package service

import (
	"sort"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// providerKinds are the real provider kinds every fault case runs against.
var providerKinds = []string{anthropic.Kind, openai.Kind}

// upstreamServer starts a loopback fault server speaking kind's wire.
func upstreamServer(t *testing.T, kind string, script pt.Script) *pt.Server {
	t.Helper()
	switch kind {
	case anthropic.Kind:
		return pt.NewAnthropic(t, script)
	case openai.Kind:
		return pt.NewOpenAI(t, script)
	}
	t.Fatalf("unknown provider kind %q", kind)
	return nil
}

// realProvider is the real provider of kind (on its official SDK), pointed
// at srv with apiKey. It uses the server's own HTTP client, whose
// connections close with the server, so no goroutine outlives the test.
func realProvider(t *testing.T, kind string, srv *pt.Server, apiKey string) provider.Provider {
	t.Helper()
	var (
		p   provider.Provider
		err error
	)
	switch kind {
	case anthropic.Kind:
		p, err = anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: apiKey, HTTPClient: srv.Client()})
	case openai.Kind:
		p, err = openai.New(openai.Config{BaseURL: srv.URL, APIKey: apiKey, HTTPClient: srv.Client()})
	default:
		t.Fatalf("unknown provider kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// upstreamRoute is a route served by p.
func upstreamRoute(name, model, kind string, p provider.Provider, window int, prefill bool, to provider.Timeouts, fallbacks ...string) *config.Route {
	return &config.Route{
		Spec: recovery.Route{Name: name, Provider: kind, Model: model, ContextWindow: window,
			MaxOutputTokens: 64_000, Prefill: prefill},
		Upstream:  p,
		Fallbacks: fallbacks,
		Timeouts:  to,
	}
}

// seen is one request an upstream saw, tagged with the upstream's name.
type seen struct {
	upstream string
	at       time.Time
	req      *pt.Request
}

// allRequests merges the requests of the named servers in time order: the
// attempts of one completion are sequential, so this is attempt order.
func allRequests(servers map[string]*pt.Server) []seen {
	var out []seen
	for name, s := range servers {
		if s == nil {
			continue
		}
		for _, r := range s.Requests() {
			out = append(out, seen{upstream: name, at: r.Time, req: r})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// lastMessage is the role and text of the last message of an upstream
// request body, in either wire: Anthropic content blocks or an OpenAI
// content string.
func lastMessage(t *testing.T, r *pt.Request) (role, text string) {
	t.Helper()
	msgs, _ := r.JSON(t)["messages"].([]any)
	if len(msgs) == 0 {
		t.Fatalf("request %d has no messages: %s", r.N, r.Body)
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	role, _ = m["role"].(string)
	switch c := m["content"].(type) {
	case string:
		text = c
	case []any:
		for _, b := range c {
			if bm, ok := b.(map[string]any); ok {
				if s, ok := bm["text"].(string); ok {
					text += s
				}
			}
		}
	}
	return role, text
}

// transitionEvents are the transitions of a stream, in order.
func transitionEvents(evs []*completionv1.CompletionEvent) []*completionv1.CompletionEvent {
	var out []*completionv1.CompletionEvent
	for _, ev := range evs {
		if ev.GetTransition() != nil {
			out = append(out, ev)
		}
	}
	return out
}
