package service

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
)

// TestNewParametersOnBothWiresAcrossAFallback: reasoning, the output
// schema, the cache marks and an image by URL reach the Anthropic wire as
// Anthropic takes them, and after an overload's fallback the OpenAI wire
// as OpenAI takes them — the budget as the effort it stands for, the
// schema as strict structured output, no cache marks.
func TestNewParametersOnBothWiresAcrossAFallback(t *testing.T) {
	const (
		schema = `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}`
		image  = "https://images.example.com/chart.png"
	)
	claudeSrv := upstreamServer(t, anthropic.Kind, pt.Always(pt.Fail(pt.Overloaded)))
	gptSrv := upstreamServer(t, openai.Kind, pt.Always(pt.OK(pt.Text(`{"answer":`, ` "42"}`))))
	claude := upstreamRoute("claude", "claude-sonnet-4-5", anthropic.Kind, realProvider(t, anthropic.Kind, claudeSrv, "sk-ant-test-Qw3"),
		200_000, true, generous, "gpt")
	claude.MaxThinkingBudget = 8000
	gpt := upstreamRoute("gpt", "gpt-5", openai.Kind, realProvider(t, openai.Kind, gptSrv, "sk-test-Zp9"), 200_000, false, generous)
	gpt.MaxReasoningEffort = "high"
	cfg := faultConfig(map[string]*config.Route{"claude": claude, "gpt": gpt})
	cfg.DefaultRoute = "claude"
	client, _ := grpcClient(t, cfg)
	env := &testEnv{client: client}

	req := prompt("What is the answer?", nil)
	req.Route, req.System, req.OutputJsonSchema = "claude", "Answer in JSON.", schema
	req.Reasoning = &completionv1.Reasoning{BudgetTokens: 4096}
	req.Policy = &completionv1.Policy{OverloadsBeforeFallback: proto.Int32(1)}
	req.Messages[0].Content = append(req.Messages[0].Content,
		&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{Image: &completionv1.ImageBlock{Url: image}}})
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := transitions(evs); !slices.Contains(got, "MODEL_FALLBACK") || res.GetRoute() != "gpt" || resultText(res) != `{"answer": "42"}` {
		t.Fatalf("transitions %v, answered by %q: %q", got, res.GetRoute(), resultText(res))
	}

	c := bodyOf(t, claudeSrv.Request(t, 1).Body)
	if th := c["thinking"].(map[string]any); th["type"] != "enabled" || th["budget_tokens"] != 4096.0 {
		t.Errorf("anthropic thinking %v, want enabled with 4096", th)
	}
	if f := c["output_config"].(map[string]any)["format"].(map[string]any); f["type"] != "json_schema" || f["schema"] == nil {
		t.Errorf("anthropic output_config.format %v", f)
	}
	system := c["system"].([]any)[0].(map[string]any)
	last := lastBlock(c)
	if system["cache_control"] == nil || last["cache_control"] == nil {
		t.Errorf("anthropic cache marks: system %v, the prompt's last block %v", system, last)
	}
	if src := last["source"].(map[string]any); last["type"] != "image" || src["type"] != "url" || src["url"] != image {
		t.Errorf("anthropic image block %v", last)
	}

	g := bodyOf(t, gptSrv.Request(t, 1).Body)
	if g["reasoning_effort"] != "medium" {
		t.Errorf("openai reasoning_effort %v, want medium (a budget of 4096)", g["reasoning_effort"])
	}
	rf := g["response_format"].(map[string]any)
	if js := rf["json_schema"].(map[string]any); rf["type"] != "json_schema" || js["strict"] != true || js["schema"] == nil {
		t.Errorf("openai response_format %v, want a strict json_schema", rf)
	}
	if raw := string(gptSrv.Request(t, 1).Body); strings.Contains(raw, "cache_control") || !strings.Contains(raw, `"url":"`+image+`"`) {
		t.Errorf("openai body %s: want no cache marks and the image by its URL", raw)
	}
}

func bodyOf(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	return body
}

// lastBlock is the last content block of the last message of an Anthropic
// body.
func lastBlock(body map[string]any) map[string]any {
	msgs := body["messages"].([]any)
	content := msgs[len(msgs)-1].(map[string]any)["content"].([]any)
	return content[len(content)-1].(map[string]any)
}
