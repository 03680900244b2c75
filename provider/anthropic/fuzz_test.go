package anthropic_test

import (
	"net/http"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
)

// FuzzStreamReader streams arbitrary bodies through the provider on
// Anthropic's wire; see providertest.FuzzStream for what must hold.
func FuzzStreamReader(f *testing.F) {
	pt.FuzzStream(f, pt.StreamFuzz{
		NewServer:       pt.NewAnthropic,
		Path:            "/v1/messages",
		RequestIDHeader: "request-id",
		HandSeeds: []string{
			"",
			"\n\n",
			": comment\n\n",
			"event: ping\ndata: {\"type\": \"ping\"}\n\n",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}\n\n",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":-1}}\n\n",
			"data: not json\n\n",
		},
		Malformed: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\n\n",
		Provider: func(client *http.Client) (provider.Provider, error) {
			return anthropic.New(anthropic.Config{BaseURL: "http://upstream.invalid", APIKey: apiKey, HTTPClient: client})
		},
	})
}
