package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
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
	opts := []option.RequestOption{option.WithMiddleware(a.Middleware), option.WithResponseBodyInto(&res)}
	if req.Reasoning.Interleaved && params.Thinking.OfEnabled != nil {
		// MessageNewParams has no betas: the header went as a request option.
		opts = append(opts, option.WithHeaderAdd("anthropic-beta", string(sdk.AnthropicBetaInterleavedThinking2025_05_14)))
	}
	svc := sdk.NewClient(p.client.Options...).Messages
	encErr = svc.NewStreaming(a.Context(), params, opts...).Err()
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
	if structuredPrefill(req) != nil {
		// Refused before the call, for the machine to restart without the
		// prefill: checkBody compares the body all the same.
		if f, ok := provider.AsFailure(err); !ok || f.Kind != recovery.FailPrefillRejected || len(got) != 0 {
			t.Fatalf("a prefill on a structured tool request: err %v, %d requests sent", err, len(got))
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
	g := decodeJSON(t, body)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n%s\njson.Marshal(params) with \"stream\": true\n%s", body, want)
	}
	checkOrder(t, body, want)
	if n := cacheMarksIn(g.(map[string]any)); n > maxCacheMarks {
		t.Fatalf("%d cache marks, the API takes %d: %s", n, maxCacheMarks, body)
	}
	checkWirePaths(t, req, g.(map[string]any))
}

// wireTypes are the API's block types of each kind.
var wireTypes = map[recovery.BlockKind][]string{
	recovery.BlockText: {"text"}, recovery.BlockImage: {"image"}, recovery.BlockDocument: {"document"},
	recovery.BlockToolUse: {"tool_use"}, recovery.BlockToolResult: {"tool_result"},
	recovery.BlockThinking: {"thinking", "redacted_thinking"},
}

// checkWirePaths holds conversation.each, which maps the paths a rejection
// names back to the request's blocks, to the body: every block it walks is
// at its wire path, of its kind, and it walks every block of the body but
// the prefill's.
func checkWirePaths(t *testing.T, req *provider.Request, body map[string]any) {
	t.Helper()
	msgs, _ := body["messages"].([]any)
	content := func(n int) []any {
		if n >= len(msgs) {
			return nil
		}
		c, _ := msgs[n].(map[string]any)["content"].([]any)
		return c
	}
	walked := map[int]int{}
	conversationOf(req).each(func(at, wire recovery.BlockRef, blk recovery.Block, _ bool) {
		blocks := content(wire.Message)
		if wire.Block >= len(blocks) {
			t.Fatalf("%v (the request's %v) is not in the body", wire, at)
		}
		typ := blocks[wire.Block].(map[string]any)["type"]
		if !slices.Contains(wireTypes[blk.Kind], typ.(string)) {
			t.Fatalf("%v (the request's %v, kind %d) is a %v on the wire", wire, at, blk.Kind, typ)
		}
		walked[wire.Message]++
	})
	sent := len(msgs)
	if p := strings.TrimRightFunc(req.Prefill, unicode.IsSpace); p != "" {
		sent-- // the prefill's message, the last, is no request message
	}
	for n := range sent {
		if walked[n] != len(content(n)) {
			t.Fatalf("messages.%d: %d blocks walked of %d", n, walked[n], len(content(n)))
		}
	}
}

// cacheMarksIn counts the cache marks of a decoded body: on its tools, its
// system prompt and its messages' blocks.
func cacheMarksIn(body map[string]any) int {
	n := 0
	count := func(list any) {
		items, _ := list.([]any)
		for _, it := range items {
			if _, ok := it.(map[string]any)["cache_control"]; ok {
				n++
			}
		}
	}
	count(body["tools"])
	count(body["system"])
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		count(m.(map[string]any)["content"])
	}
	return n
}

