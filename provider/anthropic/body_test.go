package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"unicode/utf8"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

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
// ("stream": true included), the same held whitespace, and a request
// refused by one must be refused by the other, with the same error.

// parityConfigs are the provider's configurations that change the
// request: Anthropic's own address or another, with a key or without.
func parityConfigs() map[string]Config {
	return map[string]Config{
		"default":  {APIKey: "sk-parity"},
		"base URL": {BaseURL: "http://upstream.invalid", APIKey: "sk-parity"},
		"path":     {BaseURL: "http://upstream.invalid/proxy/", APIKey: "sk-parity"},
		"no key":   {BaseURL: "http://upstream.invalid"},
	}
}

// parityNames are parityConfigs' names in a fixed order, for the fuzzer.
var parityNames = []string{"default", "base URL", "path", "no key"}

// parityAnswer is the recorder's answer to every request: the API's
// invalid-request error, so that a Stream ends at once.
const parityAnswer = `{"type":"error","error":{"type":"invalid_request_error","message":"recorded"}}`

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

// sdkSend sends req as the provider sent it before its own body: the SDK's
// NewStreaming encoding sdkParams, with the same options, on the service
// sdk.NewClient built from them. err is sdkParams' refusal; encErr the
// SDK's own, which refused params it could not encode and sent nothing.
func (p *Provider) sdkSend(req *provider.Request) (err, encErr error) {
	params, _, err := sdkParams(req)
	if err != nil {
		return err, nil
	}
	a := classify.Begin(context.Background(), req.Timeouts)
	defer a.End()
	var res *http.Response
	svc := sdk.NewClient(p.client.Options...).Messages
	encErr = svc.NewStreaming(a.Context(), params, option.WithMiddleware(a.Middleware), option.WithResponseBodyInto(&res)).Err()
	if res != nil {
		res.Body.Close()
	}
	if _, ok := errors.AsType[*sdk.Error](encErr); ok {
		encErr = nil // the recorder's answer: the request went
	}
	return nil, encErr
}

// checkParity sends req both ways through p and compares what went out.
func checkParity(t *testing.T, p *Provider, rec *providertest.Recorder, req *provider.Request) {
	t.Helper()
	_, _, bodyErr := p.body(req)
	sdkErr, encErr := p.sdkSend(req)
	want := rec.Take()
	_, err := p.Stream(context.Background(), req, func(provider.Chunk) error { return nil })
	got := rec.Take()
	if encErr != nil {
		// The SDK refused to encode what sdkParams built (an empty key
		// among a schema's fields): the body refuses it, as invalid.
		if bodyErr == nil || len(want) != 0 {
			t.Fatalf("SDK's encoding error %v (%d requests sent), body error %v", encErr, len(want), bodyErr)
		}
		sdkErr = bodyErr
	}
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
	if got[0].Method != want[0].Method || got[0].URL != want[0].URL {
		t.Fatalf("%s %s, SDK's %s %s", got[0].Method, got[0].URL, want[0].Method, want[0].URL)
	}
	if !utf8.Valid(got[0].Body) || !json.Valid(got[0].Body) {
		t.Fatalf("body is not valid JSON in UTF-8: %q", got[0].Body)
	}
	if g, w := decodeJSON(t, got[0].Body), decodeJSON(t, want[0].Body); !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n%s\nSDK's\n%s", got[0].Body, want[0].Body)
	}
	got[0].Header.Del("Content-Length")
	want[0].Header.Del("Content-Length")
	if !reflect.DeepEqual(got[0].Header, want[0].Header) {
		t.Fatalf("headers\n%v\nSDK's\n%v", got[0].Header, want[0].Header)
	}
}

// checkBody compares the body alone, and the whitespace it holds, with the
// SDK's encoding of the params.
func checkBody(t *testing.T, p *Provider, req *provider.Request) {
	t.Helper()
	body, held, err := p.body(req)
	params, sdkHeld, sdkErr := sdkParams(req)
	if err != nil || sdkErr != nil {
		return // checkParity compares the errors
	}
	if held != sdkHeld {
		t.Fatalf("held %d, SDK params' %d", held, sdkHeld)
	}
	want, err := json.Marshal(params)
	if err != nil {
		t.Fatalf("body %s, SDK's encoding error %v", body, err)
	}
	w := decodeJSON(t, want).(map[string]any)
	w["stream"] = true // as the SDK's streaming call sets it
	if g := decodeJSON(t, body); !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n%s\njson.Marshal(params) with \"stream\": true\n%s", body, want)
	}
}

