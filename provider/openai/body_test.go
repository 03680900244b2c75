package openai

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/classify"
	"github.com/completiond/completiond/provider/jsonenc"
	"github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// The parity tests hold Provider.body to what the SDK sends for the params
// the provider built before it encoded its own body (sdkParams): on the
// wire, both requests sent the way the provider sends them, to a transport
// that records them, must have the same headers and JSON-equal bodies
// ("stream": true and the prefill fields included), and a request refused
// by one must be refused by the other, with the same error.

// parityConfigs are the provider's configurations that change the body:
// a compatible server (vLLM's prefill fields), OpenAI's own API (none),
// an explicit prefill body, and the legacy max_tokens.
func parityConfigs() map[string]Config {
	return map[string]Config{
		"compatible": {BaseURL: "http://upstream.invalid/v1", APIKey: "sk-parity"},
		"openai":     {APIKey: "sk-parity"},
		"explicit prefill body": {BaseURL: "http://upstream.invalid/v1", PrefillBody: map[string]any{
			"continue_final_message": true, "chat_template_kwargs": map[string]any{"enable_thinking": false, "n": 1.5}, "stop": []string{"\n"}}},
		"legacy max_tokens": {BaseURL: "http://upstream.invalid/v1", LegacyMaxTokens: true},
	}
}

// parityAnswer is the recorder's answer to every request: the API's
// invalid-request error, so that a Stream ends at once.
const parityAnswer = `{"error":{"message":"recorded","type":"invalid_request_error"}}`

// parityProvider is New(cfg) sending to a recorder.
func parityProvider(t testing.TB, cfg Config) (*Provider, *providertest.Recorder) {
	t.Helper()
	rec := &providertest.Recorder{Answer: parityAnswer}
	cfg.HTTPClient = &http.Client{Transport: rec}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, rec
}

// sdkSend sends req as the provider sent it before its own body: the SDK
// encoding sdkParams, the same options.
func (p *Provider) sdkSend(req *provider.Request) error {
	params, err := p.sdkParams(req)
	if err != nil {
		return err
	}
	a := classify.Begin(context.Background(), req.Timeouts)
	defer a.End()
	var res *http.Response
	opts := []option.RequestOption{option.WithMiddleware(a.Middleware), option.WithResponseBodyInto(&res)}
	if req.Prefill != "" {
		opts = append(opts, p.prefillOpts...)
	}
	svc := sdk.NewChatCompletionService(p.client.Options...)
	_ = svc.NewStreaming(a.Context(), *params, opts...).Err()
	if res != nil {
		res.Body.Close()
	}
	return nil
}

// checkParity sends req both ways through p and compares what went out.
func checkParity(t *testing.T, p *Provider, rec *providertest.Recorder, req *provider.Request) {
	t.Helper()
	_, bodyErr := p.body(req)
	sdkErr := p.sdkSend(req)
	want := rec.Take()
	_, err := p.Stream(context.Background(), req, func(provider.Chunk) error { return nil })
	got := rec.Take()
	if (bodyErr == nil) != (sdkErr == nil) || bodyErr != nil && bodyErr.Error() != sdkErr.Error() {
		t.Fatalf("body error %v, SDK params error %v", bodyErr, sdkErr)
	}
	if sdkErr != nil {
		if f, ok := provider.AsFailure(err); !ok || f.Kind != recovery.FailInvalidRequest || len(got) != 0 {
			t.Fatalf("refused request: err %v, %d requests sent", err, len(got))
		}
		return
	}
	if len(got) != 1 || len(want) != 1 {
		t.Fatalf("%d requests sent, SDK %d", len(got), len(want))
	}
	if !utf8.Valid(got[0].Body) || !json.Valid(got[0].Body) {
		t.Fatalf("body is not valid JSON in UTF-8: %q", got[0].Body)
	}
	if g, w := decodeJSON(t, got[0].Body), decodeJSON(t, want[0].Body); !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n%s\nSDK's\n%s", got[0].Body, want[0].Body)
	}
	checkTopLevel(t, got[0].Body, want[0].Body)
	got[0].Header.Del("Content-Length")
	want[0].Header.Del("Content-Length")
	if !reflect.DeepEqual(got[0].Header, want[0].Header) {
		t.Fatalf("headers\n%v\nSDK's\n%v", got[0].Header, want[0].Header)
	}
}