// checkOrder holds the body's top-level keys, and tool_choice's, to the
// SDK's order, and its numbers (max_tokens, temperature, top_k, top_p) to
// the SDK's bytes. The rest is held to JSON equality: the SDK's encoder
// writes the keys of a message, a block or thinking in another order, and
// escapes <, > and & in strings (\u003c), which package jsonenc does not
// need to.
func checkOrder(t *testing.T, body, sdkBody []byte) {
	t.Helper()
	keys, vals := rawFields(t, body)
	wantKeys, wantVals := rawFields(t, sdkBody)
	if wantKeys = append(wantKeys, "stream"); !slices.Equal(keys, wantKeys) {
		t.Fatalf("keys %q, the SDK's %q", keys, wantKeys)
	}
	for _, k := range []string{"max_tokens", "temperature", "top_k", "top_p"} {
		if !bytes.Equal(vals[k], wantVals[k]) {
			t.Fatalf("%s: %s, the SDK's %s", k, vals[k], wantVals[k])
		}
	}
	if c := vals["tool_choice"]; c != nil {
		if !slices.Equal(fieldNames(t, c), fieldNames(t, wantVals["tool_choice"])) {
			t.Fatalf("tool_choice %s, the SDK's %s", c, wantVals["tool_choice"])
		}
	}
}

// rawFields is the keys of the JSON object b, in order, and their values
// as they are written.
func rawFields(t *testing.T, b []byte) (keys []string, vals map[string]json.RawMessage) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object (%v): %q", err, b)
	}
	vals = map[string]json.RawMessage{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("%v: %q", err, b)
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%v: %q", err, b)
		}
		keys = append(keys, tok.(string))
		vals[tok.(string)] = v
	}
	return keys, vals
}