// decodeJSON is b decoded into any, as a server reads it, its numbers as
// they are written (a call's input goes as it came: 1e400 included).
func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%v: %q", err, b)
	}
	return v
}

// schema is a tool's input schema with nesting, numbers, escapes, a
// required that is not all strings and fields beside the known ones.
const schema = `{"type":"object","properties":{"factor":{"type":"number","minimum":0.5,"maximum":1e3,"default":2},` +
	`"mode":{"enum":["a","b\u00e9","\"q\"","<&>"]},"nested":{"type":"array","items":{"type":"object","properties":{"x":{"type":"integer"}}}}},` +
	`"required":["factor",1,null,"mode"],"additionalProperties":false,"$defs":{"d":{"type":"string"}},"x":null}`

// parityRequests are the requests of TestBodyParity: every mapping and
// every refusal of the provider's.
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
	result := func(id, out string, isErr bool) recovery.Block {
		return recovery.Block{Kind: recovery.BlockToolResult, ToolUseID: id, Text: out, IsError: isErr}
	}
	call := func(id, name, input string) recovery.Block {
		return recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: id, ToolName: name, ToolInput: []byte(input)}
	}
	thinking := recovery.Block{Kind: recovery.BlockThinking, Text: "hmm", Signature: "sig"}
	redacted := recovery.Block{Kind: recovery.BlockThinking, Redacted: true, Data: []byte("EmwK")}
	req := func(msgs ...recovery.Message) *provider.Request {
		return &provider.Request{Model: "claude-test", MaxTokens: 4096, Messages: msgs}
	}
	with := func(r *provider.Request, f func(*provider.Request)) *provider.Request { f(r); return r }
	tool := func(name, desc, schema string) provider.Tool {
		return provider.Tool{Name: name, Description: desc, InputSchema: []byte(schema)}
	}
	tools := func(schemas ...string) func(*provider.Request) {
		return func(r *provider.Request) {
			for _, s := range schemas {
				r.Tools = append(r.Tools, tool("f", "", s))
			}
		}
	}
	return map[string]*provider.Request{
		"plain":          req(recovery.UserText("Say hello.")),
		"empty":          {},
		"no messages":    req(),
		"system":         with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.System = "Be brief.\n\t\"Really\"." }),
		"no max tokens":  with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.MaxTokens = 0 }),
		"no model":       with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.Model = "" }),
		"text blocks":    req(user(text("a"), text("b"))),
		"empty text":     req(user(text(""), text("only")), user(text("")), assistant()),
		"image alone":    req(user(image("image/png", "\x89PNG\r\n"))),
		"text and image": req(user(text("What is it?"), image("image/jpeg", "\xff\xd8\xff"), text("And?"))),
		"empty image":    req(user(image("", ""))),
		"tool results": req(recovery.UserText("Go."),
			assistant(call("call_1", "zoom", `{"factor":2}`), call("call_2", "pan", "")),
			user(text("first"), result("call_1", "zoomed", false), result("call_2", "", true), text("Now?"))),
		"tool input spaced":          req(assistant(call("c", "f", " {\n \"a\" : [1, 2.50, \"<\u2028>\"] }\n"))),
		"tool input not UTF-8":       req(assistant(call("c", "f", "{\"a\":\"\xff\xe2\x82 \xed\xa0\x80\"}"))),
		"tool input surrogates":      req(assistant(call("c", "f", `{"a":"\ud800 \ud83d\ude00"}`))),
		"tool input invalid":         req(recovery.UserText("a"), assistant(text("b"), call("c", "f", `{"a":`))),
		"tool input scalar":          req(assistant(call("c", "f", `42`))),
		"tool input huge":            req(assistant(call("c", "f", `{"a":1e400,"b":1.50}`))),
		"thinking":                   req(assistant(thinking, redacted, text("Hello!")), recovery.UserText("Again.")),
		"thinking empty":             req(assistant(recovery.Block{Kind: recovery.BlockThinking}, recovery.Block{Kind: recovery.BlockThinking, Redacted: true})),
		"thinking in a user message": req(user(thinking)),
		"unknown kind":               req(recovery.UserText("a"), user(text("b"), recovery.Block{Kind: 99})),
		"unknown kind at the end":    req(recovery.UserText("a"), assistant(text("b  "), recovery.Block{Kind: 7}, text(" "))),
		"prefill":                    with(req(recovery.UserText("Answer.")), func(r *provider.Request) { r.Prefill = "The answer is \n\t " }),
		"prefill all space":          with(req(recovery.UserText("Answer.")), func(r *provider.Request) { r.Prefill = " \n\u00a0\u2003" }),
		"prefill after assistant":    with(req(recovery.UserText("A."), assistant(text("b  "))), func(r *provider.Request) { r.Prefill = "c " }),
		"final assistant":            req(recovery.UserText("Go."), assistant(text("Let me "), text(""), text("\n"), text(" "))),
		"final assistant all space":  req(recovery.UserText("Go."), assistant(text(" "), text("\t\n"))),
		"final assistant after tool": req(recovery.UserText("Go."), assistant(text("a "), call("c", "f", "{}"), text("  "))),
		"final assistant then empty": req(recovery.UserText("Go."), assistant(text("a  ")), user(text("")), assistant(text(""))),
		"earlier assistant kept":     req(assistant(text("a  ")), recovery.UserText("b "), assistant(text(" \u3000"))),
		"final assistant not UTF-8":  req(recovery.UserText("Go."), assistant(text("a\xff \xe2\x82"))),
		"final user":                 req(assistant(text("a  ")), recovery.UserText("b  ")),
		"thinking budget":            with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.ThinkingBudget = 2000 }),
		"thinking budget small":      with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.ThinkingBudget = 1 }),
		"thinking budget too big":    with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.ThinkingBudget = 10000 }),
		"thinking no room":           with(req(recovery.UserText("Hi.")), func(r *provider.Request) { r.ThinkingBudget, r.MaxTokens = 2000, 1024 }),
		"thinking with prefill": with(req(recovery.UserText("Hi.")), func(r *provider.Request) {
			r.ThinkingBudget, r.Prefill = 2000, "So"
		}),
		"thinking after a bare tool turn": with(req(recovery.UserText("Go."), assistant(call("c", "f", "{}")),
			user(result("c", "ok", false))), func(r *provider.Request) { r.ThinkingBudget = 2000 }),
		"thinking after a thought tool turn": with(req(recovery.UserText("Go."), assistant(thinking, call("c", "f", "{}")),
			user(result("c", "ok", false))), func(r *provider.Request) { r.ThinkingBudget = 2000 }),
		"tools": with(req(recovery.UserText("Zoom.")), func(r *provider.Request) {
			r.Tools = []provider.Tool{tool("zoom", "Zooms.", schema), tool("plain", "", ""), tool("empty", "", "{}"),
				tool("spaced", "", " {\n \"type\" : \"object\" }\n")}
		}),
		"schema properties only":  with(req(), tools(`{"properties":{"a":{}}}`)),
		"schema properties null":  with(req(), tools(`{"properties":null,"required":[]}`)),
		"schema required only":    with(req(), tools(`{"required":["a"]}`, `{"required":"a"}`, `{"required":[1]}`)),
		"schema extra only":       with(req(), tools(`{"type":"string","x":1}`)),
		"schema not an object":    with(req(), tools(`"x"`)),
		"schema array":            with(req(), tools(`[]`)),
		"schema null":             with(req(), tools(`null`)),
		"schema invalid":          with(req(), tools(`{"a":}`)),
		"schema huge number":      with(req(), tools(`{"max":1e400}`)),
		"schema not UTF-8":        with(req(), tools("{\"d\":\"\xff\xfe\",\"\xff\":[\"\xe2\x82\"]}")),
		"schema surrogates":       with(req(), tools(`{"d":"\ud83d\ude00 \udc00 \uD800"}`)),
		"schema duplicate key":    with(req(), tools(`{"a":1,"a":2,"properties":{},"properties":{"b":3}}`)),
		"schema empty key":        with(req(), tools(`{"":1}`)),
		"schema odd keys":         with(req(), tools("{\"a\\\"b\":1,\"\\n\\u0000\":2,\"\xff\":3,\"\\u2028é\":4,\"a\\\\.b\":5}")),
		"schema empty key inside": with(req(), tools(`{"properties":{"":1},"x":{"":2}}`)),
		"schema path keys":        with(req(), tools(`{"a.b":1,"c|d":2,"#":3,"@e":4,"*":5,"?":6,"f:g":7,"\\":8,"0":9,"-1":10,"<&>":11}`)),
		"schema error after msgs": with(req(assistant(call("c", "f", "{"))), tools(`null`)),
		"escapes": with(req(user(text("\x00\x01\x1f\x7f \"\\ <>& \u2028\u2029 é 😀 \xff \xe2\x82"))), func(r *provider.Request) {
			r.System, r.Model = "\b\f\n\r\t<", "m\"odel&"
			r.Tools = []provider.Tool{tool("<f\xff>", "d\u2028&", `{"properties":{"<a>":{"description":"\u0026\u2028"}}}`)}
		}),
		"everything": with(req(
			user(text("Look."), image("image/png", "\x89PNG")),
			assistant(thinking, text("Zooming."), call("call_1", "zoom", `{"factor":2}`)),
			user(result("call_1", "zoomed", false), text("Now?")),
		), func(r *provider.Request) {
			r.System, r.ThinkingBudget = "Be brief.", 1500
			r.Tools = []provider.Tool{tool("zoom", "Zooms.", schema)}
		}),
	}
}