// checkTopLevel holds a body's top level to the SDK's byte for byte: the
// same keys in the same order, and the same bytes for each value — the
// numbers' and strings' encodings included — but messages and tools,
// whose objects the SDK writes with their keys in another order (and a
// tool's schema re-encoded), and the output schema in response_format
// (re-encoded by the SDK, sent as it came by the provider), which only
// JSON equality holds to the SDK's.
// "stream" is left out: the SDK's streaming call sets it last, after the
// prefill fields (option.WithJSONSet) that come after the provider's body,
// which carries it itself.
func checkTopLevel(t *testing.T, got, want []byte) {
	t.Helper()
	if g, w := topLevel(got), topLevel(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("top level\n%q\nSDK's\n%q", g, w)
	}
}

// topLevel is the keys of a JSON object and their values' bytes, in order;
// messages' and tools' values are left out, and so is response_format's
// schema, and stream.
func topLevel(body []byte) [][2]string {
	var fields [][2]string
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		raw := v.Raw
		switch k.Str {
		case "stream":
			return true
		case "messages", "tools":
			raw = "…"
		case "response_format":
			if schema := v.Get("json_schema.schema"); schema.Exists() {
				raw = strings.Replace(raw, schema.Raw, "…", 1)
			}
		}
		fields = append(fields, [2]string{k.Raw, raw})
		return true
	})
	return fields
}

// checkBody compares the body alone with the SDK's encoding of the params.
func checkBody(t *testing.T, p *Provider, req *provider.Request) {
	t.Helper()
	body, err := p.body(req)
	params, sdkErr := p.sdkParams(req)
	if err != nil || sdkErr != nil {
		return // checkParity compares the errors
	}
	want, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	w := decodeJSON(t, want).(map[string]any)
	w["stream"] = true // as the SDK's streaming call sets it
	if g := decodeJSON(t, body); !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n%s\njson.Marshal(params) with \"stream\": true\n%s", body, want)
	}
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %q", err, b)
	}
	return v
}

// schema is a tool's input schema with nesting, numbers and escapes.
const schema = `{"type":"object","properties":{"factor":{"type":"number","minimum":0.5,"maximum":1e3,"default":2},` +
	`"mode":{"enum":["a","b\u00e9","\"q\""]},"nested":{"type":"array","items":{"type":"object","properties":{"x":{"type":"integer"}}}}},` +
	`"required":["factor"],"additionalProperties":false}`