// fieldNames is the keys of the JSON object b, in order.
func fieldNames(t *testing.T, b []byte) []string {
	t.Helper()
	keys, _ := rawFields(t, b)
	return keys
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
	imageURL := func(url string) recovery.Block { return recovery.Block{Kind: recovery.BlockImage, URL: url} }
	document := func(data, url, title string) recovery.Block {
		return recovery.Block{Kind: recovery.BlockDocument, Data: []byte(data), URL: url, Title: title}
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
	reqs := map[string]*provider.Request{
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
		"image URL":      req(user(text("What is it?"), imageURL("https://example.com/cat.png?a=1&b=<2>"))),
		"image URL and data": req(user(recovery.Block{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG"),
			URL: "https://example.com/cat.png"})),
		"document":            req(user(document("%PDF-1.7\n\xff", "", ""), text("Summarise it."))),
		"document titled":     req(user(document("%PDF", "", "Q3 \"report\" <draft>\u2028é"))),
		"document URL":        req(user(document("", "https://example.com/a.pdf", ""))),
		"document URL titled": req(user(document("", "https://example.com/a.pdf", "A"), text("And?"))),
		"document empty":      req(user(document("", "", ""))),
		"document media type": req(user(recovery.Block{Kind: recovery.BlockDocument, MediaType: "text/plain", Data: []byte("x")})),
		"document URL and data": req(user(recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf",
			Data: []byte("%PDF"), URL: "https://example.com/a.pdf"})),
		"media mixed": req(user(image("image/jpeg", "\xff\xd8"), document("%PDF", "", "t"), imageURL("https://x.test/i.gif"),
			document("", "https://x.test/d.pdf", "")), assistant(text("Seen.")), user(document("%PDF-2", "", ""))),
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
		"interleaved": with(req(recovery.UserText("Hi.")), func(r *provider.Request) {
			r.ThinkingBudget, r.Reasoning.Interleaved = 2000, true
		}),
		"interleaved over max_tokens": with(req(recovery.UserText("Hi.")), func(r *provider.Request) {
			r.ThinkingBudget, r.MaxTokens, r.Reasoning.Interleaved = 16000, 1024, true
		}),
		"interleaved without thinking": with(req(recovery.UserText("Hi.")), func(r *provider.Request) {
			r.Reasoning.Interleaved = true
		}),
		"interleaved with prefill": with(req(recovery.UserText("Hi.")), func(r *provider.Request) {
			r.ThinkingBudget, r.Reasoning.Interleaved, r.Prefill = 2000, true, "So"
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
	maps.Copy(reqs, paramsRequests())
	maps.Copy(reqs, cacheRequests())
	maps.Copy(reqs, structuredRequests())
	return reqs
}

// structuredRequests are the requests of TestBodyParity with an output
// schema: native, through the tool, by the hook alone, and refused.
func structuredRequests() map[string]*provider.Request {
	with := func(mode provider.StructuredOutput, schema string, f func(*provider.Request)) *provider.Request {
		r := &provider.Request{Model: "claude-test", MaxTokens: 4096, Messages: []recovery.Message{recovery.UserText("Hi.")},
			OutputSchema: []byte(schema), StructuredOutput: mode}
		f(r)
		return r
	}
	native := func(schema string) *provider.Request {
		return with(provider.StructuredNative, schema, func(*provider.Request) {})
	}
	tool := func(f func(*provider.Request)) *provider.Request { return with(provider.StructuredTool, schema, f) }
	zoom := provider.Tool{Name: "zoom", InputSchema: []byte(`{"properties":{"factor":{"type":"number"}}}`)}
	f := func(v float64) *float64 { return &v }
	return map[string]*provider.Request{
		"structured native":              native(schema),
		"structured native numbers":      native(`{"type":"object","properties":{"n":{"minimum":1.50,"maximum":1e3,"default":-0}},"x":12345678901234567890}`),
		"structured native empty":        native(`{}`),
		"structured native spaced":       native(" {\n \"type\" : \"string\" }\n"),
		"structured native empty key":    native(`{"":1,"properties":{"":{}}}`),
		"structured native odd strings":  native("{\"d\":\"\xff\xfe <&> \\u2028 \\ud800\",\"\xff\":[\"\xe2\x82\"]}"),
		"structured native array":        native(`[]`),
		"structured native null":         native(`null`),
		"structured native string":       native(`"x"`),
		"structured native invalid":      native(`{"a":`),
		"structured native huge number":  native(`{"max":1e400}`),
		"structured native and thinking": with(provider.StructuredNative, schema, func(r *provider.Request) { r.ThinkingBudget = 2000 }),
		"structured native all params": with(provider.StructuredNative, schema, func(r *provider.Request) {
			r.System, r.Sampling, r.StopSequences = "Be brief.", provider.Sampling{Temperature: f(0.5), TopP: f(0.9), TopK: 3}, []string{"END"}
			r.Tools, r.ToolChoice = []provider.Tool{zoom}, provider.ToolChoice{Mode: provider.ToolChoiceAuto}
		}),
		"structured native bad messages": with(provider.StructuredNative, `[]`, func(r *provider.Request) {
			r.Messages = append(r.Messages, recovery.Message{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: 42}}})
		}),
		"structured native bad tool choice": with(provider.StructuredNative, `[]`, func(r *provider.Request) { r.ToolChoice.Mode = 9 }),
		"structured tool":                   tool(func(*provider.Request) {}),
		"structured tool after tools": tool(func(r *provider.Request) {
			r.Tools = []provider.Tool{zoom}
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceAny}
		}),
		"structured tool odd schema":   with(provider.StructuredTool, `{"type":"array","items":{"type":"number"}}`, func(*provider.Request) {}),
		"structured tool empty schema": with(provider.StructuredTool, `{}`, func(*provider.Request) {}),
		"structured tool bad schema":   with(provider.StructuredTool, `[1]`, func(*provider.Request) {}),
		"structured tool name taken": tool(func(r *provider.Request) {
			r.Tools = []provider.Tool{{Name: StructuredToolName, InputSchema: []byte(`{"properties":{}}`)}}
		}),
		"structured tool thinking off":        tool(func(r *provider.Request) { r.ThinkingBudget, r.Reasoning.Interleaved = 2000, true }),
		"structured tool with a prefill":      tool(func(r *provider.Request) { r.Prefill = `{"a": ` }),
		"structured tool unknown tool choice": tool(func(r *provider.Request) { r.ToolChoice.Mode = 9 }),
		"structured tool cache marks": tool(func(r *provider.Request) {
			r.CacheSystem, r.Tools = true, []provider.Tool{{Name: "zoom", InputSchema: zoom.InputSchema, CacheBreakpoint: true}}
		}),
		"structured hook":                   with(provider.StructuredHook, schema, func(*provider.Request) {}),
		"structured hook bad schema":        with(provider.StructuredHook, `[]`, func(*provider.Request) {}),
		"structured unknown mode":           with(7, schema, func(*provider.Request) {}),
		"structured unknown mode no schema": with(7, "", func(*provider.Request) {}),
		"structured tool no schema":         with(provider.StructuredTool, "", func(r *provider.Request) { r.Tools = []provider.Tool{{Name: StructuredToolName}} }),
	}
}