// TestBodyParity: for each request and each configuration, the provider's
// body is the SDK's, on the wire and alone. The environment's ANTHROPIC_*
// variables are set, and must be ignored by both.
func TestBodyParity(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://env.invalid")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "env-token")
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
// tool's schema and a call's input from schema — and holds the body to
// the SDK's for them.
func FuzzBodyParity(f *testing.F) {
	f.Add(uint64(1), "Hello, world. \"quoted\" \\ \n é 😀", []byte(schema))
	f.Add(uint64(2), "\xff\xfe\x00\u2028 \t\n", []byte(`{"a":1e400}`))
	f.Add(uint64(3), "", []byte(`null`))
	f.Add(uint64(4), "abc  ", []byte(`{"s":"\ud800"}`))
	f.Add(uint64(5), " \u00a0x\u3000", []byte("{\"properties\":{\"\xff\":1},\"required\":[\"a\",2]}"))
	cfgs := parityConfigs()
	type target struct {
		p   *Provider
		rec *providertest.Recorder
	}
	var targets []target
	for _, name := range parityNames {
		p, rec := parityProvider(f, cfgs[name])
		targets = append(targets, target{p, rec})
	}
	f.Fuzz(func(t *testing.T, seed uint64, text string, schema []byte) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		req := genRequest(rng, text, schema)
		tg := targets[rng.IntN(len(targets))]
		checkBody(t, tg.p, req)
		checkParity(t, tg.p, tg.rec, req)
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
	req := &provider.Request{Model: cut(), System: cut(), MaxTokens: rng.IntN(5) * 1024}
	if rng.IntN(3) == 0 {
		req.Prefill = cut()
	}
	if rng.IntN(2) == 0 {
		req.ThinkingBudget = rng.IntN(5000)
	}
	for range rng.IntN(5) {
		m := recovery.Message{Role: recovery.RoleUser}
		if rng.IntN(2) == 0 {
			m.Role = recovery.RoleAssistant
		}
		for range rng.IntN(5) {
			m.Blocks = append(m.Blocks, genBlock(rng, cut, schema))
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
	return req
}

// genBlock is a block of random kind; an unknown kind now and then. Text
// blocks end in whitespace often, for the final assistant message's trim.
func genBlock(rng *rand.Rand, cut func() string, input []byte) recovery.Block {
	kinds := []recovery.BlockKind{recovery.BlockText, recovery.BlockText, recovery.BlockImage,
		recovery.BlockToolUse, recovery.BlockToolResult, recovery.BlockThinking}
	b := recovery.Block{Kind: kinds[rng.IntN(len(kinds))]}
	if rng.IntN(40) == 0 {
		b.Kind = recovery.BlockKind(rng.IntN(100))
	}
	switch b.Kind {
	case recovery.BlockImage:
		b.MediaType, b.Data = cut(), []byte(cut())
	case recovery.BlockToolUse:
		b.ToolUseID, b.ToolName = cut(), cut()
		switch rng.IntN(3) {
		case 0:
			b.ToolInput = input
		case 1:
			b.ToolInput = []byte(`{"q":` + string(jsonenc.AppendString(nil, cut())) + `}`)
		}
	case recovery.BlockToolResult:
		b.ToolUseID, b.Text, b.IsError = cut(), cut(), rng.IntN(2) == 0
	case recovery.BlockThinking:
		b.Text, b.Signature, b.Redacted, b.Data = cut(), cut(), rng.IntN(3) == 0, []byte(cut())
	default:
		b.Text = cut() + []string{"", " ", "\n\t", "\u00a0"}[rng.IntN(4)]
	}
	return b
}