func parityRequests() map[string]*provider.Request {
	user := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleUser, Blocks: blocks}
	}
	assistant := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleAssistant, Blocks: blocks}
	}
	text := recovery.TextBlock
	image := func(mt, data string) recovery.Block {
		return recovery.Block{Kind: recovery.BlockImage, MediaType: mt, Data: []byte(data)}
	}
	result := func(id, out string) recovery.Block {
		return recovery.Block{Kind: recovery.BlockToolResult, ToolUseID: id, Text: out}
	}
	call := func(id, name, input string) recovery.Block {
		return recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: id, ToolName: name, ToolInput: []byte(input)}
	}
	imageURL := func(url string) recovery.Block { return recovery.Block{Kind: recovery.BlockImage, URL: url} }
	marked := func(b recovery.Block) recovery.Block { b.CacheBreakpoint = true; return b }
	thinking := recovery.Block{Kind: recovery.BlockThinking, Text: "hmm", Signature: "sig"}
	redacted := recovery.Block{Kind: recovery.BlockThinking, Redacted: true, Data: []byte("EmwK")}
	req := func(msgs ...recovery.Message) *provider.Request {
		return &provider.Request{Model: "gpt-test", MaxTokens: 1024, Messages: msgs}
	}
	with := func(r *provider.Request, f func(*provider.Request)) *provider.Request { f(r); return r }
	tool := func(name, desc, schema string) provider.Tool {
		return provider.Tool{Name: name, Description: desc, InputSchema: []byte(schema)}
	}
	return map[string]*provider.Request{
		"plain":          req(recovery.UserText("Say hello.")),
		"empty":          {},
		"no messages":    req(),
		"system":         with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.System = "Be brief.\n\t\"Really\"." }),
		"no max tokens":  with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.MaxTokens = 0 }),
		"no model":       with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.Model = "" }),
		"text parts":     req(user(text("a"), text("b"))),
		"empty text":     req(user(text(""), text("only")), user(text(""))),
		"image alone":    req(user(image("image/png", "\x89PNG\r\n"))),
		"text and image": req(user(text("What is it?"), image("image/jpeg", "\xff\xd8\xff"), text("And?"))),
		"empty image":    req(user(image("", ""))),
		"tool results": req(
			assistant(call("call_1", "zoom", `{"factor":2}`), call("call_2", "pan", "")),
			user(text("first"), result("call_1", "zoomed"), result("call_2", ""), text("Now?"))),
		"only tool results": req(user(result("call_1", "out"))),
		"assistant text and calls": req(recovery.UserText("Go."),
			assistant(text("Let me "), text("zoom."), call("call_1", "zoom", `{"factor": 2}`))),
		"assistant calls only":       req(assistant(call("", "", ""))),
		"assistant empty":            req(assistant(), assistant(text(""))),
		"thinking":                   req(assistant(thinking, redacted, text("Hello!")), recovery.UserText("Again.")),
		"thinking only":              req(assistant(thinking)),
		"thinking in a user message": req(user(thinking)),
		"unknown kind in assistant":  req(assistant(recovery.Block{Kind: 99})),
		"tool use in a user message": req(user(text("a"), call("c", "f", "{}"))),
		"prefill":                    with(req(recovery.UserText("Answer.")), func(r *provider.Request) { r.Prefill = "The answer is " }),
		"tools": with(req(recovery.UserText("Zoom.")), func(r *provider.Request) {
			r.Tools = []provider.Tool{tool("zoom", "Zooms.", schema), tool("plain", "", ""), tool("empty", "", "{}"),
				tool("spaced", "", " {\n \"type\" : \"object\" }\n")}
		}),
		"schema not an object": with(req(), func(r *provider.Request) { r.Tools = []provider.Tool{tool("f", "", `"x"`)} }),
		"schema null":          with(req(), func(r *provider.Request) { r.Tools = []provider.Tool{tool("f", "", `null`)} }),
		"schema invalid":       with(req(), func(r *provider.Request) { r.Tools = []provider.Tool{tool("f", "", `{"a":}`)} }),
		"schema huge number":   with(req(), func(r *provider.Request) { r.Tools = []provider.Tool{tool("f", "", `{"max":1e400}`)} }),
		"schema not UTF-8":     with(req(), func(r *provider.Request) { r.Tools = []provider.Tool{tool("f", "", "{\"d\":\"\xff\xfe\"}")} }),
		"schema surrogates": with(req(), func(r *provider.Request) {
			r.Tools = []provider.Tool{tool("f", "", `{"d":"\ud83d\ude00 \udc00 \uD800"}`)}
		}),
		"schema duplicate key": with(req(), func(r *provider.Request) { r.Tools = []provider.Tool{tool("f", "", `{"a":1,"a":2}`)} }),
		"escapes": with(req(user(text("\x00\x01\x1f\x7f \"\\ <>& \u2028\u2029 é 😀 \xff \xe2\x82"))), func(r *provider.Request) {
			r.System, r.Model = "\b\f\n\r\t", "m\"odel"
		}),
		"image URL alone": req(user(imageURL("https://example.com/a.png"))),
		"image URLs and data": req(user(text("Compare."), imageURL("https://example.com/a.png?x=1&y=<2>"),
			image("image/png", "\x89PNG"), imageURL("https://example.com/\u00e9 \"q\".jpg"))),
		"image with a URL and data":        req(user(recovery.Block{Kind: recovery.BlockImage, URL: "https://example.com/a.png", MediaType: "image/png", Data: []byte("x")})),
		"document":                         req(user(text("Read."), recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF")})),
		"document by URL":                  req(user(recovery.Block{Kind: recovery.BlockDocument, URL: "https://example.com/a.pdf", Title: "A"})),
		"document in an assistant message": req(assistant(text("Here."), recovery.Block{Kind: recovery.BlockDocument, Data: []byte("%PDF")})),
		"cache marks": with(req(
			user(marked(text("Long context.")), marked(image("image/png", "\x89PNG"))),
			assistant(marked(text("Seen."))),
			user(marked(result("call_1", "out")), marked(text("Again.")))), func(r *provider.Request) {
			r.System, r.CacheSystem = "Be brief.", true
			r.Tools = []provider.Tool{{Name: "zoom", InputSchema: []byte(`{"type":"object"}`), CacheBreakpoint: true}}
		}),
		"everything": with(req(
			user(text("Look."), image("image/png", "\x89PNG"), imageURL("https://example.com/a.png")),
			assistant(thinking, text("Zooming."), call("call_1", "zoom", `{"factor":2}`)),
			user(result("call_1", "zoomed"), text("Now?")),
		), func(r *provider.Request) {
			r.System, r.Prefill = "Be brief.", "So"
			r.Tools = []provider.Tool{tool("zoom", "Zooms.", schema)}
			r.Reasoning.Effort, r.OutputSchema, r.CacheSystem = "medium", []byte(schema), true
		}),
	}
}