// cacheRequests are the requests of TestBodyParity that carry prompt cache
// marks: on the system prompt, the tools and each kind of block, moved by
// the final assistant message's trim, and more than the API takes.
func cacheRequests() map[string]*provider.Request {
	mark := func(b recovery.Block) recovery.Block { b.CacheBreakpoint = true; return b }
	text := func(s string) recovery.Block { return mark(recovery.TextBlock(s)) }
	user := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleUser, Blocks: blocks}
	}
	assistant := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleAssistant, Blocks: blocks}
	}
	call := recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: "c", ToolName: "f", ToolInput: []byte(`{}`)}
	thinking := recovery.Block{Kind: recovery.BlockThinking, Text: "hmm", Signature: "sig"}
	tool := func(name string, marked bool) provider.Tool {
		return provider.Tool{Name: name, InputSchema: []byte(`{"properties":{}}`), CacheBreakpoint: marked}
	}
	with := func(f func(*provider.Request), msgs ...recovery.Message) *provider.Request {
		r := &provider.Request{Model: "claude-test", MaxTokens: 4096, Messages: msgs}
		f(r)
		return r
	}
	none := func(*provider.Request) {}
	system := func(r *provider.Request) { r.System, r.CacheSystem = "Be brief.", true }
	return map[string]*provider.Request{
		"cache system":       with(system, recovery.UserText("Hi.")),
		"cache system unset": with(func(r *provider.Request) { r.System = "Be brief." }, recovery.UserText("Hi.")),
		"cache system on the last tool": with(func(r *provider.Request) {
			r.CacheSystem, r.Tools = true, []provider.Tool{tool("a", false), tool("b", false)}
		}, recovery.UserText("Hi.")),
		"cache system on a marked tool": with(func(r *provider.Request) {
			r.CacheSystem, r.Tools = true, []provider.Tool{tool("a", false), tool("b", true)}
		}, recovery.UserText("Hi.")),
		"cache system with nothing": with(func(r *provider.Request) { r.CacheSystem = true }, recovery.UserText("Hi.")),
		"cache tools": with(func(r *provider.Request) {
			r.Tools = []provider.Tool{tool("a", true), tool("b", false), tool("c", true)}
		}, recovery.UserText("Hi.")),
		"cache each block": with(none,
			user(text("Look."), mark(recovery.Block{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("x")}),
				mark(recovery.Block{Kind: recovery.BlockDocument, URL: "https://x.test/d.pdf", Title: "d"})),
			assistant(mark(thinking), mark(recovery.Block{Kind: recovery.BlockThinking, Redacted: true, Data: []byte("r")}), mark(call)),
			user(mark(recovery.Block{Kind: recovery.BlockToolResult, ToolUseID: "c", Text: "ok"}))),
		"cache image URL and document data": with(none, user(mark(recovery.Block{Kind: recovery.BlockImage, URL: "https://x.test/i.png"}),
			mark(recovery.Block{Kind: recovery.BlockDocument, Data: []byte("%PDF")}), text("?"))),
		"cache empty text":                 with(none, user(text(""), recovery.TextBlock("Hi.")), user(text(""))),
		"cache final assistant trimmed":    with(none, recovery.UserText("Go."), assistant(text("Let me  "))),
		"cache final whitespace moves":     with(none, recovery.UserText("Go."), assistant(recovery.TextBlock("Let me"), text(" \n"))),
		"cache final whitespace onto call": with(none, recovery.UserText("Go."), assistant(call, text(" "), recovery.TextBlock("\t"))),
		"cache final empty stays off":      with(none, recovery.UserText("Go."), assistant(recovery.TextBlock("Let me "), text(""))),
		"cache final onto thinking":        with(none, recovery.UserText("Go."), assistant(thinking, text(" "))),
		"cache final all whitespace":       with(none, recovery.UserText("Go."), assistant(text(" "), text("\n"))),
		"cache earlier assistant kept":     with(none, assistant(text("a  ")), recovery.UserText("b"), assistant(text(" "))),
		"cache with prefill": with(func(r *provider.Request) { r.Prefill = "So " }, user(text("Go.")),
			assistant(text("a "))),
		"cache over four from the tools": with(func(r *provider.Request) {
			system(r)
			r.Tools = []provider.Tool{tool("a", true), tool("b", true)}
		}, user(text("1"), text("2")), assistant(text("3"))),
		"cache over four into the system": with(func(r *provider.Request) {
			system(r)
			r.Tools = []provider.Tool{tool("a", true), tool("b", true), tool("c", true)}
		}, user(text("1"), text("2"))),
		"cache over four into the blocks": with(func(r *provider.Request) {
			r.Tools = []provider.Tool{tool("a", true)}
		}, user(text("1"), text("2"), text("3")), assistant(text("4")), user(text(""), text("5"))),
		"cache over four, moved marks": with(none, user(text("1"), text("2")), assistant(text("3")),
			user(text("4")), assistant(recovery.TextBlock("5"), text(" "), text("\n"))),
	}
}

