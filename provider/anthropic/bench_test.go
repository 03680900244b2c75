package anthropic_test

import (
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
)

// BenchmarkStream is the cost per streamed chunk of an answer through the
// provider, from a server on loopback (providertest.BenchStream).
func BenchmarkStream(b *testing.B) {
	pt.BenchStream(b, pt.NewAnthropic, func(srv *pt.Server) (provider.Provider, error) {
		return anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: apiKey, HTTPClient: srv.Client()})
	})
}