// TestBodyParity: for each request and each configuration, the provider's
// body is the SDK's, on the wire and alone.
func TestBodyParity(t *testing.T) {
	for cname, cfg := range parityConfigs() {
		p, rec := parityProvider(t, cfg)
		for name, req := range parityRequests() {
			t.Run(cname+"/"+name, func(t *testing.T) {
				checkBody(t, p, req)
				checkParity(t, p, rec, req)
			})
		}
	}
}

// FuzzBodyParity generates requests — their shape from seed, their
// strings cut from text (anywhere: UTF-8 cut in the middle included), a
// tool's schema and the output schema from schema — and holds the body to
// the SDK's for them, and the layout rejected images are located by
// (wireLayout) to the body.
func FuzzBodyParity(f *testing.F) {
	f.Add(uint64(1), "Hello, world. \"quoted\" \\ \n é 😀", []byte(schema))
	f.Add(uint64(2), "\xff\xfe\x00\u2028", []byte(`{"a":1e400}`))
	f.Add(uint64(3), "", []byte(`null`))
	f.Add(uint64(4), "abc", []byte(`{"s":"\ud800"}`))
	cfgs := parityConfigs()
	type target struct {
		p   *Provider
		rec *providertest.Recorder
	}
	var targets []target
	for _, name := range []string{"compatible", "openai", "explicit prefill body", "legacy max_tokens"} {
		p, rec := parityProvider(f, cfgs[name])
		targets = append(targets, target{p, rec})
	}
	f.Fuzz(func(t *testing.T, seed uint64, text string, schema []byte) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		req := genRequest(rng, text, schema)
		tg := targets[rng.IntN(len(targets))]
		checkBody(t, tg.p, req)
		checkParity(t, tg.p, tg.rec, req)
		checkLayout(t, tg.p, req)
	})
}

