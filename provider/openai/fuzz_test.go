package openai_test

import (
	"net/http"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
)

// FuzzStreamReader streams arbitrary bodies through the provider on
// OpenAI's wire; see providertest.FuzzStream for what must hold.
func FuzzStreamReader(f *testing.F) {
	pt.FuzzStream(f, pt.StreamFuzz{
		NewServer:       pt.NewOpenAI,
		Path:            "/chat/completions",
		RequestIDHeader: "x-request-id",
		HandSeeds: []string{
			"",
			"\n\n",
			": keep-alive\n\n",
			"data: [DONE]\n\n",
			"data: {}\n\ndata: [DONE]\n\n",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":-5}}\n\n",
			"data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n",
			"data: {\"error\":{\"message\":\"Timeout while downloading https://example.com/a.png.\",\"type\":\"invalid_request_error\",\"param\":\"messages[0].content[1]\",\"code\":\"invalid_image_url\"}}\n\n",
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":12,\"cache_write_tokens\":3}}}\n\n",
			"data: not json\n\n",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\",\"stop_reason\":\"###\"}]}\n\ndata: [DONE]\n\n",
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\",\"stop_reason\":128009}]}\n\n",
		},
		Malformed: "data: {\"choices\":[{\"delta\":\n\n",
		Provider: func(client *http.Client) (provider.Provider, error) {
			return openai.New(openai.Config{BaseURL: "http://upstream.invalid/v1", APIKey: apiKey, HTTPClient: client})
		},
	})
}
