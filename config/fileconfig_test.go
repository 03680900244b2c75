package config

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
)

// fakeProvider stands in for a real provider kind in configuration tests.
type fakeProvider struct {
	spec ProviderSpec
}

func (f *fakeProvider) Kind() string { return f.spec.Kind }

func (f *fakeProvider) Stream(context.Context, *provider.Request, func(provider.Chunk) error) (provider.Finish, error) {
	return provider.Finish{}, nil
}

var fakeFactories = map[string]Factory{
	"anthropic": func(s ProviderSpec) (provider.Provider, error) { return &fakeProvider{s}, nil },
	"openai":    func(s ProviderSpec) (provider.Provider, error) { return &fakeProvider{s}, nil },
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "completiond.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodConfig = `
default_route: claude
providers:
  anthropic: {kind: anthropic, api_key: "${TEST_ANTHROPIC_KEY}"}
  local: {kind: openai, base_url: "http://127.0.0.1:8000/v1"}
routes:
  claude:
    provider: anthropic
    model: claude-sonnet-4-5
    context_window: 200000
    max_output_tokens: 64000
    prefill: true
    fallbacks: [local, big]
    timeouts: {headers: 5s, first_token: 2m}
  thinker: {provider: anthropic, model: claude-sonnet-4-5, prefill: true, thinking_budget: 16000}
  local: {provider: local, model: qwen3, context_window: 32768}
  reasoner: {provider: local, model: qwq, max_reasoning_effort: medium, structured_output: hook}
  forced: {provider: anthropic, model: claude-haiku-3-5, max_thinking_budget: 8000, structured_output: tool}
  big: {provider: local, model: qwen3-long, context_window: 1000000}
circuit_breaker: {failures: 3, cooldown: 10s}
`

func TestLoadFileBuildsRoutes(t *testing.T) {
	env := func(k string) string { return map[string]string{"TEST_ANTHROPIC_KEY": "sk-ant-test"}[k] }
	cfg, err := LoadFile(writeConfig(t, goodConfig), Default(), env, fakeFactories)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Routes["claude"]
	if cfg.DefaultRoute != "claude" || c == nil || c.Spec.Model != "claude-sonnet-4-5" || !c.Spec.Prefill ||
		c.Spec.ContextWindow != 200000 || strings.Join(c.Fallbacks, ",") != "local,big" {
		t.Fatalf("claude route %+v", c)
	}
	if c.Timeouts.Headers != 5*time.Second || c.Timeouts.FirstToken != 2*time.Minute || c.Timeouts.Idle != DefaultTimeouts().Idle {
		t.Errorf("timeouts %+v", c.Timeouts)
	}
	if key := c.Upstream.(*fakeProvider).spec.APIKey; key != "sk-ant-test" {
		t.Errorf("api key %q was not expanded from the environment", key)
	}
	if cfg.Routes["sim"] == nil {
		t.Error("the sim routes must stay available")
	}
	if th := cfg.Routes["thinker"]; th.ThinkingBudget != 16000 || !th.Spec.Thinking {
		t.Errorf("thinker route: budget %d, Spec.Thinking %t", th.ThinkingBudget, th.Spec.Thinking)
	}
	if c.ThinkingBudget != 0 || c.Spec.Thinking || c.Capabilities().Reasons() {
		t.Errorf("claude route thinks without thinking_budget: %+v", c)
	}
	if th := cfg.Routes["thinker"]; th.MaxThinkingBudget != 16000 {
		t.Errorf("thinker route: ceiling %d, want its thinking_budget", th.MaxThinkingBudget)
	}
	if r := cfg.Routes["reasoner"]; r.MaxReasoningEffort != "medium" || r.StructuredOutput != provider.StructuredHook || r.Spec.Thinking {
		t.Errorf("reasoner route %+v", r)
	}
	if f := cfg.Routes["forced"]; f.MaxThinkingBudget != 8000 || f.ThinkingBudget != 0 || f.StructuredOutput != provider.StructuredTool {
		t.Errorf("forced route %+v", f)
	}
	if c.StructuredOutput != provider.StructuredNative {
		t.Errorf("claude route: structured output %v, want native by default", c.StructuredOutput)
	}
	// The capabilities say the route's one way, not its kind's choice.
	for name, want := range map[string]string{"claude": StructuredNatively, "reasoner": StructuredByStopHook, "forced": StructuredByTool} {
		if got := cfg.Routes[name].Capabilities().StructuredOutput; got != want {
			t.Errorf("route %s: capabilities say structured output %q, want %q", name, got, want)
		}
	}
	if cfg.Breaker.Failures != 3 || cfg.Breaker.Cooldown != 10*time.Second {
		t.Errorf("breaker %+v", cfg.Breaker)
	}
}

func TestInvalidFileNamesTheField(t *testing.T) {
	env := func(k string) string { return map[string]string{"TEST_ANTHROPIC_KEY": "sk-ant-test"}[k] }
	tests := []struct{ name, body, want string }{
		{"unknown field", "routes:\n  a: {provider: x, modle: y}\n", "modle"},
		{"unknown provider", "routes:\n  a: {provider: nope, model: m}\n", "routes.a.provider"},
		{"unknown kind", "providers:\n  p: {kind: gemini}\n", "providers.p.kind"},
		{"unset key variable", "providers:\n  p: {kind: anthropic, api_key: \"${NOT_SET_ANYWHERE}\"}\n", "NOT_SET_ANYWHERE"},
		{"missing model", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p}\n", "routes.a.model"},
		{"bad timeout", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, timeouts: {idle: soon}}\n", "routes.a.timeouts.idle"},
		{"unknown fallback", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, fallbacks: [zz]}\n", "zz"},
		{"unknown default", "default_route: zz\n", "zz"},
		{"bad cooldown", "circuit_breaker: {cooldown: x}\n", "circuit_breaker.cooldown"},
		{"thinking budget under the minimum", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, thinking_budget: 1000}\n", "routes.a.thinking_budget"},
		{"negative thinking budget", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, thinking_budget: -1}\n", "routes.a.thinking_budget"},
		{"effort ceiling on anthropic", "providers:\n  p: {kind: anthropic, api_key: k}\nroutes:\n  a: {provider: p, model: m, max_reasoning_effort: low}\n", "routes.a.max_reasoning_effort"},
		{"budget ceiling on openai", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, max_thinking_budget: 4096}\n", "routes.a.max_thinking_budget"},
		{"budget ceiling under the budget", "providers:\n  p: {kind: anthropic, api_key: k}\nroutes:\n  a: {provider: p, model: m, thinking_budget: 8000, max_thinking_budget: 4096}\n", "routes.a.max_thinking_budget"},
		{"unknown effort", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, max_reasoning_effort: extreme}\n", "routes.a.max_reasoning_effort"},
		{"structured tool on openai", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, structured_output: tool}\n", "routes.a.structured_output"},
		{"unknown structured output", "providers:\n  p: {kind: openai}\nroutes:\n  a: {provider: p, model: m, structured_output: magic}\n", "routes.a.structured_output"},
		{"not yaml", "routes: [\n", "completiond.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadFile(writeConfig(t, tt.body), Default(), env, fakeFactories)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestEnvRoutes(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"ANTHROPIC_API_KEY": "sk-ant-x", "OPENAI_API_KEY": "sk-x"}[k]
	}
	cfg, err := EnvRoutes(Default(), env, fakeFactories)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultRoute != "claude" || cfg.Routes["gpt"] == nil || cfg.Routes["claude"].Fallbacks[0] != "gpt" || cfg.Routes["sim"] == nil {
		t.Errorf("routes %v default %q", SortedKeys(cfg.Routes), cfg.DefaultRoute)
	}
	none, err := EnvRoutes(Default(), func(string) string { return "" }, fakeFactories)
	if err != nil || none.DefaultRoute != "sim" {
		t.Errorf("without keys: default %q err %v, want sim", none.DefaultRoute, err)
	}
}

func TestPrefillBody(t *testing.T) {
	vllm := DefaultPrefillBody()
	for _, tc := range []struct {
		name     string
		provider string // the YAML of provider p
		want     map[string]any
	}{
		{"openai with a base_url: vLLM's fields by default", `{kind: openai, base_url: "http://127.0.0.1:8000/v1"}`, vllm},
		{"openai without a base_url: none", `{kind: openai}`, nil},
		{"an override", `{kind: openai, base_url: "http://127.0.0.1:8080/v1", prefill_body: {continue_final_message: true, add_generation_prompt: false, chat_template_kwargs: {enable_thinking: false}}}`,
			map[string]any{"continue_final_message": true, "add_generation_prompt": false, "chat_template_kwargs": map[string]any{"enable_thinking": false}}},
		{"an empty override sends nothing", `{kind: openai, base_url: "http://127.0.0.1:8080/v1", prefill_body: {}}`, map[string]any{}},
		{"anthropic: none", `{kind: anthropic, api_key: k}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "providers:\n  p: " + tc.provider + "\nroutes:\n  r: {provider: p, model: m}\n"
			cfg, err := LoadFile(writeConfig(t, body), Default(), func(string) string { return "" }, fakeFactories)
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Routes["r"].Upstream.(*fakeProvider).spec.PrefillBody
			if !reflect.DeepEqual(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("prefill body %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestPrefillMustBeSomethingTheUpstreamCanContinue(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"prefill on OpenAI's own API", "providers:\n  p: {kind: openai}\nroutes:\n  gpt: {provider: p, model: m, prefill: true}\n", "routes.gpt.prefill"},
		{"prefill_body on anthropic", "providers:\n  p: {kind: anthropic, api_key: k, prefill_body: {x: 1}}\n", "providers.p.prefill_body"},
		{"prefill_body key that is a path", "providers:\n  p: {kind: openai, base_url: \"http://h/v1\", prefill_body: {a.b: 1}}\n", "providers.p.prefill_body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadFile(writeConfig(t, tt.body), Default(), func(string) string { return "" }, fakeFactories)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
	// A compatible server may continue a prefill.
	ok := "providers:\n  p: {kind: openai, base_url: \"http://127.0.0.1:8000/v1\"}\nroutes:\n  local: {provider: p, model: m, prefill: true}\n"
	cfg, err := LoadFile(writeConfig(t, ok), Default(), func(string) string { return "" }, fakeFactories)
	if err != nil || !cfg.Routes["local"].Spec.Prefill {
		t.Fatalf("err %v", err)
	}
}