// genRequest is a request of random shape, with strings cut from text.
func genRequest(rng *rand.Rand, text string, schema []byte) *provider.Request {
	cut := func() string {
		if text == "" || rng.IntN(8) == 0 {
			return ""
		}
		i := rng.IntN(len(text))
		return text[i : i+rng.IntN(len(text)-i+1)]
	}
	req := &provider.Request{Model: cut(), System: cut(), MaxTokens: rng.IntN(3) * 512}
	if rng.IntN(3) == 0 {
		req.Prefill = cut()
	}
	for range rng.IntN(5) {
		m := recovery.Message{Role: recovery.RoleUser}
		if rng.IntN(2) == 0 {
			m.Role = recovery.RoleAssistant
		}
		for range rng.IntN(5) {
			m.Blocks = append(m.Blocks, genBlock(rng, cut))
		}
		req.Messages = append(req.Messages, m)
	}
	for range rng.IntN(3) {
		t := provider.Tool{Name: cut(), Description: cut()}
		switch rng.IntN(3) {
		case 0:
			t.InputSchema = schema
		case 1:
			t.InputSchema = []byte(`{"type":"object","properties":{"q":{"type":"string","description":` + string(jsonenc.AppendString(nil, cut())) + `}}}`)
		}
		req.Tools = append(req.Tools, t)
	}
	genParams(rng, req, cut)
	genStructured(rng, req, cut, schema)
	return req
}

// genStructured sets a reasoning effort (cut from the text now and then),
// and an output schema — the fuzzed one, a strict or a loose one — asked
// for in any of the ways; the cache marks, which send nothing, at random.
func genStructured(rng *rand.Rand, req *provider.Request, cut func() string, schema []byte) {
	efforts := []string{"", "minimal", "low", "medium", "high", cut()}
	req.Reasoning = provider.Reasoning{Effort: efforts[rng.IntN(len(efforts))], Interleaved: rng.IntN(2) == 0}
	switch rng.IntN(4) {
	case 0:
		req.OutputSchema = schema
	case 1:
		req.OutputSchema = []byte(strictOutput)
	case 2:
		req.OutputSchema = []byte(looseOutput)
	}
	req.StructuredOutput = provider.StructuredOutput(rng.IntN(3))
	req.CacheSystem = rng.IntN(2) == 0
	for i := range req.Tools {
		req.Tools[i].CacheBreakpoint = rng.IntN(2) == 0
	}
}

// genParams sets random sampling parameters — an edge value or any
// float64's bits, not finite now and then — stop sequences cut from the
// text and a tool choice, an unknown mode now and then.
func genParams(rng *rand.Rand, req *provider.Request, cut func() string) {
	float := func() *float64 {
		if rng.IntN(2) == 0 {
			return nil
		}
		edges := []float64{0, 0.7, 1, 2, 1e-7, 1e21}
		v := edges[rng.IntN(len(edges))]
		if rng.IntN(3) == 0 {
			v = math.Float64frombits(rng.Uint64())
		}
		return &v
	}
	req.Sampling.Temperature, req.Sampling.TopP = float(), float()
	if rng.IntN(2) == 0 {
		seed := int64(rng.Uint64())
		req.Sampling.Seed = &seed
	}
	for range rng.IntN(5) {
		req.StopSequences = append(req.StopSequences, cut())
	}
	req.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceMode(rng.IntN(6)), Name: cut(), DisableParallel: rng.IntN(2) == 0}
}

// genBlock is a block of random kind, marked as a cache breakpoint now and
// then; a document or a kind that no message can hold now and then.
func genBlock(rng *rand.Rand, cut func() string) recovery.Block {
	kinds := []recovery.BlockKind{recovery.BlockText, recovery.BlockText, recovery.BlockImage,
		recovery.BlockToolUse, recovery.BlockToolResult, recovery.BlockThinking}
	b := recovery.Block{Kind: kinds[rng.IntN(len(kinds))], CacheBreakpoint: rng.IntN(4) == 0}
	switch rng.IntN(40) {
	case 0:
		b.Kind = recovery.BlockKind(rng.IntN(100))
	case 1:
		b.Kind = recovery.BlockDocument
	}
	switch b.Kind {
	case recovery.BlockImage, recovery.BlockDocument:
		b.MediaType, b.Data = cut(), []byte(cut())
		if rng.IntN(2) == 0 {
			b.URL = cut()
		}
	case recovery.BlockToolUse:
		b.ToolUseID, b.ToolName, b.ToolInput = cut(), cut(), []byte(cut())
	case recovery.BlockToolResult:
		b.ToolUseID, b.Text = cut(), cut()
	default:
		b.Text = cut()
	}
	return b
}
