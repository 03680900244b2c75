package openai

import (
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"
)

// tokenChunk is a chunk as OpenAI streams one token, with
// stream_options.include_usage.
const tokenChunk = `{"id":"chatcmpl-BXjv5Zy3aVvIUnf0uCWbbbNQWbAGu","object":"chat.completion.chunk","created":1747236303,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}`

// stdChunk is the alternative to chunk.decode measured beside it: only the
// fields the reader uses, decoded by encoding/json. It is stricter than the
// SDK about types, which chunk.decode is not, and slower.
type stdChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index int64 `json:"index"`
		Delta struct {
			Content          string `json:"content"`
			Refusal          string `json:"refusal"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			ToolCalls        []struct {
				Index    int64  `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens     int64 `json:"cached_tokens"`
			CacheWriteTokens int64 `json:"cache_write_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// benchText keeps the text a benchmark copied out, as the reader emits it.
var benchText string

// BenchmarkDecode decodes one token's chunk: as the SDK's stream did (a
// gjson look for "error", then encoding/json into the SDK's chunk, which
// runs apijson), with encoding/json into the few fields used, and with
// chunk.decode. The text is copied out in each, as the reader emits it.
func BenchmarkDecode(b *testing.B) {
	data := []byte(tokenChunk)
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if gjson.GetBytes(data, "error").Exists() {
				b.Fatal("error")
			}
			var c sdk.ChatCompletionChunk
			if err := json.Unmarshal(data, &c); err != nil || c.Choices[0].Delta.Content != " word" {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c stdChunk
			if err := json.Unmarshal(data, &c); err != nil || c.Choices[0].Delta.Content != " word" {
				b.Fatal(err)
			}
		}
	})
	b.Run("lean", func(b *testing.B) {
		b.ReportAllocs()
		var c chunk
		for b.Loop() {
			if err := c.decode(data); err != nil {
				b.Fatal(err)
			}
			benchText = strings.Clone(c.Choices[0].Delta.Content)
		}
	})
}
