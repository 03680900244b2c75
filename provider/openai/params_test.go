package openai

import (
	"bytes"
	"maps"
	"math"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// paramsRequests are requests carrying sampling, stop sequences and tool
// choices: each field alone, with its edge values, and together.
func paramsRequests() map[string]*provider.Request {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	req := func(edit func(*provider.Request)) *provider.Request {
		r := &provider.Request{Model: "gpt-test", MaxTokens: 256, Messages: []recovery.Message{recovery.UserText("Hi.")}}
		edit(r)
		return r
	}
	sampling := func(s provider.Sampling) *provider.Request {
		return req(func(r *provider.Request) { r.Sampling = s })
	}
	stop := func(s ...string) *provider.Request { return req(func(r *provider.Request) { r.StopSequences = s }) }
	choice := func(c provider.ToolChoice) *provider.Request {
		return req(func(r *provider.Request) {
			r.ToolChoice = c
			r.Tools = []provider.Tool{{Name: "zoom", InputSchema: []byte(`{"type":"object"}`)}}
		})
	}
	return map[string]*provider.Request{
		"temperature 0":           sampling(provider.Sampling{Temperature: f(0)}),
		"temperature 2":           sampling(provider.Sampling{Temperature: f(2)}),
		"temperature 0.7":         sampling(provider.Sampling{Temperature: f(0.7)}),
		"temperature 0.1+0.2":     sampling(provider.Sampling{Temperature: f(0.1 + 0.2)}),
		"temperature -0":          sampling(provider.Sampling{Temperature: f(math.Copysign(0, -1))}),
		"temperature tiny":        sampling(provider.Sampling{Temperature: f(1e-7)}),
		"temperature at 1e-6":     sampling(provider.Sampling{Temperature: f(1e-6)}),
		"temperature huge":        sampling(provider.Sampling{Temperature: f(1e21)}),
		"temperature subnormal":   sampling(provider.Sampling{Temperature: f(5e-324)}),
		"temperature NaN":         sampling(provider.Sampling{Temperature: f(math.NaN())}),
		"top_p +Inf":              sampling(provider.Sampling{TopP: f(math.Inf(1))}),
		"top_p 1":                 sampling(provider.Sampling{TopP: f(1)}),
		"top_p 0.95":              sampling(provider.Sampling{TopP: f(0.95)}),
		"top_p 0":                 sampling(provider.Sampling{TopP: f(0)}),
		"seed 0":                  sampling(provider.Sampling{Seed: i(0)}),
		"seed negative":           sampling(provider.Sampling{Seed: i(-1)}),
		"seed min":                sampling(provider.Sampling{Seed: i(math.MinInt64)}),
		"seed max":                sampling(provider.Sampling{Seed: i(math.MaxInt64)}),
		"top_k is not sent":       sampling(provider.Sampling{TopK: 40}),
		"all sampling":            sampling(provider.Sampling{Temperature: f(0.7), TopP: f(0.9), TopK: 5, Seed: i(1234567890123)}),
		"one stop sequence":       stop("\n\n"),
		"four stop sequences":     stop("END", "</s>", "<|im_end|>", "Q:"),
		"stop quotes and escapes": stop(`"quoted"`, `back\slash`, "tab\tnew\nline\r", "\x00\x1f\x7f"),
		"stop HTML":               stop("<b>", "a & b", "x > y", "&amp;"),
		"stop unicode":            stop("é", "😀", "日本", "\u2028\u2029"),
		"stop not UTF-8":          stop("\xff", "a\xe2\x82", "\xed\xa0\x80"),
		"stop empty":              stop(""),
		"stop none":               stop(),
		"tool choice auto":        choice(provider.ToolChoice{Mode: provider.ToolChoiceAuto}),
		"tool choice any":         choice(provider.ToolChoice{Mode: provider.ToolChoiceAny}),
		"tool choice none":        choice(provider.ToolChoice{Mode: provider.ToolChoiceNone}),
		"tool choice tool":        choice(provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom"}),
		"tool choice tool escaped": choice(provider.ToolChoice{Mode: provider.ToolChoiceTool,
			Name: "a\"<b>&\n\u2028é\xff"}),
		"tool choice tool no name":    choice(provider.ToolChoice{Mode: provider.ToolChoiceTool}),
		"tool choice unknown":         choice(provider.ToolChoice{Mode: 99}),
		"name without the tool mode":  choice(provider.ToolChoice{Mode: provider.ToolChoiceAuto, Name: "zoom"}),
		"parallel disabled":           choice(provider.ToolChoice{DisableParallel: true}),
		"parallel disabled, any":      choice(provider.ToolChoice{Mode: provider.ToolChoiceAny, DisableParallel: true}),
		"parallel disabled, tool":     choice(provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom", DisableParallel: true}),
		"parallel disabled, no tools": req(func(r *provider.Request) { r.ToolChoice.DisableParallel = true }),
		"tool choice none, no tools":  req(func(r *provider.Request) { r.ToolChoice.Mode = provider.ToolChoiceNone }),
		"NaN and an invalid schema": req(func(r *provider.Request) {
			r.Sampling.TopP = f(math.NaN())
			r.Tools = []provider.Tool{{Name: "f", InputSchema: []byte(`1`)}}
		}),
		"unknown mode and a bad block": req(func(r *provider.Request) {
			r.ToolChoice.Mode = -1
			r.Messages = append(r.Messages, recovery.Message{Blocks: []recovery.Block{{Kind: 99}}})
		}),
		"everything": req(func(r *provider.Request) {
			r.System, r.Prefill, r.Model, r.MaxTokens = "Be brief.", "So", "m<&>", 0
			r.Sampling = provider.Sampling{Temperature: f(0), TopP: f(0.5), Seed: i(-42)}
			r.StopSequences = []string{"\n", "<|end|>", `"`, "😀"}
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom", DisableParallel: true}
			r.Tools = []provider.Tool{{Name: "zoom", Description: "Zooms.", InputSchema: []byte(schema)}}
			r.Reasoning.Effort = "high"
			r.OutputSchema = []byte(strictOutput)
		}),
	}
}

// strictOutput is an output schema strict mode takes, its properties in an
// order that is not sorted; looseOutput one it does not (an open object).
const (
	strictOutput = `{"type":"object","properties":{"zeta":{"type":"string","description":"<&> \u00e9"},"alpha":{"type":["integer","null"],"minimum":1e2}},` +
		`"required":["zeta","alpha"],"additionalProperties":false}`
	looseOutput = `{"type":"object","properties":{"answer":{"type":"string"},"n":{"type":"number","maximum":1.5e300}},"required":["answer"]}`
)

// reasoningRequests are requests carrying a reasoning effort or an output
// schema: each alone, their edges, and with the rest of the body.
func reasoningRequests() map[string]*provider.Request {
	req := func(edit func(*provider.Request)) *provider.Request {
		r := &provider.Request{Model: "o4-test", MaxTokens: 4096, Messages: []recovery.Message{recovery.UserText("Hi.")}}
		edit(r)
		return r
	}
	effort := func(e string) *provider.Request { return req(func(r *provider.Request) { r.Reasoning.Effort = e }) }
	output := func(schema string, how provider.StructuredOutput) *provider.Request {
		return req(func(r *provider.Request) { r.OutputSchema, r.StructuredOutput = []byte(schema), how })
	}
	return map[string]*provider.Request{
		"effort minimal":             effort("minimal"),
		"effort low":                 effort("low"),
		"effort medium":              effort("medium"),
		"effort high":                effort("high"),
		"effort escaped":             effort("a\"<&>\n\u2028é\xff"),
		"effort, no max tokens":      req(func(r *provider.Request) { r.Reasoning.Effort, r.MaxTokens = "low", 0 }),
		"interleaved is not sent":    req(func(r *provider.Request) { r.Reasoning.Interleaved = true }),
		"thinking budget ignored":    req(func(r *provider.Request) { r.ThinkingBudget, r.Reasoning.Effort = 2048, "medium" }),
		"strict output":              output(strictOutput, provider.StructuredNative),
		"loose output":               output(looseOutput, provider.StructuredNative),
		"output, spaced":             output(" {\n \"type\" : \"object\" }\n", provider.StructuredNative),
		"output by the stop hook":    output(strictOutput, provider.StructuredHook),
		"output by a tool":           output(strictOutput, provider.StructuredTool),
		"output not an object":       output(`["a"]`, provider.StructuredNative),
		"output null":                output(`null`, provider.StructuredNative),
		"output invalid":             output(`{"type":`, provider.StructuredNative),
		"output huge number":         output(`{"maximum":1e400}`, provider.StructuredNative),
		"output surrogates":          output(`{"description":"\ud83d\ude00 \udc00"}`, provider.StructuredNative),
		"output not UTF-8":           output("{\"d\":\"\xff\"}", provider.StructuredNative),
		"invalid output by the hook": output(`{"type":`, provider.StructuredHook),
		"effort and output, tools and a choice": req(func(r *provider.Request) {
			r.Reasoning.Effort, r.OutputSchema = "minimal", []byte(strictOutput)
			r.StopSequences = []string{"END"}
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceAuto, DisableParallel: true}
			r.Tools = []provider.Tool{{Name: "zoom", InputSchema: []byte(`{"type":"object"}`)}}
		}),
		"invalid output and an invalid tool choice": req(func(r *provider.Request) {
			r.OutputSchema, r.ToolChoice.Mode = []byte(`1`), 99
		}),
	}
}

// TestParamsParity: for each request carrying sampling, stop sequences, a
// tool choice, a reasoning effort or an output schema, and each
// configuration, the body is the SDK's: JSON-equal
// as a whole, and byte for byte at its top level (checkTopLevel) — the
// fields' order, each number's and string's encoding. A request refused
// by one is refused by the other, with the same error, and never sent.
func TestParamsParity(t *testing.T) {
	reqs := paramsRequests()
	maps.Copy(reqs, reasoningRequests())
	for cname, cfg := range parityConfigs() {
		p, rec := parityProvider(t, cfg)
		for name, req := range reqs {
			t.Run(cname+"/"+name, func(t *testing.T) {
				checkBody(t, p, req)
				checkParity(t, p, rec, req)
			})
		}
	}
}

// TestParamsOnTheWire spells out the fields of a few requests, as the SDK
// writes them: a reader's check of what the parity tests derive.
func TestParamsOnTheWire(t *testing.T) {
	p, _ := parityProvider(t, Config{APIKey: "sk"})
	reqs := paramsRequests()
	maps.Copy(reqs, reasoningRequests())
	for _, tc := range []struct{ name, want string }{
		{"effort minimal", `,"max_completion_tokens":4096,"reasoning_effort":"minimal",`},
		{"effort escaped", `,"reasoning_effort":"a\"<&>\n\u2028é\ufffd",`},
		{"strict output", `,"response_format":{"json_schema":{"name":"output","strict":true,"schema":` + strictOutput + `},"type":"json_schema"},`},
		{"loose output", `,"response_format":{"json_schema":{"name":"output","strict":false,"schema":` + looseOutput + `},"type":"json_schema"},`},
		{"output, spaced", `,"response_format":{"json_schema":{"name":"output","strict":false,"schema":{"type":"object"}},"type":"json_schema"},`},
		{"temperature 0", `,"temperature":0,`},
		{"temperature tiny", `,"temperature":1e-7,`},
		{"temperature huge", `,"temperature":1e+21,`},
		{"seed min", `,"seed":-9223372036854775808,`},
		{"one stop sequence", `,"stop":["\n\n"],`},
		{"stop HTML", `,"stop":["<b>","a & b","x > y","&amp;"],`},
		{"stop unicode", `,"stop":["é","😀","日本","\u2028\u2029"],`},
		{"tool choice any", `,"tool_choice":"required",`},
		{"tool choice tool", `,"tool_choice":{"function":{"name":"zoom"},"type":"function"},`},
		{"parallel disabled", `,"parallel_tool_calls":false,`},
		{"everything", `,"model":"m<&>","seed":-42,"temperature":0,"top_p":0.5,"parallel_tool_calls":false,"reasoning_effort":"high",` +
			`"stop":["\n","<|end|>","\"","😀"],"stream_options":{"include_usage":true},` +
			`"response_format":{"json_schema":{"name":"output","strict":true,"schema":` + strictOutput + `},"type":"json_schema"},` +
			`"tool_choice":{"function":{"name":"zoom"},"type":"function"},"tools":[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := p.body(reqs[tc.name])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(body, []byte(tc.want)) {
				t.Errorf("body %s\nlacks %s", body, tc.want)
			}
		})
	}
}