// paramsRequests are the requests of TestBodyParity that carry the
// caller's model parameters: each alone, with its edge values, together,
// and refused.
func paramsRequests() map[string]*provider.Request {
	f := func(v float64) *float64 { return &v }
	with := func(f func(*provider.Request)) *provider.Request {
		r := &provider.Request{Model: "claude-test", MaxTokens: 4096, Messages: []recovery.Message{recovery.UserText("Hi.")}}
		f(r)
		return r
	}
	sampling := func(s provider.Sampling) *provider.Request { return with(func(r *provider.Request) { r.Sampling = s }) }
	stops := func(seqs ...string) *provider.Request {
		return with(func(r *provider.Request) { r.StopSequences = seqs })
	}
	choice := func(c provider.ToolChoice) *provider.Request {
		return with(func(r *provider.Request) {
			r.ToolChoice = c
			r.Tools = []provider.Tool{{Name: "zoom", InputSchema: []byte(`{"properties":{"factor":{"type":"number"}}}`)}}
		})
	}
	sixteen := make([]string, 16) // the most the API takes, each of the most bytes the service takes
	for i := range sixteen {
		sixteen[i] = strings.Repeat("\n\"<"+string(rune('a'+i)), 64)
	}
	return map[string]*provider.Request{
		"temperature 0":             sampling(provider.Sampling{Temperature: f(0)}),
		"temperature negative zero": sampling(provider.Sampling{Temperature: f(math.Copysign(0, -1))}),
		"temperature 1":             sampling(provider.Sampling{Temperature: f(1)}),
		"temperature 0.7":           sampling(provider.Sampling{Temperature: f(0.7)}),
		"temperature 17 digits":     sampling(provider.Sampling{Temperature: f(0.30000000000000004)}),
		"temperature NaN":           sampling(provider.Sampling{Temperature: f(math.NaN())}),
		"temperature infinite":      sampling(provider.Sampling{Temperature: f(math.Inf(-1))}),
		"top_p 1":                   sampling(provider.Sampling{TopP: f(1)}),
		"top_p 0.95":                sampling(provider.Sampling{TopP: f(0.95)}),
		"top_p 1e-6":                sampling(provider.Sampling{TopP: f(1e-6)}),
		"top_p under 1e-6":          sampling(provider.Sampling{TopP: f(9.99e-7)}),
		"top_p 1e-9":                sampling(provider.Sampling{TopP: f(1e-9)}),
		"top_p 1.5e-10":             sampling(provider.Sampling{TopP: f(1.5e-10)}),
		"top_p 1e-100":              sampling(provider.Sampling{TopP: f(1e-100)}),
		"top_p smallest":            sampling(provider.Sampling{TopP: f(math.SmallestNonzeroFloat64)}),
		"top_p 1e21":                sampling(provider.Sampling{TopP: f(1e21)}),
		"top_p NaN":                 sampling(provider.Sampling{TopP: f(math.NaN())}),
		"top_k":                     sampling(provider.Sampling{TopK: 40}),
		"top_k 1":                   sampling(provider.Sampling{TopK: 1}),
		"seed is not sent":          sampling(provider.Sampling{Seed: new(int64(7))}),
		"sampling all": sampling(provider.Sampling{Temperature: f(0.7), TopP: f(0.9), TopK: 5,
			Seed: new(int64(-1))}),
		"stop sequence":                        stops("\n\nHuman:"),
		"stop sequences escaped":               stops(`"quoted"`, "a\nb\r\t\x00\x1f", "é 😀 \u2028\u2029", "</script>", "<&>", `back\slash`, "\xff\xe2\x82"),
		"stop sequences sixteen":               stops(sixteen...),
		"stop sequences empty":                 stops(),
		"stop sequences nil":                   stops(nil...),
		"stop sequence empty":                  stops(""),
		"tool choice default":                  choice(provider.ToolChoice{}),
		"tool choice default named":            choice(provider.ToolChoice{Name: "zoom"}),
		"tool choice default disable parallel": choice(provider.ToolChoice{DisableParallel: true}),
		"tool choice auto":                     choice(provider.ToolChoice{Mode: provider.ToolChoiceAuto}),
		"tool choice auto disable parallel":    choice(provider.ToolChoice{Mode: provider.ToolChoiceAuto, DisableParallel: true}),
		"tool choice any":                      choice(provider.ToolChoice{Mode: provider.ToolChoiceAny}),
		"tool choice any disable parallel":     choice(provider.ToolChoice{Mode: provider.ToolChoiceAny, DisableParallel: true}),
		"tool choice none":                     choice(provider.ToolChoice{Mode: provider.ToolChoiceNone}),
		"tool choice none disable parallel":    choice(provider.ToolChoice{Mode: provider.ToolChoiceNone, DisableParallel: true}),
		"tool choice tool":                     choice(provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom"}),
		"tool choice tool disable parallel": choice(provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom",
			DisableParallel: true}),
		"tool choice tool escaped": choice(provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "<z\"\u2028\xff>"}),
		"tool choice tool unnamed": choice(provider.ToolChoice{Mode: provider.ToolChoiceTool}),
		"tool choice without tools": with(func(r *provider.Request) {
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceNone}
		}),
		"tool choice unknown": choice(provider.ToolChoice{Mode: 99, DisableParallel: true}),
		"all parameters": with(func(r *provider.Request) {
			r.System = "Be brief."
			r.Sampling = provider.Sampling{Temperature: f(0), TopP: f(1e-9), TopK: 3}
			r.StopSequences = []string{"</answer>", "\n\n"}
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom", DisableParallel: true}
			r.Tools = []provider.Tool{{Name: "zoom", Description: "Zooms.", InputSchema: []byte(schema)}}
		}),
		"all parameters thinking": with(func(r *provider.Request) {
			r.System, r.ThinkingBudget = "Be brief.", 2000
			r.Sampling = provider.Sampling{TopP: f(0.95)}
			r.StopSequences = []string{"END"}
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceAuto, DisableParallel: true}
			r.Tools = []provider.Tool{{Name: "zoom", InputSchema: []byte(schema)}}
		}),
		// A request refused twice is refused for what the SDK refused first:
		// its params' mapping (messages, tool choice, tools), and only then
		// its encoding (a number JSON cannot carry).
		"NaN and a bad message": with(func(r *provider.Request) {
			r.Sampling.Temperature = f(math.NaN())
			r.Messages = append(r.Messages, recovery.Message{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: 42}}})
		}),
		"NaN and an unknown tool choice": with(func(r *provider.Request) {
			r.Sampling.TopP, r.ToolChoice.Mode = f(math.Inf(1)), 7
		}),
		"NaN and a bad schema": with(func(r *provider.Request) {
			r.Sampling.Temperature = f(math.NaN())
			r.Tools = []provider.Tool{{Name: "f", InputSchema: []byte(`[]`)}}
		}),
		"unknown tool choice and a bad schema": with(func(r *provider.Request) {
			r.ToolChoice.Mode = -1
			r.Tools = []provider.Tool{{Name: "f", InputSchema: []byte(`[]`)}}
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
	req := &provider.Request{Model: cut(), System: cut(), MaxTokens: rng.IntN(5) * 1024, CacheSystem: rng.IntN(3) == 0}
	if rng.IntN(3) == 0 {
		req.Prefill = cut()
	}
	if rng.IntN(2) == 0 {
		req.ThinkingBudget = rng.IntN(8000)
		req.Reasoning.Interleaved = rng.IntN(2) == 0
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
	req.Sampling, req.ToolChoice = genSampling(rng), genToolChoice(rng, cut)
	if rng.IntN(3) == 0 {
		req.OutputSchema, req.StructuredOutput = schema, provider.StructuredOutput(rng.IntN(3))
		if rng.IntN(20) == 0 {
			req.StructuredOutput = provider.StructuredOutput(rng.IntN(10))
		}
	}
	for range rng.IntN(4) {
		req.StopSequences = append(req.StopSequences, cut())
	}
	for range rng.IntN(3) {
		t := provider.Tool{Name: cut(), Description: cut(), CacheBreakpoint: rng.IntN(3) == 0}
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

// genSampling is sampling parameters, each set or not, their numbers
// edge values, any in [0, 1) or, now and then, any float64 bits (NaN and
// the infinities included).
func genSampling(rng *rand.Rand) provider.Sampling {
	edges := []float64{0, 1, 0.7, 1e-6, 9.99e-7, 1e-9, 1e21, 5e-324, math.Copysign(0, -1)}
	num := func() *float64 {
		var v float64
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			v = edges[rng.IntN(len(edges))]
		case 2:
			v = rng.Float64()
		default:
			if v = math.Float64frombits(rng.Uint64()); rng.IntN(10) != 0 && (math.IsNaN(v) || math.IsInf(v, 0)) {
				v = 0.5 // mostly finite: a refused body compares nothing else
			}
		}
		return &v
	}
	s := provider.Sampling{Temperature: num(), TopP: num()}
	if rng.IntN(2) == 0 {
		s.TopK = rng.IntN(500) - 10
	}
	return s
}

// genToolChoice is a tool choice of any mode, an unknown one now and then.
func genToolChoice(rng *rand.Rand, cut func() string) provider.ToolChoice {
	c := provider.ToolChoice{Mode: provider.ToolChoiceMode(rng.IntN(5)), DisableParallel: rng.IntN(2) == 0}
	if rng.IntN(40) == 0 {
		c.Mode = provider.ToolChoiceMode(rng.IntN(100) - 50)
	}
	if c.Mode == provider.ToolChoiceTool || rng.IntN(8) == 0 {
		c.Name = cut()
	}
	return c
}

// genBlock is a block of random kind; an unknown kind now and then. Text
// blocks end in whitespace often, for the final assistant message's trim.
func genBlock(rng *rand.Rand, cut func() string, input []byte) recovery.Block {
	kinds := []recovery.BlockKind{recovery.BlockText, recovery.BlockText, recovery.BlockImage,
		recovery.BlockToolUse, recovery.BlockToolResult, recovery.BlockThinking, recovery.BlockDocument}
	b := recovery.Block{Kind: kinds[rng.IntN(len(kinds))], CacheBreakpoint: rng.IntN(3) == 0}
	if rng.IntN(40) == 0 {
		b.Kind = recovery.BlockKind(rng.IntN(100))
	}
	switch b.Kind {
	case recovery.BlockImage, recovery.BlockDocument:
		b.MediaType, b.Data = cut(), []byte(cut())
		if rng.IntN(3) == 0 {
			b.URL = "https://" + cut()
		}
		if b.Kind == recovery.BlockDocument && rng.IntN(2) == 0 {
			b.Title = cut()
		}
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
